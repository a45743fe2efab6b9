"""What the code does, measured on small fixed inputs: search results, trained weights, evaluation numbers.

:func:`record` returns one JSON tree; ``tests/fixtures/behaviour_reference.json`` holds it as the code gave
it at the commit named in that file's ``recorded_at`` (first before issue 38's reshaping; recorded again with
issue 33's ranking and relevance, which changed the captions and hybrid rankings and added relevance, the
sound rankings, weights and evaluation numbers unchanged; and with issue 35's ``step`` in each epoch record of
a head run, nothing else changed; and in float64 with unique toy captions for issue 50), and
``tests/test_behaviour_recorded.py`` asserts that today's code gives the same. Nothing here reaches inside
a module: only the public entry points a user (or a command) calls, so the record survives a change of
the code's shape and fails on a change of its behaviour.

What is measured:

- ``trainer``: a tiny small-cnn + small-transformer model trained 2 epochs (2 steps each, validated after
  each) by :class:`~mlatr.training.trainer.Trainer`: the weights of ``last.pt`` and ``best.pt`` (per
  tensor, its norm and its inner product with a seeded random vector), the epochs' losses and validation
  averages, the best epoch;
- ``heads``: :func:`~mlatr.training.head_training.train_heads` on seeded features, two settings (ML-CLAP InfoNCE
  with validation, checkpoints and the best epoch kept; KCL with a residual text head, the identity term,
  warmup, a cosine schedule and clipping): the final weights and the epoch log;
- ``evaluation``: :func:`mlatr.evaluate` of the trained toy model on its test split (recall, mAP@10,
  ranks, consistency, zero-shot);
- ``search``: indexes of the toy library built by that model, as a folder (two shards: a build, then an
  ``add``; two clips deleted) and as a legacy ``.npz`` (the same steps), and one built in memory
  (:meth:`Index.build`, saved as ``.npz``, loaded again): the ids, scores, evidence and relevance of text
  queries ranked by audio, captions and hybrid, a sound query (clips and captions) and "more like this", and
  each answer's relevance and ``nothing_relevant``.

Why float64. Recorded in float32, the record held on one CPU only: another instruction set or BLAS kernel
sums in another order, and two epochs of Adam carry a 1e-7 difference into the weights' fourth digit (a
parameter whose true gradient is zero, such as an attention key bias, gets rounding noise as its gradient, and
Adam's normalised step turns any noise into a step of the learning rate's size), enough to flip the
evaluation's ranks. In float64 the noise sits about 1e-16 below the values, far under Adam's epsilon, so every
model and loss of the record is made in float64 (``torch.set_default_dtype``: the encoders, heads and
objective follow the default dtype; cached float32 features and waveforms are cast where a model takes them).
Two toy clips of one class would share caption texts whose scores tie exactly, and rounding orders a tie:
:func:`unique_captions` numbers them. Search ranks the index's float32 vectors, whose values agree to the
last bit once the model's do.

Run as a script to write the reference: ``python tests/behaviour_record.py OUT.json``; ``python
tests/behaviour_record.py --compare REFERENCE.json`` counts this machine's differences from a reference at
a relative 1e-5 and 1e-9 (docs/measured-figures.md has them under other CPU settings).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))

QUERIES = [("a single low tone", "eng"), ("un son aigu double", "fra"), ("ein doppelter hoher Ton", "deu"),
           ("tone", "eng")]
RANKS = ("audio", "captions", "hybrid")
K = 6


def weight_digest(state: dict[str, torch.Tensor]) -> dict[str, list[float]]:
    """Per tensor: its norm and its inner product with a random vector seeded by the tensor's size."""
    out = {}
    for name, t in state.items():
        if not torch.is_tensor(t) or not t.is_floating_point():
            continue
        flat = t.detach().double().flatten().numpy()
        r = np.random.default_rng(flat.size).standard_normal(flat.size)
        out[name] = [float(np.linalg.norm(flat)), float(flat @ r)]
    return out


