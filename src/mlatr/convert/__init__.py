"""Checkpoints of other projects turned into mlatr checkpoints (``mlatr import-checkpoint``).

- :mod:`~mlatr.convert.mlclap`: ML-CLAP's released model (CED-Base + SONAR + projections; ATRI §5.3).
"""
