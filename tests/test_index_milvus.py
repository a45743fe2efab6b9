"""The Milvus backend (milvus-lite): build, add, delete and search equal the local exact index's."""

import numpy as np
import pytest

from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.inference.checkpoint import load_model
from mlatr.search import Index, build_index
from toydata import train_toy_model

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_toy_model(tmp_path_factory.mktemp("milvus"))


def _same(a, b):
    assert [h.id for h in a] == [h.id for h in b]
    assert np.allclose([h.score for h in a], [h.score for h in b], atol=1e-5)
    assert [h.path for h in a] == [h.path for h in b] and [h.captions for h in a] == [h.captions for h in b]


def test_milvus_round_trip_equals_local_exact_index(trained, tmp_path, capsys):
    manifest_path, ckpt = trained
    manifest = Manifest.load(manifest_path)
    first = Manifest(clips=manifest.clips[:12], root=manifest.root, path=manifest.path)
    first_path = manifest_path.parent / "first12.jsonl"
    first.save(first_path)
    target = f"milvus:{tmp_path / 'lib.db'}"
    local = tmp_path / "lib.idx"
    for out in (target, str(local)):
        base = ["index", "build", "--model", str(ckpt), "--caption-langs", "eng,fra", "--no-progress"]
        assert main(base + ["--manifest", str(first_path), "--to", out]) == 0
        assert main(base + ["--manifest", str(manifest_path), "--to", out, "--add"]) == 0
    assert "20 clips (8 encoded" in capsys.readouterr().out
    remote, exact = Index.load(target), Index.load(local, backend="numpy")
    assert sorted(remote.ids) == sorted(exact.ids) and len(remote) == 20
    for query, lang in (("a single low tone", "eng"), ("deux sons aigus", "fra")):
        _same(remote.search_text(query, lang, k=20, rank="audio"), exact.search_text(query, lang, k=20, rank="audio"))
    clips, clips_x = remote.search_audio(exact.paths[3], k=8), exact.search_audio(exact.paths[3], k=8)
    caps, caps_x = clips.caption_hits, clips_x.caption_hits
    _same(clips, clips_x)
    # equal captions of different clips tie; the two number their caption rows differently
    def rows(found):
        return [(round(c.score, 5), c.text, c.lang) for c in found]

    assert rows(caps) == rows(caps_x)
    # delete: gone from both, searches still equal
    gone = [h.id for h in exact.search_text("a single low tone", "eng", k=3, rank="audio")]
    assert main(["index", "delete", target, *gone]) == 0
    assert main(["index", "delete", str(local), *gone]) == 0
    remote, exact = Index.load(target), Index.load(local, backend="numpy")
    assert len(remote) == len(exact) == 17
    _same(remote.search_text("a single low tone", "eng", k=17, rank="audio"),
          exact.search_text("a single low tone", "eng", k=17, rank="audio"))
    assert main(["search", target, "a single low tone", "--json"]) == 2  # hybrid needs local vectors: refused
    assert "use rank audio" in capsys.readouterr().err
    assert main(["search", target, "a single low tone", "--json", "--rank", "audio"]) == 0
    said = capsys.readouterr()
    assert gone[0] not in said.out and "Traceback" not in said.err and "Error" not in said.err
    # the model recorded in the collection is the one that encodes the queries
    assert remote.meta["checkpoint"] == exact.meta["checkpoint"]


def test_milvus_target_errors(trained, tmp_path, capsys):
    manifest_path, ckpt = trained
    assert main(["search", f"milvus:{tmp_path / 'empty.db'}", "a tone"]) == 2
    assert "holds no mlatr index" in capsys.readouterr().err
    assert main(["search", "milvus:nowhere", "a tone"]) == 2
    assert "expected milvus:PATH.db" in capsys.readouterr().err
    with pytest.raises(Exception, match="another model"):
        target = f"milvus:{tmp_path / 'a.db'}"
        build_index(load_model(ckpt), Manifest.load(manifest_path), target, caption_languages=["eng"])
        import shutil

        other = tmp_path / "other.pt"
        shutil.copy(ckpt, other)
        with open(other, "ab") as fh:
            fh.write(b"\0")
        build_index(load_model(other), Manifest.load(manifest_path), target, add=True)
