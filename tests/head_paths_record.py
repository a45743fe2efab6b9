"""What the three commands that train real-sound heads make of a tiny corpus: trained weights and evaluation numbers.

``mlatr demo-real`` (:func:`~mlatr.lab.experiments.real_sounds.run_real_demo`), ``mlatr experiment unseen-library``
(:func:`~mlatr.lab.experiments.unseen_library.run_unseen_library`) and ``mlatr experiment learning-curve``
(:func:`~mlatr.lab.experiments.learning_curve.run_learning_curve`) each turn a head option and an ensemble size into
trained heads. :func:`record` runs each on a generated corpus (stand-in audio features, hashed text vectors: no
aiSFX, no text model, no Apertium) and returns one JSON tree; ``tests/fixtures/head_paths_reference.json`` holds
it as the code gave it at that file's ``recorded_at`` commit (before issue 49's single head-training path), and
``tests/test_head_paths_recorded.py`` asserts that today's code gives the same. Only the public entry points are
called, so the record survives a change of the code's shape.

What is measured:

- ``demo_real``: near-identity heads, an ensemble of 2 pairs, 2 epochs, with its leave-one-library-out run (the
  learning curve's fold jobs): ``model.pt``'s weights, every run's evaluation numbers and each pair's epoch log,
  the unseen-library summary and the calibration fitted on its folds;
- ``unseen_library``: random, both-heads, audio-only and kcl-translations (the corpus has Spanish captions) on
  every fold: the evaluation numbers, the best epochs and the kept fold embeddings;
- ``learning_curve``: near-identity-kcl, an ensemble of 2, hard-negative batches, half and all of the clips,
  with the kept fold heads (float16) and embeddings; and a point that trains aiSFX's last block (a random CNN
  over small stage-3 maps) with one pair, then an ensemble of 2 pairs on its features (the ``joint`` record).

Why float64, and why unique captions: ``tests/behaviour_record.py`` (a float32 record holds on one CPU only;
equal captions tie exactly, and rounding orders a tie). The corpus's features and the text bank's vectors are
float64 like its models.

Run as a script to write the reference: ``python tests/head_paths_record.py OUT.json``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

from behaviour_record import jsonable, weight_digest  # noqa: E402

LANGS = ["eng", "fra"]
QUERIES = [{"id": "dog", "keywords": ["dog"], "captions": {"eng": "a dog", "fra": "un chien"}},
           {"id": "door", "keywords": ["door"], "captions": {"eng": "a door", "fra": "une porte"}},
           {"id": "bell", "keywords": ["bell"], "captions": {"eng": "a bell", "fra": "une cloche"}}]
SOUNDS = [("a dog barking", "animal"), ("a door closing", "door"), ("a dog growling", "animal"),
          ("a door opening", "door"), ("a bell ringing", "bell"), ("a whistle", None), ("a cat", "animal"),
          ("a bell tolling", "bell")]
DIM = 12


def hashed(text: str) -> np.ndarray:
    """A unit vector from the text's hash (float64)."""
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big"))
    v = rng.standard_normal(DIM)
    return v / np.linalg.norm(v)


class HashBackend:
    """Stand-in sentence encoder (the text encoders' ``backend_factory``): :func:`hashed` vectors."""

    dim = DIM

    def __init__(self, *_):
        pass

    def embed(self, texts):
        return np.asarray([hashed(t) for t in texts], np.float32)


class StubAudio(torch.nn.Module):
    output_dim = DIM

    def config(self):
        return {"name": "small-cnn"}


