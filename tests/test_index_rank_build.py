"""torchrun index build: 2 processes (gloo, CPU) give the one-process index, and a killed run resumes."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from distributed_runs import free_port
from mlatr.data.manifest import Manifest
from mlatr.inference.checkpoint import load_model
from mlatr.search import Index, build_index
from mlatr.search.rank_build import rank_slice
from toydata import train_toy_model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return train_toy_model(tmp_path_factory.mktemp("rankbuild"))


def _torchrun(ckpt, manifest, out, *extra):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                           "--master_addr=127.0.0.1", f"--master_port={free_port()}", "-m", "mlatr", "index", "build",
                           "--model", str(ckpt), "--manifest", str(manifest), "-o", str(out),
                           "--caption-langs", "eng,fra", "--no-progress", *extra],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _equal(a: Index, b: Index):
    assert a.ids == b.ids and list(a.paths) == list(b.paths) and list(a.captions) == list(b.captions)
    assert np.allclose(np.asarray(a.embeddings), np.asarray(b.embeddings), atol=1e-5)
    assert np.allclose(np.asarray(a.caption_embeddings), np.asarray(b.caption_embeddings), atol=1e-5)
    assert list(a.caption_text) == list(b.caption_text) and np.array_equal(a.caption_clip, b.caption_clip)


def test_rank_slices_cover_in_order():
    for n in (0, 1, 5, 20):
        parts = [list(range(n))[rank_slice(n, r, 3)] for r in range(3)]
        assert sum(parts, []) == list(range(n)) and max(map(len, parts)) - min(map(len, parts)) <= 1


def test_torchrun_build_equals_one_process_and_resumes(trained, tmp_path):
    manifest_path, ckpt = trained
    one = build_index(load_model(ckpt), Manifest.load(manifest_path), tmp_path / "one.idx",
                      caption_languages=["eng", "fra"]).index
    out = tmp_path / "two.idx"
    done = _torchrun(ckpt, manifest_path, out)
    assert done.stdout.count("wrote ") == 1  # the summary is printed once
    two = Index.load(out)
    assert len(two.storage.shards) == 2 and [len(s.clips) for s in two.storage.shards] == [10, 10]
    _equal(two, one)
    # a run killed after rank 0 wrote its shard, before rank 1's and before the merge: started again, it
    # keeps rank 0's shard (not encoded again) and writes the rest
    again = tmp_path / "again.idx"
    _torchrun(ckpt, manifest_path, again)
    rank0, rank1 = (again / s.folder.name for s in Index.load(again).storage.shards)
    shutil.rmtree(rank1)
    (again / "index.json").unlink()
    before = {p.name: p.stat().st_mtime_ns for p in rank0.iterdir()}
    _torchrun(ckpt, manifest_path, again)
    assert {p.name: p.stat().st_mtime_ns for p in rank0.iterdir()} == before
    _equal(Index.load(again), one)
    # --add under torchrun: nothing new, nothing written
    assert "0 encoded" in _torchrun(ckpt, manifest_path, out, "--add").stdout
    _equal(Index.load(out), one)
