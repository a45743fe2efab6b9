"""Experiment grids: several methods x seeds trained, evaluated and compared (the demo and the paper tables)."""
