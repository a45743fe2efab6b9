"""Duplicates: the same audio under another name or format (data dedup, index duplicates, a sound query's own
clip), and near copies of one sound (index duplicates).

"The same audio" (mlatr.data.dedup): decoded, mono, 12 kHz, as long within a sample, the difference at least
45 dB below the louder sound. The near-copy tests give the toy model the band tower (``band_model``), whose
embeddings of a gain-changed, re-encoded or trimmed copy stay near the original's.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf
import soxr

from band_model import band_tower
from clitools import assert_user_error, digest, run_cli
from mlatr.audio.io import load_audio
from mlatr.commands._skipping import REPORT_SUFFIX
from mlatr.data.dedup import (
    PrintCache,
    audio_hash,
    audio_print,
    dedup_manifest,
    may_be_same,
    same_audio_groups,
    same_files,
    same_samples,
)
from mlatr.data.manifest import Manifest
from mlatr.models.dual_encoder import DualEncoder


def bell(seconds: float = 4.0, sr: int = 44100) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (0.4 * np.exp(-t / 1.2) * sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((880, 1760, 2640), 1))
            ).astype(np.float32)


def noise(seconds: float, low: float, high: float, sr: int = 44100, seed: int = 0) -> np.ndarray:
    """Noise band-limited to ``low``-``high`` Hz."""
    x = np.fft.rfft(np.random.default_rng(seed).standard_normal(int(seconds * sr)))
    f = np.fft.rfftfreq(int(seconds * sr), 1 / sr)
    x[(f < low) | (f > high)] = 0
    y = np.fft.irfft(x, int(seconds * sr))
    return (0.3 * y / np.abs(y).max()).astype(np.float32)


def resave(source, target, rate: int, subtype: str = "PCM_16", gain: float = 1.0, trim: float = 0.0) -> None:
    """``source`` decoded and written to ``target`` at ``rate`` (the format from its suffix), scaled, trimmed."""
    x, sr = sf.read(source, dtype="float32")
    x = x[int(trim * sr):] * gain
    sf.write(target, x if rate == sr else soxr.resample(x, sr, rate, quality="HQ"), rate, subtype=subtype)


@pytest.fixture
def copies(tmp_path):
    """libA: bell.ogg, rumble.wav, hiss.flac; libB: the bell as WAV at 48 kHz (bell_copy), as MP3, 6 dB quieter,
    trimmed by 1 s."""
    (tmp_path / "libA").mkdir()
    (tmp_path / "libB").mkdir()
    sf.write(tmp_path / "libA" / "bell.ogg", bell(), 44100, subtype="VORBIS")
    sf.write(tmp_path / "libA" / "rumble.wav", noise(4.0, 60, 300), 44100)
    sf.write(tmp_path / "libA" / "hiss.flac", noise(4.0, 5000, 7500, seed=1), 44100)
    original = tmp_path / "libA" / "bell.ogg"
    resave(original, tmp_path / "libB" / "bell_copy.wav", 48000)
    resave(original, tmp_path / "libB" / "bell.mp3", 44100, "MPEG_LAYER_III")
    resave(original, tmp_path / "libB" / "bell_quiet.wav", 44100, gain=10 ** (-6 / 20))
    resave(original, tmp_path / "libB" / "bell_trim.wav", 44100, trim=1.0)
    return tmp_path


def test_the_same_audio_is_the_same_samples_at_12_khz_within_45_db():
    rng = np.random.default_rng(0)
    x = (0.3 * rng.standard_normal(12000)).astype(np.float32)
    assert same_samples(x, x) and same_samples(x, x[:-1])  # one sample shorter: a resampler's rounding
    assert same_samples(x, x + 0.3 * 10 ** (-47 / 20) * rng.standard_normal(12000))  # 47 dB below: the same
    assert not same_samples(x, x * 10 ** (-0.1 / 20))  # a 0.1 dB gain change: 39 dB, a near copy
    assert not same_samples(x, x[:-2]) and not same_samples(x, np.roll(x, 1))
    assert same_samples(np.zeros(100), 1e-7 * np.ones(100)) and not same_samples(np.zeros(100), x[:100])


def test_a_wav_re_save_of_an_ogg_at_another_rate_is_the_same_audio_and_a_gain_change_is_not(copies):
    a, b = copies / "libA" / "bell.ogg", copies / "libB" / "bell_copy.wav"
    assert audio_hash(a) != audio_hash(b)  # what data dedup compared before: bit-identical int16 only
    x, y = load_audio(a), load_audio(b)  # at 16 kHz: compared at 12
    assert same_samples(x, y, 16000) and same_files(a, b)
    pa, pb = audio_print(a), audio_print(b)
    assert pa.frames == len(load_audio(a, 12000)) and may_be_same(pa, pb)
    quiet = copies / "libB" / "bell_quiet.wav"
    assert not same_files(a, quiet) and not may_be_same(pa, audio_print(quiet))  # the prints alone tell
    assert not same_files(a, copies / "libB" / "bell.mp3") and not same_files(a, copies / "libB" / "bell_trim.wav")


def test_same_audio_groups_compare_only_files_the_prints_allow(copies):
    paths = sorted(str(p) for p in copies.rglob("*.*") if p.suffix in (".ogg", ".wav", ".flac", ".mp3"))
    prints = [audio_print(p) for p in paths]
    compared = []

    def same(a, b):
        compared.append((a, b))
        return same_files(a, b)

    groups = same_audio_groups(paths, prints, same)
    assert [[paths[i].rsplit("/", 1)[-1] for i in g] for g in groups] == [["bell.ogg", "bell_copy.wav"]]
    assert len(compared) == 1  # only the pair as long whose per-second energies allow it is decoded again


def test_data_dedup_catches_a_wav_re_save_of_an_ogg(copies):
    lines = [{"id": cid, "audio": audio} for cid, audio in (
        ("libA/bell", "libA/bell.ogg"), ("libB/bell_copy", "libB/bell_copy.wav"),
        ("libB/bell_quiet", "libB/bell_quiet.wav"), ("libA/rumble", "libA/rumble.wav"))]
    (copies / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    manifest = Manifest.load(copies / "m.jsonl")
    report = dedup_manifest(manifest, ["libA"])
    assert report.removed == {"libB/bell_copy": "libA/bell"}
    assert [c.id for c in manifest.clips] == ["libA/bell", "libB/bell_quiet", "libA/rumble"]
    assert manifest.clips[0].extra["duplicates"] == ["libB/bell_copy"]
    cache = PrintCache(copies / ".audio-prints.json")
    assert len(cache.prints) == 4  # a rerun decodes nothing new
    again = Manifest.load(copies / "m.jsonl")
    assert dedup_manifest(again, ["libB"]).removed == {"libA/bell": "libB/bell_copy"}


def test_data_dedup_skips_as_every_library_reader_does(copies, capsys):
    """A manifest's unreadable clip stops data dedup naming its line, nothing written; --skip-bad skips it and a
    malformed line as index build and data import do (the same notice, report and exit status): the clip kept but
    compared with none, the malformed line written back as it was, the duplicate still removed."""
    (copies / "libA" / "notes.wav").write_text("not a sound\n")
    rows = [json.dumps({"id": cid, "audio": audio}) for cid, audio in (
        ("libA/bell", "libA/bell.ogg"), ("libB/bell_copy", "libB/bell_copy.wav"), ("libA/notes", "libA/notes.wav"),
        ("libA/gone", "libA/gone.wav"))]
    m = copies / "m.jsonl"
    m.write_text("\n".join(rows) + "\n")
    before = digest(m)
    r = run_cli(capsys, "data", "dedup", m, "--no-progress")
    assert_user_error(r, f"{m}:3: audio: clip 'libA/notes': ", "notes.wav")
    assert digest(m) == before and not (copies / f"m.jsonl{REPORT_SUFFIX}").exists()
    malformed = '{"id": "libA/half", "audio": '
    rumble = json.dumps({"id": "libA/rumble", "audio": "libA/rumble.wav"})
    lines = [rows[0], rows[1], malformed, rows[2], rows[3], rumble]
    m.write_text("\n".join(lines) + "\n")
    assert_user_error(run_cli(capsys, "data", "dedup", m, "--no-progress"), f"{m}:3")  # the line, as before
    r = run_cli(capsys, "data", "dedup", m, "--no-progress", "--skip-bad")
    assert r.code == 0, r.err
    report = copies / f"m.jsonl{REPORT_SUFFIX}"
    assert "1 duplicates removed" in r.out and "skipped 3 bad row(s)" in r.out
    assert f"mlatr: skipped 3 bad row(s), each listed with its reason in {report}" in r.err
    listed = [json.loads(line) for line in report.read_text().splitlines()]
    assert [(x["file"], x["line"], x["id"]) for x in listed] == [
        (str(m), 3, None), (str(copies / "libA" / "notes.wav"), None, "libA/notes"),
        (str(copies / "libA" / "gone.wav"), None, "libA/gone")]
    assert listed[1]["reason"].startswith(f"{m}:4: audio: clip 'libA/notes': ")
    assert listed[2]["reason"] == f"{m}:5: audio: clip 'libA/gone': {copies / 'libA' / 'gone.wav'}: file not found " \
                                  "(a sound file)"
    written = m.read_text().splitlines()
    # the copy's line gone, the bell's line now naming it, every other line where it was
    assert written[1:] == [malformed, rows[2], rows[3], rumble]
    assert json.loads(written[0]) == {**json.loads(rows[0]), "duplicates": ["libB/bell_copy"]}
    # exit status 3 without --skip-bad is for folders and sound files: a manifest's skips were asked for
    r = run_cli(capsys, "data", "dedup", m, "--no-progress", "--skip-bad", "--skip-report", copies / "elsewhere.jsonl")
    assert r.code == 0 and len((copies / "elsewhere.jsonl").read_text().splitlines()) == 3


def test_index_duplicates_lists_the_same_audio_and_near_copies(copies, served_toy, monkeypatch, capsys):
    monkeypatch.setattr(DualEncoder, "encode_audio", band_tower)
    _, ckpt, _ = served_toy
    # --workers 1: the patched encoder is this process's (worker processes encode with the model they are sent)
    assert run_cli(capsys, "index", "build", copies, "--model", ckpt, "-o", copies / "lib.idx", "--no-progress",
                   "--no-loudness", "--workers", "1").code == 0
    r = run_cli(capsys, "index", "duplicates", copies / "lib.idx", "--json", "--no-progress")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert [g["ids"] for g in out["exact"]] == [["libA/bell", "libB/bell_copy"]]
    assert len(out["near"]) == 1
    near = out["near"][0]
    assert {"libB/bell", "libB/bell_quiet", "libB/bell_trim"} <= set(near["ids"]) <= {
        "libA/bell", "libB/bell_copy", "libB/bell", "libB/bell_quiet", "libB/bell_trim"}
    assert not any(cid in g["ids"] for g in out["exact"] + out["near"] for cid in ("libA/rumble", "libA/hiss"))
    assert all(p["cosine"] >= out["thresholds"]["near_cosine"] for p in near["pairs"])
    assert out["clips"] == 7 and out["skipped"] == {}
    exact_pair = {"libA/bell", "libB/bell_copy"}
    assert not any({near["ids"][p["a"]], near["ids"][p["b"]]} == exact_pair for p in near["pairs"])
    assert (copies / ".lib.idx.audio-prints.json").is_file()
    # a stricter duration check leaves the trimmed copy out; the table says the same as the JSON
    r = run_cli(capsys, "index", "duplicates", copies / "lib.idx", "--duration-seconds", "0.5", "--duration-share",
                "0", "--no-progress")
    assert "same audio 1:" in r.out and "libB/bell_copy" in r.out and "libB/bell_trim" not in r.out
