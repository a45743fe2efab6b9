"""What a library's names and captions cannot do: a huge sidecar or caption is a bad row read from its size, a file
name that is not UTF-8 is a bad row naming its bytes, a newline or U+202E in a name or id cannot forge or reverse a
line on the terminal, and a build that fails leaves no empty index folder."""

from __future__ import annotations

import os

from clitools import assert_user_error, manifest_lines, run_cli, write_tone
from mlatr.data.importers.folder import MAX_SIDECAR_BYTES
from mlatr.data.manifest import MAX_CAPTION_CHARS


def test_a_huge_sidecar_caption_is_a_bad_row_read_from_its_size(tmp_path, capsys):
    """Was: a 66 MB sidecar caption aborted index build (SIGABRT at 5.6 GB) and left an empty index folder."""
    lib = tmp_path / "lib"
    write_tone(lib / "rain.wav", 0.3)
    write_tone(lib / "dog.wav", 0.3)
    (lib / "rain.txt").write_bytes(b"rain " * (MAX_SIDECAR_BYTES // 5 + 10))
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--strict")
    assert_user_error(r, "rain.txt", "a caption file of", "at most 1,048,576")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--skip-bad")
    assert r.code == 0 and "skipped 1 bad row" in r.out


def test_a_caption_longer_than_any_is_refused_by_the_manifest(tmp_path, capsys):
    write_tone(tmp_path / "a.wav", 0.3)
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": "a", "audio": "a.wav",
                                                "captions": {"eng": ["x" * (MAX_CAPTION_CHARS + 1)]}}])
    r = run_cli(capsys, "data", "validate", m)
    assert r.code == 1 and "m.jsonl:1: captions.eng[0]: a caption of 100,001 characters (at most 100,000)" in r.out
    assert_user_error(run_cli(capsys, "data", "stats", m), "captions.eng[0]", "characters (at most 100,000)")


def test_a_file_name_that_is_not_utf8_is_a_bad_row_naming_its_bytes(tmp_path, capsys):
    lib = tmp_path / "lib"
    write_tone(lib / "ok.wav", 0.3)
    write_tone(lib / "x.wav", 0.3)
    os.rename(lib / "x.wav", os.fsencode(lib) + b"/caf\xe9.wav")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--strict")
    assert_user_error(r, "caf\\udce9.wav: path: the file name is not valid UTF-8", "caf\\xe9.wav", "rename")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--skip-bad")
    assert r.code == 0 and "wrote 1 clips" in r.out


def test_a_newline_in_a_file_name_cannot_forge_a_notice_line(tmp_path, capsys):
    """Was: the --skip-bad notice printed the name as it is, so its second line read as a notice of its own."""
    lib = tmp_path / "lib"
    write_tone(lib / "ok.wav", 0.3)
    (lib / "evil\n  mlatr: all clips verified.wav").write_bytes(b"not audio")
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", tmp_path / "m.jsonl", "--skip-bad")
    assert r.code == 0
    notice = r.err[r.err.index("mlatr: skipped"):].splitlines()
    assert len(notice) == 2 and "evil\\n  mlatr: all clips verified.wav" in notice[1]


def test_a_right_to_left_override_in_ids_is_shown_escaped(served_toy, tmp_path, capsys):
    """Was: index build's list of changed / deleted clips printed ids as they are (U+202E reverses the line)."""
    manifest, ckpt, _ = served_toy
    audio = tmp_path / "a.wav"
    write_tone(audio, 0.5)
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": "evil\u202egnp.exe", "audio": str(audio)},
                                               {"id": "fine", "audio": str(manifest.parent / "audio/clip000.wav")}])
    idx = tmp_path / "lib.idx"
    assert run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", idx,
                   "--no-progress").code == 0
    write_tone(audio, 0.7)  # changed since indexed
    r = run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", idx, "--add", "--no-progress")
    assert r.code == 0, r.err
    assert "evil\\u202egnp.exe" in r.out and "\u202e" not in r.out + r.err


def test_a_failed_index_build_leaves_no_empty_folder(served_toy, tmp_path, capsys):
    manifest, ckpt, _ = served_toy
    m = manifest_lines(tmp_path / "m.jsonl", [{"id": "gone", "audio": str(tmp_path / "gone.wav")}])
    out = tmp_path / "lib.idx"
    r = run_cli(capsys, "index", "build", "--model", ckpt, "--manifest", m, "-o", out, "--no-progress")
    assert r.code == 2 and not out.exists()
