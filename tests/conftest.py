"""Fixtures shared by several test modules."""

import pytest


@pytest.fixture(scope="session")
def served_toy(tmp_path_factory):
    """(manifest, checkpoint, index) of the toy tones with a tiny trained model: the server tests' library."""
    from servetools import build_toy_index
    from toydata import train_toy_model

    root = tmp_path_factory.mktemp("served-toy")
    manifest, ckpt = train_toy_model(root)
    return manifest, ckpt, build_toy_index(manifest, ckpt, root / "toy.idx.npz")
