"""The lab: research code beside the library (issue 49).

What a user imports to search a sound library or train a model (models, losses, training, inference, search,
serve, data import: the rest of :mod:`mlatr`) never imports from here; the lab imports the library. It holds:

- :mod:`mlatr.lab.experiments`: the papers' experiments and the real-sound recipe (``mlatr demo``,
  ``mlatr demo-real``, ``mlatr experiment ...``), their reports, and ablation-only variants (SupCLAP's earlier
  SVR form);
- :mod:`mlatr.lab.planning`: the GPU planner (``mlatr plan``);
- :mod:`mlatr.lab.augmented_views`: the frozen-feature study of augmented views.

``tests/test_layers.py`` checks the one-way dependency.
"""
