"""Audio that does not decode whole, in a manifest or an imported folder.

A WAV whose header declares 36,092 frames but whose data stops after 8 used to load as a 0.5 ms clip
everywhere (validate, train, eval, search --audio). Now every reader refuses it, naming the manifest line
and field, or skips and counts it under --skip-bad.
"""

from __future__ import annotations

import json
import re
import shutil
import struct

import numpy as np
import pytest
import soundfile as sf

from clitools import assert_user_error, manifest_lines, run_cli, truncate_wav, write_tone
from mlatr.audio.bounded import load_query_audio
from mlatr.audio.integrity import MPEG_SLACK_FRAMES, declared_frames, duration_problem, probe_audio
from mlatr.audio.io import load_audio, stream_audio
from mlatr.data.dedup import SAME_RATE, audio_print
from mlatr.data.manifest import Manifest
from mlatr.errors import InputError, MlatrError

FRAMES = 36_092  # 2.26 s at 16 kHz, the file


@pytest.fixture
def sounds(tmp_path):
    """A whole WAV, the same cut to 8 frames and to half, an AIFF cut short, a FLAC, a replaced file."""
    d = tmp_path / "snd"
    whole = write_tone(d / "whole.wav", FRAMES / 16000)
    trunc = truncate_wav(shutil.copy(whole, d / "trunc.wav"), 8)
    half = truncate_wav(shutil.copy(whole, d / "half.wav"), FRAMES // 2)
    aiff = write_tone(d / "clip.aiff", 1.0)
    aiff_cut = d / "cut.aiff"
    aiff_cut.write_bytes(aiff.read_bytes()[:-8000])
    flac = write_tone(d / "clip.flac", 1.0)
    short = write_tone(d / "short.wav", 0.9)  # a whole file, but not the 2.26 s the manifest states
    return {"whole": whole, "trunc": trunc, "half": half, "aiff": aiff, "aiff_cut": aiff_cut, "flac": flac,
            "short": short}


def test_declared_frames_come_from_the_header(sounds):
    assert declared_frames(sounds["whole"]) == FRAMES
    assert declared_frames(sounds["trunc"]) == FRAMES  # libsndfile would say 8
    assert sf.info(str(sounds["trunc"])).frames == 8
    assert declared_frames(sounds["aiff"]) == 16000
    assert declared_frames(sounds["flac"]) == 16000
    assert probe_audio(sounds["whole"]).frames_read == FRAMES


def test_truncated_files_are_refused_naming_the_file(sounds):
    for name, fragment in (("trunc", "only 8 decode (0.5 ms)"), ("half", f"only {FRAMES // 2:,} decode"),
                           ("aiff_cut", "truncated audio")):
        with pytest.raises(MlatrError, match=re.escape(fragment)) as err:
            load_audio(sounds[name])
        assert str(sounds[name]) in str(err.value)
        with pytest.raises(MlatrError, match="truncated audio"):
            probe_audio(sounds[name])
        with pytest.raises(MlatrError, match="truncated audio"):  # the print data dedup / index duplicates compare
            audio_print(sounds[name])
    assert load_audio(sounds["whole"]).shape == (FRAMES,)
    assert audio_print(sounds["whole"]).frames == sum(len(b) for b in stream_audio(sounds["whole"], SAME_RATE))


def test_mp3_within_its_encoder_padding_is_whole_and_one_cut_in_half_is_not(tmp_path):
    """libsndfile's MP3 frame count is an estimate (Xing header / bit rate, encoder delay and padding not taken
    off): a decode a few hundred frames short of it is a whole file; one half as long is truncated."""
    wave = (np.random.default_rng(0).standard_normal(88_200) * 0.1).astype(np.float32)
    full = tmp_path / "full.mp3"
    sf.write(full, wave, 44_100, format="MP3")
    data = full.read_bytes()
    for name, cut, whole in (("tail.mp3", 400, True), ("half.mp3", len(data) // 2, False)):
        p = tmp_path / name
        p.write_bytes(data[:-cut])
        short = declared_frames(p) - sf.read(p)[0].shape[0]
        assert (short <= MPEG_SLACK_FRAMES) == whole, short  # the cut lands where the case says
        for read in (load_audio, probe_audio, lambda q: load_query_audio(q, 10.0)):
            if whole:
                read(p)
            else:
                with pytest.raises(MlatrError, match="truncated audio"):
                    read(p)


def test_an_mp3_declares_frames_only_through_a_xing_header(tmp_path):
    """Behind an ID3 tag or not, an MP3 whose first frame holds a Xing header declares its frame count; one
    without declares nothing (libsndfile's count would be an estimate from the file size, tags included)."""
    full = tmp_path / "full.mp3"
    sf.write(full, np.zeros(88_200, np.float32), 44_100, format="MP3")
    data = full.read_bytes()
    xing = data.index(b"Xing")
    second = data.index(data[:2], xing)  # the frame after the one holding the Xing header
    tag = b"ID3\x04\x00\x00" + bytes([0, 0, 0x20, 0]) + bytes(4096)  # an ID3v2 tag of 4,096 bytes
    cases = {"tagged.mp3": (tag + data, 88_200), "bare.mp3": (data[second:], None),
             "tagged-bare.mp3": (tag + data[second:], None)}
    for name, (content, declared) in cases.items():
        (tmp_path / name).write_bytes(content)
        assert declared_frames(tmp_path / name) == declared, name
        probe_audio(tmp_path / name)


def test_streamed_wav_without_a_size_is_not_called_truncated(tmp_path):
    """A WAV written to a pipe holds a placeholder size (0xFFFFFFFF): nothing is declared, nothing refused."""
    p = write_tone(tmp_path / "piped.wav", 0.5)
    data = bytearray(p.read_bytes())
    at = data.index(b"data") + 4
    data[at:at + 4] = struct.pack("<I", 0xFFFFFFFF)
    p.write_bytes(bytes(data))
    assert declared_frames(p) is None
    assert load_audio(p).shape[0] == 8000


def test_duration_tolerance():
    assert duration_problem(9.9, 10.0) is None and duration_problem(2.26, None) is None
    assert duration_problem(1.13, 2.26) is not None  # half length
    assert "decodes to 0.001 s but the manifest says 2.26 s" in duration_problem(0.0005, 2.26)


def _manifest(tmp_path, sounds, names, duration=FRAMES / 16000, split="test"):
    rows = [{"id": n, "audio": str(sounds[n]), "split": split, "duration": duration,
             "captions": {"eng": [f"a tone {i}"]}} for i, n in enumerate(names)]
    return manifest_lines(tmp_path / "m.jsonl", rows)


def test_validate_check_audio_decodes_every_file(tmp_path, sounds, capsys):
    (sounds["whole"].parent / "gone.wav").write_bytes(b"")
    sounds["gone"] = tmp_path / "nowhere.wav"
    sounds["empty"] = sounds["whole"].parent / "gone.wav"
    m = _manifest(tmp_path, sounds, ["whole", "trunc", "half", "short", "gone", "empty"])
    r = run_cli(capsys, "data", "validate", m, "--check-audio")
    assert r.code == 1 and "Traceback" not in r.err
    lines = r.out.splitlines()
    assert f"{m}:2: audio: " in lines[0] and "truncated audio" in lines[0]
    assert f"{m}:3: audio: " in lines[1] and "truncated audio" in lines[1]
    assert f"{m}:4: duration: " in lines[2] and "decodes to 0.900 s but the manifest says 2.2557" in lines[2]
    assert f"{m}:5: audio: " in lines[3] and "nowhere.wav: file not found" in lines[3]
    assert f"{m}:6: audio: " in lines[4]
    assert "5 problem(s) on 5 line(s)" in lines[5]
    ok = _manifest(tmp_path, sounds, ["whole"])
    r = run_cli(capsys, "data", "validate", ok, "--check-audio")
    assert r.code == 0 and "every audio file decodes whole" in r.out


def test_training_refuses_a_truncated_clip_or_counts_it(tmp_path, sounds, capsys):
    from toydata import TINY_MODEL, make_toy_manifest

    toy = make_toy_manifest(tmp_path / "toy", n_train=8, n_val=2, n_test=2)
    rows = [json.loads(x) for x in toy.read_text().splitlines()]
    shutil.copy(sounds["trunc"], tmp_path / "toy" / rows[0]["audio"])  # line 1 is a train clip
    rows[0]["duration"] = FRAMES / 16000
    manifest_lines(toy, rows)
    base = [f"data.manifest={toy}", "data.languages=[eng,fr]", "train.epochs=1", "train.batch_size=4",
            "data.max_seconds=1.0", "train.progress=false", "train.eval_every=0", *TINY_MODEL]
    r = run_cli(capsys, "train", f"out_dir={tmp_path / 'run'}", *base)
    assert_user_error(r, f"{toy}:1: audio: clip 'clip000'", "truncated audio")
    r = run_cli(capsys, "train", f"out_dir={tmp_path / 'skip'}", "data.skip_bad=true", *base)
    assert r.code == 0 and json.loads(r.out)["epochs"] == 1
    assert "mlatr: skipped 1 clip(s) with unreadable audio (--skip-bad):" in r.err and "clip000: " in r.err
    log = [json.loads(x) for x in (tmp_path / "skip" / "log.jsonl").read_text().splitlines()]
    assert [e["bad_audio"] for e in log if e["type"] == "epoch"] == [1]


def test_eval_and_search_refuse_truncated_audio(tmp_path, sounds, served_toy, capsys):
    manifest, ckpt, index = served_toy
    toy = Manifest.load(manifest)
    rows = [dict(c.to_json(), audio=str(c.audio_path(toy.root))) for c in toy.split("test")]
    rows.append({"id": "trunc", "audio": str(sounds["trunc"]), "split": "test", "duration": 2.26,
                 "captions": {"eng": ["a truncated tone"], "fra": ["un son coupé"]}})
    m = manifest_lines(tmp_path / "test.jsonl", rows)
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", m, "--languages", "eng,fra")
    assert_user_error(r, f"{m}:{len(rows)}: audio: clip 'trunc'", "truncated audio")
    r = run_cli(capsys, "eval", "--model", ckpt, "--manifest", m, "--languages", "eng,fra", "--skip-bad")
    assert r.code == 0 and "mlatr: skipped 1 clip(s) with unreadable audio (--skip-bad)" in r.err
    assert "trunc: " in r.err
    r = run_cli(capsys, "search", index, "--audio", sounds["trunc"])
    assert_user_error(r, str(sounds["trunc"]), "truncated audio: the header declares 36,092 frames")
    r = run_cli(capsys, "search", index, "--audio", sounds["whole"], "--json")
    assert r.code == 0 and json.loads(r.out)["results"]


def test_folder_import_counts_an_undecodable_ogg(tmp_path, capsys):
    lib = tmp_path / "lib"
    whole = write_tone(lib / "dog bark.ogg", 0.5, subtype="VORBIS").read_bytes()
    (lib / "broken.ogg").write_bytes(b"OggS" + bytes(200))  # an Ogg page header and nothing decodable
    # cut after its header pages: libsndfile opens it and reports 0 frames (imported as a 0.0 s clip before)
    cut = next(whole[:n] for n in range(len(whole) - 1, 0, -16) if _opens_with_no_frames(tmp_path, whole[:n]))
    (lib / "cut.ogg").write_bytes(cut)
    out = tmp_path / "lib.jsonl"
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", out, "--strict")
    assert_user_error(r, "broken.ogg: audio: ")
    assert not out.exists()
    r = run_cli(capsys, "data", "import", "--format", "folder", lib, "-o", out, "--skip-bad")
    assert r.code == 0 and "skipped 2 bad row(s)" in r.out
    assert "mlatr: skipped 2 bad row(s), each listed" in r.err and "broken.ogg: audio:" in r.err
    assert "cut.ogg: audio: audio file is empty (0 samples decode)" in r.err
    clips = Manifest.load(out).clips
    assert [c.id for c in clips] == ["dog bark"] and clips[0].duration == pytest.approx(0.5, abs=0.01)


def _opens_with_no_frames(tmp_path, data: bytes) -> bool:
    probe = tmp_path / "probe.ogg"
    probe.write_bytes(data)
    try:
        return sf.info(str(probe)).frames == 0
    except Exception:  # soundfile raises LibsndfileError / RuntimeError
        return False


def test_clip_audio_errors_name_the_manifest_line(tmp_path, sounds):
    from mlatr.data.pipeline.file_source import AudioSource

    m = Manifest.load(_manifest(tmp_path, sounds, ["whole", "short"]))
    src = AudioSource(m)
    assert src.load(0).shape == (FRAMES,)
    with pytest.raises(InputError) as err:
        src.load(1)
    assert (err.value.line, err.value.field) == (2, "duration")
    skipping = AudioSource(m, skip_bad=True)
    assert skipping.load(1) is None and list(skipping.bad) == ["short"]
    assert np.isfinite(skipping.load(0)).all()
