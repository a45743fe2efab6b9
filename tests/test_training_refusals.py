"""Training that could not train is refused before any work (it would otherwise silently do nothing).

Each member of the class: a batch larger than the split, a language without captions in the training or
the validation split, every / some audio files missing, a split with no clip left, ``epochs: 0``; from the
Python API (:class:`Trainer`) and the CLI (exit 2, nothing written).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clitools import assert_user_error, run_cli
from mlatr.errors import InputError, MlatrError
from mlatr.training.trainer import Trainer
from toydata import make_toy_manifest, tiny_config


def _rewrite(manifest: Path, change) -> None:
    """Apply ``change(row) -> row | None`` to every manifest line (None drops the line)."""
    rows = [json.loads(line) for line in manifest.read_text().splitlines()]
    kept = [r for r in (change(r) for r in rows) if r is not None]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in kept))


@pytest.fixture
def toy(tmp_path):
    return make_toy_manifest(tmp_path / "toy", n_train=6, n_val=3, n_test=1)


def _refused(cfg, *fragments: str, kind=MlatrError) -> str:
    with pytest.raises(kind) as info:
        Trainer(cfg)
    text = str(info.value)
    for f in fragments:
        assert f in text, (f, text)
    assert not (Path(cfg.out_dir) / "last.pt").exists()
    return text


@pytest.mark.parametrize("batch", [7, 64])
def test_batch_larger_than_the_split_is_refused_with_the_numbers(toy, tmp_path, batch):
    cfg = tiny_config(toy, tmp_path / "run", f"train.batch_size={batch}")
    _refused(cfg, f"train.batch_size={batch}", "split 'train'", "6 clip(s) that can train, of 6",
             "at most 6")


def test_batch_equal_to_the_split_trains_one_step_per_epoch(toy, tmp_path):
    summary = Trainer(tiny_config(toy, tmp_path / "run", "train.batch_size=6", "train.eval_every=0",
                                  epochs=1)).fit()
    assert summary["steps"] == 1


def test_clips_without_a_caption_do_not_count(toy, tmp_path):
    # a clip of a classification set may have no captions: it cannot train
    _rewrite(toy, lambda r: {**r, "captions": {}} if r["id"] in ("clip000", "clip001") else r)
    cfg = tiny_config(toy, tmp_path / "run", "train.batch_size=6")
    _refused(cfg, "4 clip(s) that can train, of 6", "2 without a caption in eng, fra, deu", "at most 4")


@pytest.mark.parametrize("split,lang", [("train", "deu"), ("train", "fra"), ("val", "deu")])
def test_a_language_without_captions_is_refused_naming_language_and_split(toy, tmp_path, split, lang):
    _rewrite(toy, lambda r: {**r, "captions": {k: v for k, v in r["captions"].items() if k != lang}}
             if r["split"] == split else r)
    for scheme in ("kcl", "mlclap"):
        cfg = tiny_config(toy, tmp_path / "run", "train.batch_size=4", f"objective.scheme={scheme}")
        _refused(cfg, "data.languages: ", f"no caption in {lang} in split {split!r}")


def test_a_language_only_missing_from_val_is_fine_without_validation(toy, tmp_path):
    _rewrite(toy, lambda r: {**r, "captions": {"eng": r["captions"]["eng"]}} if r["split"] == "val" else r)
    Trainer(tiny_config(toy, tmp_path / "run", "train.batch_size=4", "train.eval_every=0")).close()


@pytest.mark.parametrize("split,clips", [("train", range(6)), ("val", range(6, 9))])
def test_every_audio_file_missing_is_refused_even_with_skip_bad(toy, tmp_path, split, clips):
    for k in clips:
        (toy.parent / "audio" / f"clip{k:03d}.wav").unlink()
    for skip in ("false", "true"):
        cfg = tiny_config(toy, tmp_path / "run", "train.batch_size=2", f"data.skip_bad={skip}")
        _refused(cfg, f"none of the {len(clips)} audio files of split {split!r}", f"clip{clips[0]:03d}.wav")


def test_a_split_left_with_one_clip_cannot_form_a_batch(toy, tmp_path):
    _rewrite(toy, lambda r: {**r, "captions": {}} if r["split"] == "train" and r["id"] != "clip000" else r)
    _refused(tiny_config(toy, tmp_path / "run", "train.batch_size=2"), "1 clip(s) that can train, of 6",
             "needs at least 2 clips")


def test_some_audio_files_missing(toy, tmp_path):
    (toy.parent / "audio" / "clip002.wav").unlink()
    (toy.parent / "audio" / "clip004.wav").unlink()
    text = _refused(tiny_config(toy, tmp_path / "run", "train.batch_size=2"), "clip002.wav",
                    "2 of the 6 clips", kind=InputError)
    assert "data.skip_bad" in text
    # skipped under data.skip_bad, and no longer counted as clips that can train
    cfg = tiny_config(toy, tmp_path / "run", "train.batch_size=5", "data.skip_bad=true")
    _refused(cfg, "4 clip(s) that can train, of 6", "2 with a missing audio file")
    Trainer(tiny_config(toy, tmp_path / "run2", "train.batch_size=4", "data.skip_bad=true")).close()


def test_a_split_with_no_clip_left_is_refused(toy, tmp_path):
    # every train line is malformed: skipped under data.skip_bad, leaving no train clip
    _rewrite(toy, lambda r: {**r, "duration": -1} if r["split"] == "train" else r)
    cfg = tiny_config(toy, tmp_path / "run", "train.batch_size=2", "data.skip_bad=true")
    _refused(cfg, "no clip has split 'train'")


def test_cli_refuses_before_writing_anything(toy, tmp_path, capsys):
    out = tmp_path / "run"
    result = run_cli(capsys, "train", f"data.manifest={toy}", f"out_dir={out}", "train.batch_size=32",
                     "data.languages=[eng,fra,deu]", "train.progress=false", "train.epochs=1")
    assert_user_error(result, "train.batch_size=32", "6 clip(s) that can train")
    assert not out.exists() or not any(out.iterdir())
    result = run_cli(capsys, "train", f"data.manifest={toy}", f"out_dir={out}", "train.epochs=0")
    assert_user_error(result, "train.epochs")