def make_data(n_libraries: int = 3, spanish: bool = False):
    """Clips of ``n_libraries`` libraries, every caption unique (its library and number appended); each clip's
    feature is its caption's hashed vector plus seeded noise, in float64."""
    from mlatr.data.manifest import Clip, Manifest
    from mlatr.lab.experiments.real_heads import RealSounds

    rng = np.random.default_rng(5)
    clips, feats = [], []
    for lib in range(n_libraries):
        for k, (caption, label) in enumerate(SOUNDS):
            text = f"{caption} {lib}{k}"
            captions = {"eng": [text], **({"spa": [f"traducción {lib}{k} de {caption}"]} if spanish else {})}
            clips.append(Clip(id=f"lib{lib}/s{k}", audio=f"lib{lib}/s{k}.wav", captions=captions,
                              split=("train", "val", "test", "train")[k % 4], labels=[label] if label else []))
            feats.append(hashed(text) + 0.3 * rng.standard_normal(DIM))
    translations = {"animal": {"fra": "animal"}, "door": {"fra": "porte"}, "bell": {"fra": "cloche"}}
    return RealSounds(Manifest(clips=clips), np.asarray(feats, np.float64), QUERIES, LANGS, translations, StubAudio())


def demo_corpus(root: Path, monkeypatch):
    """The tiny corpus as ``mlatr demo-real`` reads it under ``root``: ``RealSounds.load`` gives it (its cached
    features), the text space hashes, the clips' folders exist."""
    from mlatr.lab.experiments import real_sounds
    from mlatr.lab.experiments.real_heads import RealSounds

    data = make_data()
    monkeypatch.setattr(RealSounds, "load", classmethod(lambda cls, *a, **k: data))
    monkeypatch.setattr(real_sounds, "text_space", fake_text_space)
    for clip in data.manifest.clips:
        (root / clip.audio).parent.mkdir(parents=True, exist_ok=True)
    data.manifest.root = root
    return data


def fake_text_space(name, data, cache_dir):
    """The real text space with hashed vectors, widened to float64 (the bank's, and what the encoder gives the
    index's queries)."""
    from mlatr.lab.experiments.real_heads import text_space

    encoder, bank = text_space(name, data, cache_dir, backend_factory=HashBackend)
    bank.vectors = bank.vectors.double()
    embed = encoder.embed_numpy
    encoder.embed_numpy = lambda texts, langs: embed(texts, langs).astype(np.float64)
    return encoder, bank


def array_digest(arrays) -> dict[str, list[float]]:
    """Per float array of an ``.npz``: its norm and its inner product with a random vector seeded by its size."""
    out = {}
    for name in sorted(arrays.files):
        a = arrays[name]
        if a.dtype.kind == "f":
            flat = a.astype(np.float64).ravel()
            out[name] = [float(np.linalg.norm(flat)), float(flat @ np.random.default_rng(flat.size)
                                                            .standard_normal(flat.size))]
        else:
            out[name] = a.tolist()
    return out


def _folder_digest(folder: Path) -> dict:
    out = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                out[key] = array_digest(z)
        elif path.suffix == ".pt":
            out[key] = weight_digest(torch.load(path, map_location="cpu", weights_only=True))
    return out


def record_demo_real(root: Path, monkeypatch) -> dict:
    from mlatr.lab.experiments import real_sounds

    demo_corpus(root, monkeypatch)
    res = real_sounds.run_real_demo(root / "m.jsonl", root / "demo", ["e5-small"], heads="near-identity",
                                    embed_dim=8, epochs=2, batch_size=4, lr=5e-3, seed=3, progress=False,
                                    unseen_epochs=2, added_groups=2, ensemble=2, workers=1)
    model = torch.load(root / "demo" / "model.pt", map_location="cpu", weights_only=False)
    config = {**model["model_config"], "text_encoder": {k: v for k, v in model["model_config"]["text_encoder"].items()
                                                        if k != "cache_path"}}
    # "fitted" says where and when; the id and the weights' sha256 hold the weights' last bit, not portable
    calibration = {k: v for k, v in res["calibration"].items() if k not in ("fitted", "id", "weights_sha256")}
    return {"model": weight_digest(model["model"]), "model_config": config, "runs": res["runs"],
            "unseen": res["unseen"], "unseen_kept": _folder_digest(root / "demo" / "unseen" / "embeddings"),
            "calibration": calibration}


