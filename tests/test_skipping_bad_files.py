"""A library read from a disk skips its bad files by default: counted, listed in a report beside the output, exit
status 3; --skip-bad (exit 0) and --strict (the first bad file stops the command) say otherwise; a manifest's bad
line still stops it. A missing file says "file not found"; a closed stdout ends a command quietly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clitools import assert_user_error, manifest_lines, run_cli, truncate_wav, write_tone
from mlatr.commands._skipping import EXIT_SKIPPED, REPORT_SUFFIX
from mlatr.errors import MissingFileError
from mlatr.search import Index


@pytest.fixture
def library(tmp_path):
    """A folder of two good sounds and four bad files: (folder, {bad file name: a fragment of its reason})."""
    lib = tmp_path / "lib"
    write_tone(lib / "good1.wav", 0.5)
    write_tone(lib / "sub" / "good2.wav", 0.7)
    truncate_wav(write_tone(lib / "cut.wav", 1.0), 100)
    (lib / "notes.wav").write_text("not a sound at all")
    (lib / "empty.flac").write_bytes(b"")
    os.mkfifo(lib / "pipe.wav")
    return lib, {"cut.wav": "truncated audio", "notes.wav": "cannot read audio", "empty.flac": "cannot read audio",
                 "pipe.wav": "FIFO"}


def _report(path: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert all(set(r) == {"file", "id", "line", "reason"} for r in rows)
    return {Path(r["file"]).name: r["reason"] for r in rows}


def _assert_report(path: Path, bad: dict[str, str]) -> None:
    found = _report(path)
    assert sorted(found) == sorted(bad), found
    for name, fragment in bad.items():
        assert fragment in found[name], (name, found[name])


def test_index_build_of_a_folder_skips_lists_and_exits_3(served_toy, library, tmp_path, capsys):
    lib, bad = library
    out = tmp_path / "lib.idx"
    r = run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", out, "--no-progress")
    assert r.code == EXIT_SKIPPED == 3, r.err
    report = Path(str(out) + REPORT_SUFFIX)
    assert f"mlatr: skipped 4 bad file(s), each listed with its reason in {report}" in r.err
    assert "skipped 4 bad file(s)" in r.out
    _assert_report(report, bad)
    assert sorted(Index.load(out).ids) == ["good1", "sub/good2"]
    # --skip-bad: skips are expected, exit 0, the same report
    r = run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", tmp_path / "b.idx", "--skip-bad",
                "--no-progress")
    assert r.code == 0 and sorted(Index.load(tmp_path / "b.idx").ids) == ["good1", "sub/good2"]
    _assert_report(Path(str(tmp_path / "b.idx") + REPORT_SUFFIX), bad)
    # --strict: the first bad file stops the build, nothing written
    r = run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", tmp_path / "c.idx", "--strict",
                "--no-progress")
    assert_user_error(r)
    assert not (tmp_path / "c.idx").exists() and not Path(str(tmp_path / "c.idx") + REPORT_SUFFIX).exists()
    # a later build that skips nothing removes the stale report: the file always describes the last run
    for name in bad:
        (lib / name).unlink()
    r = run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", out, "--no-progress")
    assert r.code == 0 and not report.exists() and "skipped" not in r.err


def test_sound_files_and_skip_report_elsewhere(served_toy, library, tmp_path, capsys):
    lib, _ = library
    report = tmp_path / "reports" / "bad.jsonl"
    report.parent.mkdir()
    r = run_cli(capsys, "index", "build", lib / "good1.wav", lib / "cut.wav", "--model", served_toy[1],
                "-o", tmp_path / "x.idx.npz", "--skip-report", report, "--no-progress")
    assert r.code == 3 and Index.load(tmp_path / "x.idx.npz").ids == ["good1"]
    _assert_report(report, {"cut.wav": "truncated audio: the header declares 16,000 frames"})
    assert not Path(str(tmp_path / "x.idx.npz") + REPORT_SUFFIX).exists()
    os.mkfifo(tmp_path / "fifo.jsonl")  # the report is an output like any other: never a FIFO, checked first
    r = run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", tmp_path / "y.idx",
                "--skip-report", tmp_path / "fifo.jsonl", "--no-progress")
    assert_user_error(r, "--skip-report", "FIFO")
    assert not (tmp_path / "y.idx").exists()
    r = run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", tmp_path / "z.idx", "--strict",
                "--skip-bad")
    assert r.code == 2 and "not allowed with argument" in r.err


def test_a_manifests_bad_line_still_stops_the_build_unless_skip_bad(served_toy, library, tmp_path, capsys):
    lib, _ = library
    m = manifest_lines(tmp_path / "m.jsonl", [
        {"id": "a", "audio": str(lib / "good1.wav"), "captions": {"eng": ["a tone"]}},
        {"id": "b", "audio": str(lib / "cut.wav"), "captions": {"eng": ["a cut tone"]}}])
    with m.open("a") as f:
        f.write('{"id": "broken", "audio": \n')
    base = ["index", "build", m, "--model", served_toy[1], "-o", tmp_path / "m.idx", "--no-progress"]
    assert_user_error(run_cli(capsys, *base), f"{m}:3")
    r = run_cli(capsys, *base, "--skip-bad")
    assert r.code == 0 and Index.load(tmp_path / "m.idx").ids == ["a"]
    found = [json.loads(line) for line in Path(str(tmp_path / "m.idx") + REPORT_SUFFIX).read_text().splitlines()]
    assert [(Path(x["file"]).name, x["line"], x["id"]) for x in found] == [("m.jsonl", 3, None), ("cut.wav", None, "b")]
    assert f"{m}:2: audio: clip 'b'" in found[1]["reason"]  # a listed clip's reason names its manifest line


def test_embed_classify_and_folder_import_skip_by_default(served_toy, library, tmp_path, capsys):
    lib, bad = library
    out = tmp_path / "e.npz"
    r = run_cli(capsys, "embed", lib, "--model", served_toy[1], "-o", out, "--no-progress")
    assert r.code == 3, r.err
    _assert_report(Path(str(out) + REPORT_SUFFIX), bad)
    with np.load(out) as z:
        assert sorted(z["ids"]) == ["good1", "sub/good2"]
    r = run_cli(capsys, "classify", lib, "--labels", "low tone,high tone", "--model", served_toy[1], "--json")
    assert r.code == 3, r.err
    body = json.loads(r.out)
    assert sorted(x["id"] for x in body["results"]) == ["good1", "sub/good2"]
    assert sorted(Path(s["file"]).name for s in body["skipped"]) == sorted(bad)
    assert "mlatr: skipped 4 bad file(s) (--strict" in r.err  # no file named: classify writes none by default
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl")
    assert r.code == 3, r.err
    # the folder import reads headers only for durations: the FIFO, the empty, the non-audio and the cut file
    _assert_report(Path(str(tmp_path / "m.jsonl") + REPORT_SUFFIX), bad)
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "n.jsonl", "--strict")
    assert_user_error(r)
    assert not (tmp_path / "n.jsonl").exists()


def test_every_file_bad_is_still_an_error(served_toy, tmp_path, capsys):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "a.wav").write_text("no")
    (lib / "b.wav").write_text("no")
    assert_user_error(run_cli(capsys, "index", "build", lib, "--model", served_toy[1], "-o", tmp_path / "x.idx",
                              "--no-progress"), "none of the 2 new clip(s)")
    assert not (tmp_path / "x.idx").exists()
    assert_user_error(run_cli(capsys, "embed", lib, "--model", served_toy[1], "-o", tmp_path / "x.npz",
                              "--no-progress"), "none of the 2 clip(s) could be read")


@pytest.mark.parametrize("argv", [
    ("search", "{missing}", "a tone"),
    ("index", "build", "{missing}", "--model", "{model}", "-o", "{tmp}/o.idx"),
    ("index", "build", "--manifest", "{missing}", "--model", "{model}", "-o", "{tmp}/o.idx"),
    ("embed", "{missing}", "--model", "{model}", "-o", "{tmp}/o.npz"),
    ("classify", "{missing}", "--labels", "a,b", "--model", "{model}"),
    ("eval", "--manifest", "{missing}", "--model", "{model}"),
    ("serve", "{missing}"),
    ("index", "info", "{missing}"),
    ("search", "{index}", "a tone", "--model", "{missing}"),
])
def test_a_missing_file_says_file_not_found(served_toy, tmp_path, capsys, argv):
    missing = tmp_path / "nowhere" / "gone.jsonl"
    values = {"missing": missing, "model": served_toy[1], "tmp": tmp_path, "index": served_toy[2]}
    r = run_cli(capsys, *[a.format(**values) for a in argv])
    assert_user_error(r, f"{missing}: file not found (")
    assert len(r.err.strip().splitlines()) == 1


def test_missing_file_error_is_a_file_not_found_error_in_python(served_toy, tmp_path):
    with pytest.raises(FileNotFoundError, match="gone.idx: file not found") as caught:
        Index.load(tmp_path / "gone.idx")
    assert isinstance(caught.value, MissingFileError) and caught.value.filename == str(tmp_path / "gone.idx")


@pytest.mark.parametrize("argv", [("search", "{index}", "a tone", "--json", "-k", "20"),
                                  ("index", "info", "{index}", "--check")])
def test_a_closed_stdout_ends_the_command_quietly(served_toy, argv):
    """``mlatr search IDX "..." --json | head -1``: the reader has gone before the command writes (here closed before
    it starts), so every write fails; the command ends with nothing on stderr, status 141 as after SIGPIPE."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parents[1] / "src"),
                                                         os.environ.get("PYTHONPATH", "")]))
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "mlatr", *[a.format(index=served_toy[2]) for a in argv]],
                              stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(write)
    assert proc.stderr == "" and proc.returncode == 141, proc.stderr
