"""Hostile round 3, member paths: a webdataset sample's key names its audio file inside the audio folder only,
one file per key; member and shard sizes are bounded; a shard's JSON is read like every other JSON input.
Includes the Hypothesis property: random member names and sizes never write outside the audio folder."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("webdataset")

from clitools import assert_user_error, run_cli  # noqa: E402
from mlatr.data import webdataset_shards  # noqa: E402
from mlatr.data.webdataset_shards import ShardLimits, import_webdataset, member_file_name, read_shard  # noqa: E402
from mlatr.errors import MlatrError  # noqa: E402


def _wav(seconds: float = 0.2, f0: float = 440.0) -> bytes:
    t = np.arange(int(16000 * seconds)) / 16000
    buf = io.BytesIO()
    sf.write(buf, (0.3 * np.sin(2 * np.pi * f0 * t)).astype(np.float32), 16000, format="WAV")
    return buf.getvalue()


def _member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def write_shard(path: Path, samples: list[tuple[str, bytes, dict]], gz: bool = False) -> Path:
    """A tar (or .tar.gz) of ``(key, wav bytes, json)`` samples, members KEY.wav and KEY.json."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for key, audio, meta in samples:
            _member(tar, f"{key}.wav", audio)
            _member(tar, f"{key}.json", json.dumps(meta).encode())
    data = buf.getvalue()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _meta(i: int) -> dict:
    return {"id": f"clip{i}", "captions": {"eng": [f"tone {i}"]}}


def test_a_key_with_a_hash_and_an_absolute_part_stays_in_the_audio_folder(tmp_path, capsys):
    """Was: the file name was taken after the key's last '#', so 'x#/ABS/PATH' wrote /ABS/PATH."""
    outside = tmp_path / "elsewhere" / "victim.wav"
    outside.parent.mkdir()
    outside.write_bytes(b"precious")
    shard = write_shard(tmp_path / "s.tar", [(f"x#{outside.with_suffix('')}", _wav(), _meta(0))])
    out = tmp_path / "m.jsonl"
    r = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out)
    assert r.code == 0, r.err
    assert outside.read_bytes() == b"precious"
    audio = tmp_path / "m-audio"
    files = [p for p in audio.rglob("*") if p.is_file()]
    assert len(files) == 1 and files[0].parent == audio and "/" not in files[0].name
    row = json.loads(out.read_text().splitlines()[0])
    assert (out.parent / row["audio"]).resolve() == files[0].resolve()


def test_two_keys_of_one_name_are_two_files(tmp_path, capsys):
    """Was: keys 'a#same' and 'b#same' were written to one file, the second clip's audio lost."""
    a, b = _wav(f0=300.0), _wav(f0=900.0)
    shard = write_shard(tmp_path / "s.tar", [("a#same", a, _meta(0)), ("b#same", b, _meta(1))])
    out = tmp_path / "m.jsonl"
    assert run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out).code == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    paths = [(out.parent / r["audio"]).resolve() for r in rows]
    assert len(set(paths)) == 2
    assert [p.read_bytes() for p in paths] == [a, b]


def test_keys_that_map_to_one_name_are_refused_naming_both(tmp_path, capsys):
    shard = write_shard(tmp_path / "s.tar", [("dir/x", _wav(), _meta(0)), ("dir_x", _wav(), _meta(1))])
    out = tmp_path / "m.jsonl"
    r = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out)
    assert_user_error(r, "'dir/x'", "'dir_x'", "dir_x.wav")
    assert not out.exists()
    r = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out, "--skip-bad")
    assert r.code == 0 and "skipped 1 bad row" in r.out


def test_member_file_names():
    assert member_file_name("x#/etc/passwd", "wav") == "x__etc_passwd.wav"
    assert member_file_name("../../up", "flac") == "_.._up.flac"
    assert member_file_name("..", "wav") == "_.wav"
    assert member_file_name("a\nb\u202e", "wav") == "a_b_.wav"
    assert member_file_name("chien_aboie", "wav.evil/../x") == "chien_aboie.wavevilx"
    long = member_file_name("k" * 400, "wav")
    assert len(long.encode()) <= 210 and long == member_file_name("k" * 400, "wav")
    assert member_file_name("k" * 400, "wav") != member_file_name("k" * 399, "wav")