def record_trainer(root: Path) -> tuple[dict, Path, Path]:
    """The toy run's record, its manifest and its checkpoint."""
    from mlatr.inference.checkpoint import read_checkpoint
    from mlatr.training.trainer import Trainer
    from toydata import make_toy_manifest, tiny_config

    manifest = unique_captions(make_toy_manifest(root / "toy", n_train=12, n_val=4, n_test=8))
    out = root / "run"
    summary = Trainer(tiny_config(manifest, out, "train.batch_size=6", "data.eval_max_seconds=2.0",
                                  epochs=2)).fit()
    last, best = read_checkpoint(out / "last.pt"), read_checkpoint(out / "best.pt")
    history = [{"epoch": h["epoch"], "step": h["step"], "train_loss": h["train_loss"],
                "train_terms": h["train_terms"], "texts_encoded": h["texts_encoded"],
                "val_score": h.get("val_score"),
                "val_t2a": h["val"]["t2a"]["avg"] if "val" in h else None}
               for h in last["history"]]
    rec = {"last": weight_digest(last["model"]), "best": weight_digest(best["model"]),
           "objective": weight_digest(last["objective"]), "history": history,
           "best_epoch": summary["best_epoch"], "steps": summary["steps"], "best_saved_epoch": best["epoch"]}
    return rec, manifest, out / "last.pt"


def unique_captions(manifest: Path) -> Path:
    """The toy manifest with each caption made unique (its clip's number appended): the toy clips of one class
    share their caption texts, whose scores then tie exactly, and a tie's order is decided by rounding, which
    differs between CPUs (module docstring)."""
    rows = [json.loads(line) for line in manifest.read_text(encoding="utf-8").splitlines()]
    for i, row in enumerate(rows):
        row["captions"] = {lang: [f"{text} {i}" for text in texts] for lang, texts in row["captions"].items()}
    manifest.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return manifest


def record_heads(root: Path) -> dict:
    """Two head-training runs on seeded features."""
    from torch import nn

    from mlatr.models.projection import ProjectionHead, ResidualHead
    from mlatr.training.config import ObjectiveConfig
    from mlatr.training.head_training import HEAD_OPTIM, HeadTraining, TextBank, caption_rows, train_heads

    class Heads(nn.Module):
        def __init__(self, da, dt, d, text_head):
            super().__init__()
            torch.manual_seed(11)
            self.audio_projection = ProjectionHead(da, d)
            self.text_projection = text_head(dt, d)
            self.temperature = torch.tensor(0.07)

    rng = np.random.default_rng(3)
    langs = ["eng", "fra"]
    n, da, dt = 14, 6, 5
    audio = rng.standard_normal((n, da)).astype(np.float32)
    captions = [{lang: [f"{lang} caption {i}"] + ([f"{lang} other {i}"] if i % 3 == 0 else []) for lang in langs}
                for i in range(n)]
    captions[4]["fra"] = [None]
    keys = sorted({(lang, t) for c in captions for lang in langs for t in c[lang] if t})
    bank = TextBank(keys, rng.standard_normal((len(keys), dt)).astype(np.float32))

    def scores(values):  # validation scores by epoch: the best epoch is not the last
        it = iter(values)
        return lambda m: next(it) + 1e-3 * float(sum(p.detach().double().sum() for p in m.parameters()))

    runs = {
        "mlclap": (Heads(da, dt, 4, ProjectionHead), langs,
                   HeadTraining(epochs=4, batch_size=5, seed=2, optim=replace(HEAD_OPTIM, lr=1e-2))),
        "kcl-residual": (Heads(da, dt, dt, ResidualHead), langs,
                         HeadTraining(epochs=3, batch_size=4, seed=7,
                                      optim=replace(HEAD_OPTIM, lr=5e-3, warmup_steps=2, schedule="cosine",
                                                    grad_clip=0.5),
                                      objective=ObjectiveConfig(scheme="kcl"), identity_penalty=0.3)),
    }
    out = {}
    for name, (model, run_langs, settings) in runs.items():
        rows = [caption_rows(c, run_langs) for c in captions]
        log = train_heads(model, audio, rows, run_langs, bank, settings, scores([1.0, 3.0, 2.0, 0.5]),
                          progress=False, out_dir=root / "heads" / name)
        out[name] = {"weights": weight_digest(model.state_dict()), "log": log}
    return out


def record_evaluation(manifest: Path, checkpoint: Path) -> dict:
    import mlatr

    model = mlatr.load(checkpoint)
    return mlatr.evaluate(model, manifest, split="test")


def _hits(hits) -> list:
    """Per hit: id, score, evidence (source, rank), relevance."""
    return [[h.id, h.score, [[e.source, e.rank] for e in h.evidence], h.relevance] for h in hits]


def _answer(results) -> list:
    """What the answer says as a whole: its relevance, nothing_relevant, min_relevance."""
    return [results.relevance, results.nothing_relevant, results.min_relevance]