def record_unseen_library(root: Path, monkeypatch) -> dict:
    from mlatr.lab.experiments import unseen_library
    from mlatr.lab.experiments.real_heads import RealSounds

    data = make_data(spanish=True)
    monkeypatch.setattr(RealSounds, "load", classmethod(lambda cls, *a, **k: data))
    monkeypatch.setattr(unseen_library, "text_space", fake_text_space)
    res = unseen_library.run_unseen_library(root / "m.jsonl", root / "unseen", ["e5-small"],
                                            ["random", "both-heads", "audio-only", "kcl-translations"],
                                            epochs=3, batch_size=4, lr=5e-3, embed_dim=8, seed=1, progress=False)
    runs = {key: {"folds": run["folds"], "unseen": run["unseen"]} for key, run in res["runs"].items()}
    return {"runs": runs, "best": res["best"], "embeddings": _folder_digest(root / "unseen" / "embeddings")}


def _float64_blocks():
    """:class:`~mlatr.frozen_prefix.BlockFeatures` whose batches stay float64 (a float64 record's tail takes them)."""
    from mlatr.frozen_prefix import BlockFeatures

    class Float64Blocks(BlockFeatures):
        def subset(self, rows):
            return Float64Blocks(self.chunks, [self.locations[i] for i in rows], self.stage)

        def batch(self, rows):
            x, counts = super().batch(rows)
            parts = [self.blocks(i) for i in rows]
            return torch.from_numpy(np.concatenate(parts).astype(np.float64)), counts

    return Float64Blocks


def block_inputs(root: Path):
    """Clips with stage-3 maps of a random aiSFX CNN (small maps), their pooled features through its frozen last
    block, hashed text features (as tests/test_learning_curve.py's ``block_inputs``)."""
    from mlatr.lab.experiments import learning_curve
    from mlatr.lab.experiments.learning_curve import FrozenInputs
    from mlatr.models.aisfx import AisfxEncoder

    data = make_data()
    torch.manual_seed(0)
    enc = AisfxEncoder(pretrained=False, frozen=True)
    maps = np.abs(np.random.default_rng(0).standard_normal((len(data.manifest), 256, 2, 2)))
    blocks = _float64_blocks()([maps], [(0, i, 1) for i in range(len(maps))], 3)
    data = replace(data, features=learning_curve.stage_features(enc, blocks, "cpu"),
                   audio_encoder=enc)
    _, bank = fake_text_space("e5-small", data, root / "cache-blocks")
    return FrozenInputs(data, bank, "e5-small", {3: blocks}, {k: v.clone() for k, v in enc.cnn.state_dict().items()})


def record_learning_curve(root: Path) -> dict:
    from mlatr.lab.experiments.learning_curve import FrozenInputs, run_learning_curve

    data = make_data(spanish=True)
    _, bank = fake_text_space("e5-small", data, root / "cache")
    heads = run_learning_curve(FrozenInputs(data, bank, "e5-small", {}, {}), root / "curve", train_blocks=(0,),
                               fractions=(0.5, 1.0), seeds=(2,), epochs=2, heads="near-identity-kcl", ensemble=2,
                               batch_size=4, hard_negatives=3, progress=False, keep_embeddings=True)
    blocks = run_learning_curve(block_inputs(root), root / "blocks", train_blocks=(1,), fractions=(1.0,), seeds=(0,),
                                epochs=2, tail_epochs=3, tail_lr=1e-2, batch_size=4, progress=False,
                                libraries=["lib1"], ensemble=2, tail_patience=1)
    return {"heads": {"points": heads["points"], "kept": _folder_digest(root / "curve" / "embeddings")},
            "blocks": {"points": blocks["points"]}}


def record(root: Path, monkeypatch) -> dict:
    """Every run the module docstring lists, in the folder ``root``, in float64 on one thread."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    try:
        return jsonable({"demo_real": record_demo_real(root, monkeypatch),
                         "unseen_library": record_unseen_library(root, monkeypatch),
                         "learning_curve": record_learning_curve(root)})
    finally:
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)


if __name__ == "__main__":
    import subprocess
    import tempfile

    import pytest

    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        tree = record(Path(tmp), mp)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=TESTS).stdout.strip()
    Path(sys.argv[1]).write_text(json.dumps({"recorded_at": commit, "record": tree}, indent=1) + "\n",
                                 encoding="utf-8")
