"""A server over a Milvus target picks up another writer's add and delete by its watch, as a folder index's
server picks up a new ``index.json``: the target's writes are its signature."""

import pytest

from mlatr.cli import main
from mlatr.data.manifest import Manifest
from mlatr.search import milvus as mv
from toydata import train_toy_model

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")
pytest.importorskip("fastapi", reason="the server's LiveIndex needs the serve extra")

from mlatr.serve.live_index import LiveIndex  # noqa: E402


def test_the_watch_sees_other_writes_to_a_milvus_target(tmp_path):
    manifest_path, ckpt = train_toy_model(tmp_path)
    manifest = Manifest.load(manifest_path)
    first = manifest_path.parent / "first.jsonl"
    Manifest(clips=manifest.clips[:6], root=manifest.root, path=manifest.path).save(first)
    target = f"milvus:{tmp_path / 'lib.db'}"
    build = ["index", "build", "--model", str(ckpt), "--no-progress", "-o", target]
    assert main(build + ["--manifest", str(first)]) == 0
    live = LiveIndex(target)
    assert len(live.reload().index) == 6
    one = mv.write_signature(target)
    assert len(one) == 1 and not live.changed() and not live.reload_if_changed()
    assert main(build + ["--manifest", str(manifest_path), "--add"]) == 0  # as another process would
    two = mv.write_signature(target)
    assert len(two) == 2 and set(one) < set(two) and live.changed()
    assert live.reload_if_changed() and len(live.current().index) == len(manifest.clips)
    assert main(["index", "delete", target, manifest.clips[0].id]) == 0
    assert live.reload_if_changed() and manifest.clips[0].id not in live.current().rows
    assert not live.changed()