def test_a_member_larger_than_the_cap_is_refused_before_it_is_read(tmp_path, capsys, monkeypatch):
    """Was: a 1 MB .tar.gz holding a 1 GiB member took 2.4 GB of memory and wrote 1 GiB. The cap is checked
    from the tar header: the member's bytes are never read (a 64 MiB zero member, cap 1 MiB)."""
    raw = tmp_path / "bomb.tar"
    with tarfile.open(raw, "w") as tar:
        _member(tar, "big.json", json.dumps(_meta(0)).encode())
        info = tarfile.TarInfo("big.wav")
        info.size = 64 << 20
        tar.addfile(info, io.BytesIO(bytes(64 << 20)))
    shard = tmp_path / "bomb.tar.gz"
    shard.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=1))
    raw.unlink()
    assert shard.stat().st_size < 1 << 20
    out = tmp_path / "m.jsonl"
    r = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out, "--max-member-mb", "1")
    assert_user_error(r, "'big'", "64.0 MiB", "--max-member-mb")
    assert not out.exists() and not (tmp_path / "m-audio").exists()
    r = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", out, "--max-shard-mb", "8")
    assert_user_error(r, "more than 8.0 MiB", "--max-shard-mb")


def test_default_caps_and_the_json_cap():
    assert ShardLimits().member_bytes == 512 << 20 and ShardLimits.from_mb(2).member_bytes == 2 << 20


def test_deeply_nested_shard_json_is_an_input_error(tmp_path, capsys):
    """Was: RecursionError from json.loads (import and training)."""
    shard = tmp_path / "deep.tar"
    with tarfile.open(shard, "w") as tar:
        _member(tar, "k.wav", _wav())
        _member(tar, "k.json", b"[" * 100_000 + b"]" * 100_000)
    r = run_cli(capsys, "data", "import", "--format", "webdataset", shard, "-o", tmp_path / "m.jsonl")
    assert_user_error(r, "nested too deeply", "'k'")
    with pytest.raises(MlatrError, match="nested too deeply"):
        webdataset_shards.index_shards(str(shard))  # what training and --webdataset read


def test_export_pattern_with_two_fields_is_an_error(tmp_path, capsys):
    """Was: -o 'shard-%d%d.tar' -> TypeError traceback."""
    m = tmp_path / "m.jsonl"
    (tmp_path / "a.wav").write_bytes(_wav())
    m.write_text(json.dumps({"id": "a", "audio": "a.wav", "captions": {"eng": ["tone"]}}) + "\n")
    for pattern in ("shard-%d%d.tar", "shard.tar", "shard-%(n)d.tar", "shard-%.0s.tar"):
        r = run_cli(capsys, "data", "export", "--format", "webdataset", m, "-o", tmp_path / pattern, "--no-progress")
        assert_user_error(r, "%d-style field")
    assert not list(tmp_path.glob("shard*"))


# ---- the property: whatever the member names and sizes, nothing is written outside the audio folder ---------
_NAME_PARTS = st.sampled_from(["/", "#", "..", ".", "\\", "//", "~", "\n", "\u202e", "a", "b", "x#/", "/etc"])
_KEY = st.lists(st.one_of(_NAME_PARTS, st.text(min_size=1, max_size=6)), min_size=1, max_size=8).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(samples=st.lists(st.tuples(_KEY, st.integers(0, 4096)), min_size=1, max_size=5))
def test_property_random_member_names_and_sizes_never_write_outside_the_audio_folder(samples, tmp_path_factory,
                                                                                     monkeypatch):
    root = tmp_path_factory.mktemp("prop")
    audio = root / "audio"
    written: list[Path] = []
    real_write = webdataset_shards.atomic_write_with

    def confined_write(target, writer, sweep=True):  # records where the import writes; never leaves the folder
        target = Path(target)
        written.append(target)
        assert os.path.realpath(target.parent) == os.path.realpath(audio), target
        real_write(target, writer, sweep)

    shard = root / "s.tar"
    with tarfile.open(shard, "w") as tar:
        for i, (key, size) in enumerate(samples):
            if not key.strip("\x00"):
                continue
            _member(tar, f"{key}.wav", bytes(size))
            _member(tar, f"{key}.json", json.dumps(_meta(i)).encode())
    before = {p for p in root.rglob("*")}
    with monkeypatch.context() as patch:
        patch.setattr(webdataset_shards, "atomic_write_with", confined_write)
        try:
            import_webdataset(str(shard), root / "m.jsonl", audio_dir=str(audio), progress=False, skip_bad=True,
                              limits=ShardLimits(member_bytes=2048))
        except MlatrError:
            pass  # every sample refused (no audio, a bad key): refusing is fine, writing outside is not
    for target in written:
        assert target.parent == audio and target.stat().st_size <= 2048
    new = {p for p in root.rglob("*")} - before
    assert all(p == audio or audio in p.parents for p in new), new


def test_read_shard_refuses_an_oversized_member_with_skip_bad_as_a_counted_problem(tmp_path):
    shard = write_shard(tmp_path / "s.tar", [("small", _wav(), _meta(0)), ("large", _wav(2.0), _meta(1))])
    samples, problems = read_shard(str(shard), skip_bad=True, limits=ShardLimits(member_bytes=20_000))
    assert [k for k, _, _ in samples] == ["small"]
    assert len(problems) == 1 and problems[0].field == "size" and "'large'" in problems[0].message
