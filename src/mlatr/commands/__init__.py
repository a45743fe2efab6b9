"""One module per CLI command; each defines ``HELP``, ``add_arguments(parser)`` and ``run(args) -> int``.

Modules import heavy dependencies (torch, matplotlib) inside ``run`` so that ``mlatr --help`` is fast.
"""
