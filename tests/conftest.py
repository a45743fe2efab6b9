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


@pytest.fixture
def vectors_meta(tmp_path):
    """The meta of an index built from vectors alone (no model encodes a query: its checkpoint is a stand-in)."""
    from mlatr.file_state import file_sha256

    ckpt = tmp_path / "fake.pt"
    ckpt.write_bytes(b"not used: no query is encoded here")
    return {"checkpoint": {"path": str(ckpt), "sha256": file_sha256(ckpt)}, "sample_rate": 16000,
            "max_seconds": 10.0, "caption_languages": ["eng"]}


@pytest.fixture
def default_calibration(monkeypatch):
    """Indexes of vectors alone (``vectors_meta``: no model to carry a calibration) read their relevance with the
    default ranking's models, as ``Index.use_calibration(Calibration.default())`` gives one index, so that tests
    can compare it across rankings, filters and storages."""
    from mlatr.search import Index
    from mlatr.search.relevance import Calibration

    monkeypatch.setattr(Index, "_own_calibration", lambda self: (Calibration.default(), None))