def _queries(index) -> dict:
    out: dict = {"answers": {}}
    for rank in RANKS:
        found = [index.search_text(q, lang, k=K, rank=rank) for q, lang in QUERIES]
        out[rank] = [_hits(results) for results in found]
        out["answers"][rank] = [_answer(results) for results in found]
    clips = index.search_audio(index.paths[3], k=K)
    out["sound"] = {"clips": _hits(clips), "captions": [[c.id, c.score, c.lang, c.text] for c in clips.caption_hits],
                    "answer": _answer(clips)}
    row = index.ids.index(index.ids[5])
    similar = index.search_similar(row, k=4)
    out["similar"] = {"clips": _hits(similar), "captions": [[c.id, c.score] for c in similar.caption_hits],
                      "answer": _answer(similar)}
    out["n_clips"], out["n_captions"] = len(index), len(index.caption_text)  # not "captions": a ranking's key
    return out


def record_search(root: Path, manifest_path: Path, checkpoint: Path) -> dict:
    import mlatr
    from mlatr.data.manifest import Manifest
    from mlatr.search import Index, build_index
    from mlatr.search.build import delete_clips
    from toydata import toy_calibration

    model = mlatr.load(checkpoint)
    model.use_calibration(toy_calibration(model.weights_sha256()))  # relevance as a calibrated model's is recorded
    manifest = Manifest.load(manifest_path)
    first = Manifest(clips=manifest.clips[:14], root=manifest.root, path=manifest.path)
    out = {}
    for name, target in (("folder", root / "lib.idx"), ("npz", root / "lib.idx.npz")):
        build_index(model, first, target, caption_languages=["eng", "fra"], batch_size=4)
        report = build_index(model, manifest, target, add=True, batch_size=4)
        delete_clips(target, ["clip002", "clip009"])
        index = Index.load(target, model=model)
        out[name] = {"added": report.added, "kept": report.kept, **_queries(index)}
    memory = Index.build(model, manifest, caption_languages=["eng", "deu"], batch_size=3, progress=False)
    memory.save(root / "memory.npz")
    out["memory"] = _queries(Index.load(root / "memory.npz", model=model))
    return out


def record(root: Path) -> dict:
    """Everything the module docstring lists, computed in the folder ``root``, in float64 (module docstring:
    why a record made so holds on every CPU)."""
    threads, dtype = torch.get_num_threads(), torch.get_default_dtype()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # every model and loss of the record made in float64
    try:
        trainer, manifest, checkpoint = record_trainer(root)
        return {"trainer": trainer, "heads": record_heads(root), "evaluation": record_evaluation(manifest, checkpoint),
                "search": record_search(root, manifest, checkpoint)}
    finally:
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)


def compare(found, expected, where: str = "", rel: float = 1e-5, abs_: float = 1e-6) -> list[str]:
    """Every difference between two records (numbers within ``rel`` / ``abs_``; NaN equals NaN)."""
    if isinstance(expected, dict):
        if not isinstance(found, dict) or set(found) != set(expected):
            return [f"{where}: keys {sorted(found) if isinstance(found, dict) else found!r} != {sorted(expected)}"]
        return [d for k in expected for d in compare(found[k], expected[k], f"{where}.{k}", rel, abs_)]
    if isinstance(expected, list):
        if not isinstance(found, list) or len(found) != len(expected):
            return [f"{where}: {found!r} != {expected!r}"]
        return [d for i, (f, e) in enumerate(zip(found, expected, strict=True))
                for d in compare(f, e, f"{where}[{i}]", rel, abs_)]
    if isinstance(expected, float) or (isinstance(expected, int) and isinstance(found, float)):
        ok = isinstance(found, (int, float)) and (
            (np.isnan(expected) and np.isnan(found)) or abs(found - expected) <= abs_ + rel * abs(expected))
        return [] if ok else [f"{where}: {found!r} != {expected!r}"]
    return [] if found == expected else [f"{where}: {found!r} != {expected!r}"]


def jsonable(tree):
    """``tree`` as JSON gives it back (tuples as lists, numpy scalars as numbers)."""
    return json.loads(json.dumps(tree, default=lambda x: x.item() if hasattr(x, "item") else str(x)))


if __name__ == "__main__":
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        tree = jsonable(record(Path(tmp)))
    if sys.argv[1] == "--compare":  # how far this machine's record is from a reference, at a tight tolerance
        reference = json.loads(Path(sys.argv[2]).read_text(encoding="utf-8"))["record"]
        for rel in (1e-5, 1e-9):
            differences = compare(tree, reference, rel=rel, abs_=rel * 1e-3)
            print(f"{len(differences)} differences at rel {rel:g}", *differences[:5], sep="\n  ")
        sys.exit(0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=TESTS).stdout.strip()
    Path(sys.argv[1]).write_text(json.dumps({"recorded_at": commit, "record": tree}, indent=1) + "\n",
                                 encoding="utf-8")
