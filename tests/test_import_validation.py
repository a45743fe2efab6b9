"""Import and manifest validation: split names, control characters in ids, paths out of
``--audio-dir``, absurd source times, FIFOs in an imported folder, webdataset's ``--skip-bad``.

Each rule lives in one place (:mod:`mlatr.data.manifest`, ``importers._common.join_audio``,
:func:`mlatr.file_kinds.special_file`) and is tried here through several importers and ``data validate``.
"""

from __future__ import annotations

import io
import json
import os
import signal
import tarfile
import textwrap
from pathlib import Path

import pytest

from clitools import assert_user_error, run_cli, write_tone
from mlatr.data.importers import (
    import_audiocaps_csv,
    import_clotho_csv,
    import_esc50_csv,
    import_folder,
    import_urbansound8k_csv,
)
from mlatr.data.manifest import Manifest, validate_manifest
from mlatr.errors import InputError

GOOD = {"id": "a", "audio": "a.wav", "split": "train", "captions": {"eng": ["a dog barks"]}}


def _manifest(tmp_path: Path, *rows: dict) -> Path:
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.parametrize("split,says", [
    ("Train", "not lower case: write 'train'"), ("TEST", "write 'test'"), ("Fold3", "write 'fold3'"),
    ("validation", "did you mean 'val'"), ("dev", "did you mean 'val'"), ("all", "unknown split 'all'"),
    ("tr ain", "unknown split"), ("train\x1b[2J", "control character U+001B"),
])
def test_split_names_are_exact(tmp_path, split, says):
    path = _manifest(tmp_path, GOOD, {**GOOD, "id": "b", "split": split})
    problems = validate_manifest(path)
    assert [(p.line, p.field) for p in problems] == [(2, "split")], problems
    assert says in problems[0].message
    with pytest.raises(InputError, match=f"{path}:2: split: "):
        Manifest.load(path)
    assert [c.id for c in Manifest.load(path, skip_bad=True)] == ["a"]


def test_known_split_names_pass(tmp_path):
    rows = [{**GOOD, "id": s, "split": s} for s in ("train", "val", "test", "fold1", "fold10")]
    assert validate_manifest(_manifest(tmp_path, *rows)) == []


def test_data_validate_names_a_miscased_split(tmp_path, capsys):
    path = _manifest(tmp_path, GOOD, {**GOOD, "id": "b", "split": "Train"})
    result = run_cli(capsys, "data", "validate", path)
    assert result.code == 1
    assert f"{path}:2: split: split 'Train' is not lower case" in result.out


@pytest.mark.parametrize("ident,says", [
    ("a\x07b", "U+0007"), ("a\nb", "U+000A"), ("x\x1b]0;title\x07", "U+001B"), ("a\u2028b", "U+2028"),
    ("a\x85b", "U+0085"), ("../../etc/passwd", "'..' part"), ("a/../../b", "'..' part"), ("/etc/passwd", "separator"),
    ("a\\..\\b", "'..' part"),
])
def test_ids_without_control_characters_or_escapes(tmp_path, ident, says):
    path = _manifest(tmp_path, GOOD, {**GOOD, "id": ident})
    problems = validate_manifest(path)
    assert [(p.line, p.field) for p in problems] == [(2, "id")], problems
    assert says in problems[0].message


def test_ids_with_folders_and_dots_still_pass(tmp_path):
    rows = [{**GOOD, "id": i} for i in ("Effects/CarPassing", "a..b", ".hidden/x", "v1.2/take 3")]
    assert validate_manifest(_manifest(tmp_path, *rows)) == []


@pytest.mark.parametrize("extra,field", [
    ({"start_time": -5}, "start_time"), ({"start_time": 90000}, "start_time"), ({"start_time": "10"}, "start_time"),
    ({"start": 3.0, "end": 2.0}, "end"), ({"end": -1}, "end"), ({"start_time": 1e300}, "start_time"),
])
def test_source_times_are_within_a_day(tmp_path, extra, field):
    problems = validate_manifest(_manifest(tmp_path, {**GOOD, **extra}))
    assert [(p.line, p.field) for p in problems] == [(1, field)], problems


