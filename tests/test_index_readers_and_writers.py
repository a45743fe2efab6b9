"""Writers and readers of one index at the same time: a reader loaded before a compaction keeps answering from the
shards the compaction removed (it holds them open), a fresh reader sees the compacted index with the same
answers; a second writer of an index waits for the first, saying for whom (the test waits on what the other
process says, never on a duration), then writes onto its result, so no write is lost."""

import subprocess
import sys
import time

from clitools import run_cli
from mlatr.search import Index
from servetools import build_toy_index


def _answers(index: Index, sound: str) -> list:
    hits = index.search_text("a low tone", None, 20)
    return [(h.id, h.captions, h.path) for h in hits] + [h.id for h in index.search_audio(sound, k=5)]


def test_a_reader_keeps_answering_while_the_index_is_compacted(served_toy, tmp_path, capsys):
    manifest, ckpt, _ = served_toy
    out = build_toy_index(manifest, ckpt, tmp_path / "lib.idx", first=12)
    build_toy_index(manifest, ckpt, out, add=True)
    assert run_cli(capsys, "index", "delete", out, "clip003").code == 0
    reader = Index.load(out)
    sound = reader.paths[0]
    before = _answers(reader, sound)
    shards = sorted(p.name for p in out.iterdir() if p.name.startswith("shard-"))
    assert len(shards) == 2
    done = subprocess.run([sys.executable, "-m", "mlatr", "index", "compact", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not set(shards) & {p.name for p in out.iterdir()}  # the shards the reader loaded are gone
    assert _answers(reader, sound) == before and reader.summary(check=True)["clips"] == 19
    fresh = Index.load(out)
    assert len(fresh) == 19 and "clip003" not in fresh.ids and _answers(fresh, sound) == before


HOLD = """
import sys
from mlatr.writer_lock import writer_lock
with writer_lock(sys.argv[1], "index", folder=True):
    print("held", flush=True)
    sys.stdin.readline()
"""


def test_a_second_writer_waits_for_the_first_and_loses_nothing(served_toy, tmp_path):
    manifest, ckpt, _ = served_toy
    out = build_toy_index(manifest, ckpt, tmp_path / "lib.idx", first=12)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waiter = subprocess.Popen([sys.executable, "-m", "mlatr", "index", "delete", str(out), "clip001"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = ""
        deadline = time.monotonic() + 120
        while "waiting for process" not in said and time.monotonic() < deadline:
            said += waiter.stderr.readline()  # it says so once, before it waits
        assert f"waiting for process {holder.pid}" in said and waiter.poll() is None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert waiter.wait(timeout=120) == 0, waiter.stderr.read()
    finally:
        holder.kill()
        holder.wait()
    index = Index.load(out)
    assert len(index) == 11 and len(index.deleted_rows) == 1 and "clip001" not in {h.id for h in
                                                                                  index.search_text("a tone", None, 20)}
