"""Building the synthetic benchmark: determinism, per-clip seeds, resume, manifest, CLI."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from mlatr.cli import main
from mlatr.data.manifest import Manifest, validate_manifest
from mlatr.data.synth import build_synthetic_benchmark, clip_audio
from mlatr.data.synth.languages import SUPPORTED
from mlatr.errors import MlatrError

SMALL = dict(n_train=4, n_val=2, n_test=2, progress=False)


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_same_seed_gives_byte_identical_files(tmp_path):
    build_synthetic_benchmark(tmp_path / "a", seed=3, noise={"fra": 0.5}, **SMALL)
    build_synthetic_benchmark(tmp_path / "b", seed=3, noise={"fra": 0.5}, **SMALL)
    a, b = files(tmp_path / "a"), files(tmp_path / "b")
    assert len([k for k in a if k.endswith(".wav")]) == 8
    assert a == b
    build_synthetic_benchmark(tmp_path / "c", seed=4, **SMALL)
    c = files(tmp_path / "c")
    assert c["manifest.jsonl"] != a["manifest.jsonl"]
    assert c["audio/synth-train-00000.wav"] != a["audio/synth-train-00000.wav"]


def test_clips_do_not_depend_on_split_sizes_or_languages(tmp_path):
    m1 = build_synthetic_benchmark(tmp_path / "a", seed=1, n_train=1, n_val=2, n_test=0, progress=False)
    m2 = build_synthetic_benchmark(tmp_path / "b", seed=1, n_train=5, n_val=3, n_test=1,
                                   languages=["eng", "jpn"], progress=False)
    for i in range(2):
        c1, c2 = m1.split("val")[i], m2.split("val")[i]
        assert c1.captions["eng"] == c2.captions["eng"] and c1.captions["jpn"] == c2.captions["jpn"]
        assert (tmp_path / "a" / c1.audio).read_bytes() == (tmp_path / "b" / c2.audio).read_bytes()
    assert list(m2[0].captions) == ["eng", "jpn"]


def test_manifest_contents_and_validation(tmp_path):
    m = build_synthetic_benchmark(tmp_path, seed=0, captions_train=2, hard_negatives=0.9, **SMALL)
    path = tmp_path / "manifest.jsonl"
    assert validate_manifest(path, check_audio=True) == []
    loaded = Manifest.load(path)
    assert [c.to_json() for c in loaded] == [c.to_json() for c in m]
    assert loaded.splits() == {"train": 4, "val": 2, "test": 2}
    assert loaded.languages() == list(SUPPORTED)
    for clip in loaded:
        k = 2 if clip.split == "train" else 5
        assert all(len(v) == k for v in clip.captions.values())
        audio, sr = sf.read(clip.audio_path(loaded.root), dtype="float32")
        assert sr == 16000 and audio.ndim == 1 and len(audio) == round(clip.duration * sr)
        assert 2.0 <= clip.duration <= 6.0 and np.isfinite(audio).all() and np.abs(audio).max() <= 1.0
        assert clip.labels == list(dict.fromkeys(
            [e["kind"] for e in clip.extra["scene"]["sequence"]]
            + ([clip.extra["scene"]["background"]["kind"]] if clip.extra["scene"]["background"] else [])))
        # the wav holds the rendered clip (16-bit quantisation aside)
        expected = clip_audio(0, clip.split, int(clip.id.rsplit("-", 1)[1]), p_variant=0.9)
        assert np.abs(audio - expected).max() < 1.5 / 32768
    ids = {c.id: c for c in loaded}
    for clip in loaded:
        if "variant_of" in clip.extra:
            parent = ids[clip.extra["variant_of"]]
            assert parent.split == clip.split and sorted(parent.labels) == sorted(clip.labels)
    settings = json.loads((tmp_path / "synth.json").read_text())
    assert settings["seed"] == 0 and settings["sizes"] == {"train": 4, "val": 2, "test": 2}


def test_resume_keeps_complete_wavs_and_redoes_broken_ones(tmp_path):
    build_synthetic_benchmark(tmp_path, seed=2, **SMALL)
    before = files(tmp_path)
    audio = tmp_path / "audio"
    kept = audio / "synth-train-00001.wav"
    os.utime(kept, (1_000_000, 1_000_000))
    (audio / "synth-val-00000.wav").unlink()
    truncated = audio / "synth-test-00001.wav"
    truncated.write_bytes(truncated.read_bytes()[:1000])
    build_synthetic_benchmark(tmp_path, seed=2, **SMALL)
    assert files(tmp_path) == before
    assert kept.stat().st_mtime == 1_000_000  # not rewritten
    assert not [p for p in audio.iterdir() if p.name.endswith(".tmp")]


def test_parallel_build_equals_serial(tmp_path):
    build_synthetic_benchmark(tmp_path / "serial", seed=5, workers=1, **SMALL)
    build_synthetic_benchmark(tmp_path / "parallel", seed=5, workers=2, **SMALL)
    assert files(tmp_path / "serial") == files(tmp_path / "parallel")


def test_noise_only_on_the_chosen_splits(tmp_path):
    m = build_synthetic_benchmark(tmp_path, seed=0, noise={"zho": 1.0}, **SMALL)
    clean = build_synthetic_benchmark(tmp_path / "clean", seed=0, **SMALL)
    for a, b in zip(m, clean, strict=True):
        same = a.captions["zho"] == b.captions["zho"]
        assert same == (a.split != "train")
        assert a.captions["fra"] == b.captions["fra"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(languages=["fra", "deu"]), "must include eng"),
    (dict(languages=["eng", "ita"]), "no grammar for ita"),
    (dict(noise={"deu": 0.1}, languages=["eng", "fra"]), "not among the languages"),
    (dict(noise={"fra": 1.5}), "must be in [0, 1]"),
    (dict(captions_train=0), "captions per clip"),
])
def test_bad_arguments_raise_clear_errors(tmp_path, kwargs, message):
    with pytest.raises(MlatrError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_synthetic_benchmark(tmp_path, **SMALL, **kwargs)


def test_cli(tmp_path, capsys):
    out = tmp_path / "synth"
    rc = main(["data", "synth", "-o", str(out), "--train", "3", "--val", "1", "--test", "1", "--seed", "9",
               "--languages", "eng,fr,ja", "--noise", "fra=1", "--train-captions", "2", "--workers", "1",
               "--quiet"])
    assert rc == 0
    m = Manifest.load(out / "manifest.jsonl")
    assert len(m) == 5 and m.languages() == ["eng", "fra", "jpn"]
    assert all(len(c.captions["eng"]) == 2 for c in m.split("train"))
    assert all(c.extra["caption_noise"]["fra"] == [k for k in c.extra["caption_noise"]["fra"] if k]
               for c in m.split("train"))
    assert "wrote" in capsys.readouterr().out
    assert main(["data", "synth", "-o", str(out), "--noise", "fra:0.1"]) == 2
    assert main(["data", "synth", "-o", str(out), "--languages", "eng,xx"]) == 2
    assert "--noise: bad item" in capsys.readouterr().err