def _csv(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_audiocaps_ids_cannot_leave_the_audio_dir(tmp_path):
    src = _csv(tmp_path, "ac.csv", """
        audiocap_id,youtube_id,start_time,caption
        1,good,0,a dog barks
        2,../../../etc/passwd,0,escape
        3,x/../../y,10,escape
        4,ok,-5,negative start
        5,ok2,nan,not a number
        6,ok3,100000,more than a day
        7,ok4,30,fine
    """)
    with pytest.raises(InputError, match=r"ac\.csv:3: audio: .*leads outside --audio-dir /data/ac"):
        import_audiocaps_csv([src], audio_dir="/data/ac")
    m = import_audiocaps_csv([src], audio_dir="/data/ac", skip_bad=True)
    assert [c.id for c in m] == ["Ygood", "Yok4"]
    assert sorted((p.line, p.field) for p in m.problems) == [(3, "audio"), (4, "audio"), (5, "start_time"),
                                                             (6, "start_time"), (7, "start_time")]
    assert all(c.audio.startswith("/data/ac/") and ".." not in c.audio for c in m)
    # an absolute name from a pattern is refused too (the id alone would have looked harmless)
    with pytest.raises(InputError, match="leads outside the manifest's folder"):
        import_audiocaps_csv([_csv(tmp_path, "abs.csv", "audiocap_id,youtube_id,start_time,caption\n"
                                                        "1,/etc/passwd,0,x\n")], audio_pattern="{youtube_id}")


def test_every_csv_importer_applies_the_shared_rules(tmp_path):
    clotho = _csv(tmp_path, "clotho.csv", """
        file_name,caption_1,caption_2,caption_3,caption_4,caption_5
        ../up.wav,a,b,c,d,e
        ok.wav,a,b,c,d,e
    """)
    m = import_clotho_csv([clotho], audio_dir="audio", split="train", skip_bad=True)
    assert [c.id for c in m] == ["ok"] and m.problems[0].line == 2
    ok = _csv(tmp_path, "ok.csv", "file_name,caption_1,caption_2,caption_3,caption_4,caption_5\nok.wav,a,b,c,d,e\n")
    with pytest.raises(InputError, match="ok.csv:2: split: split 'Train' is not lower case"):
        import_clotho_csv([ok], audio_dir="audio", split="Train")
    esc = _csv(tmp_path, "esc.csv", "filename,fold,target,category\nbell\x07.wav,1,0,dog\nok.wav,2,0,dog\n")
    m = import_esc50_csv([esc], skip_bad=True)
    assert [c.id for c in m] == ["ok"] and (m.problems[0].line, m.problems[0].field) == (2, "id")
    us = _csv(tmp_path, "us.csv", "slice_file_name,fsID,start,end,salience,fold,classID,class\n"
                                  "a.wav,1,-1.5,2.0,1,1,0,dog\nb.wav,1,0.5,2.0,1,1,0,dog\n")
    m = import_urbansound8k_csv([us], skip_bad=True)
    assert [c.id for c in m] == ["b"] and (m.problems[0].line, m.problems[0].field) == (2, "start")


@pytest.fixture
def no_hang():
    """Fail instead of hanging for ever (what opening a FIFO does)."""
    def stop(*_):
        raise TimeoutError("the import blocked: a FIFO was opened")
    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def test_a_fifo_in_an_imported_folder_is_never_opened(tmp_path, capsys, no_hang):
    lib = tmp_path / "lib"
    write_tone(lib / "dog.wav", 0.2)
    os.mkfifo(lib / "pipe.wav")
    os.mkfifo(lib / "pipe.txt")  # a sidecar-looking FIFO beside a real file
    os.mkfifo(lib / "dog.fra.txt")
    with pytest.raises(InputError, match=r"pipe\.wav: audio: not a regular file but a FIFO"):
        import_folder([lib])
    m = import_folder([lib], skip_bad=True)
    assert [c.id for c in m] == ["dog"] and len(m.problems) == 1
    out = tmp_path / "m.jsonl"
    assert_user_error(run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", out, "--strict"), "a FIFO")
    assert not out.exists()
    result = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", out, "--skip-bad")
    assert result.code == 0 and "skipped 1 bad row(s)" in result.out
    # a manifest naming the FIFO: validate --check-audio says what it is and does not block
    problems = validate_manifest(_manifest(tmp_path, {**GOOD, "audio": str(lib / "pipe.wav")}), check_audio=True)
    assert [p.field for p in problems] == ["audio"] and "FIFO" in problems[0].message


def test_import_split_option_is_checked_first(tmp_path, capsys):
    src = _csv(tmp_path, "ac.csv", "audiocap_id,youtube_id,start_time,caption\n1,a,0,x\n")
    result = run_cli(capsys, "data", "import", "--format", "audiocaps-csv", src, "-o", tmp_path / "o.jsonl",
                     "--split", "Validation")
    assert_user_error(result, "--split: ", "did you mean 'val'")


def _shard(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_webdataset_import_honours_skip_bad(tmp_path, capsys):
    pytest.importorskip("fsspec")
    wav = write_tone(tmp_path / "t.wav", 0.2).read_bytes()
    meta = json.dumps({"captions": {"eng": ["a tone"]}}).encode()
    shard = _shard(tmp_path / "s.tar", {
        "good.wav": wav, "good.json": meta,
        "noaudio.json": meta,  # no audio member
        "badsplit.wav": wav, "badsplit.json": json.dumps({"captions": {"eng": ["x"]}, "split": "Train"}).encode(),
        "../evil.wav": wav, "../evil.json": meta,  # would be written outside the audio folder
    })
    out = tmp_path / "o.jsonl"
    assert_user_error(run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out), "s.tar")
    assert not out.exists()
    result = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out, "--skip-bad")
    assert result.code == 0, result.err
    assert "skipped 3 bad row(s)" in result.out
    assert [c.id for c in Manifest.load(out)] == ["good"]
    assert not (tmp_path / "evil.wav").exists()
