"""Training loop, checkpoints and resume."""
