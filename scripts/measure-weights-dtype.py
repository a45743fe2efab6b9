"""What storing a model's weights in float16 (``mlatr export --weights-dtype float16``) costs in retrieval.

Runs the same frozen-feature evaluation as ``mlatr demo-real`` (:func:`mlatr.lab.experiments.real_heads.evaluate_clips`:
the test split's English captions against their clips, and the 32 hand-written queries in 8 languages) with the
checkpoint's own weights and with the model folder's, both over the same cached aisfx and USE features, and
measures how far each embedding moved: the least and the mean cosine between a clip's (or a text's) two
embeddings. The backbones are frozen and not stored in the folder, so only the projection heads differ.

Usage::

    python scripts/measure-weights-dtype.py --checkpoint runs/demo-real/model.pt \\
        --folder src/mlatr/data/models/real-sounds --manifest data/real-sounds/manifest.jsonl \\
        --cache runs/demo-real/cache [--json out.json]

``--cache`` is copied to a scratch folder first, so the run never writes into it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

import mlatr
from mlatr.inference.encoded_split import project
from mlatr.lab.experiments.real_heads import RealSounds, evaluate_clips, text_space

CACHED = ("aisfx.npz", "use-multilingual.npz")


def paired_cosines(a: np.ndarray, b: np.ndarray) -> dict:
    """The least and mean cosine between row i of ``a`` and row i of ``b`` (both unit rows)."""
    cos = np.sum(a * b, axis=1)
    return {"min": float(cos.min()), "mean": float(cos.mean()), "n": int(len(cos))}


def figures(result: dict) -> dict:
    """The recall figures compared: caption t2a / a2t R@1, R@10 and the queries' t2a R@1, R@10 (averaged over the
    8 languages) with their MRV."""
    caps, queries = result["captions"], result["queries"]
    return {"captions t2a R@1": caps["t2a"]["R1"], "captions t2a R@10": caps["t2a"]["R10"],
            "captions a2t R@1": caps["a2t"]["R1"], "captions a2t R@10": caps["a2t"]["R10"],
            "queries t2a R@1": queries["t2a"]["avg"]["R1"], "queries t2a R@10": queries["t2a"]["avg"]["R10"],
            "queries MRV": queries["consistency"]["mrv"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="the model as trained (float32)")
    p.add_argument("--folder", required=True, help="the same model exported with --weights-dtype float16")
    p.add_argument("--manifest", required=True, help="the manifest it was trained on (its test split is measured)")
    p.add_argument("--cache", required=True, help="demo-real's cache folder (aisfx.npz, use-multilingual.npz)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        for name in CACHED:
            if (Path(args.cache) / name).is_file():
                shutil.copy(Path(args.cache) / name, Path(scratch) / name)
        data = RealSounds.load(args.manifest, Path(scratch) / "aisfx.npz", progress=False)
        _, bank = text_space("use-multilingual", data, scratch)
    rows = [i for i, c in enumerate(data.manifest.clips) if c.split == "test"]
    models = {"float32": mlatr.load(args.checkpoint, device="cpu").model,
              "float16": mlatr.load(args.folder, device="cpu").model}
    out = {"test clips": len(rows), "recall": {}}
    texts = [t for i in rows for t in data.english(i)[:1]]
    texts += [q["captions"][lang] for q in data.queries for lang in data.languages]
    langs = ["eng"] * (len(texts) - len(data.queries) * len(data.languages))
    langs += [lang for _ in data.queries for lang in data.languages]
    embedded = {}
    for name, model in models.items():
        model.eval()
        out["recall"][name] = figures(evaluate_clips(model, data, bank, rows))
        embedded[name] = project(model, data.features[rows], bank.lookup(texts, langs).numpy())
    out["audio cosine float32 vs float16"] = paired_cosines(embedded["float32"][0], embedded["float16"][0])
    out["text cosine float32 vs float16"] = paired_cosines(embedded["float32"][1], embedded["float16"][1])
    out["difference (float16 - float32)"] = {k: out["recall"]["float16"][k] - v
                                             for k, v in out["recall"]["float32"].items()}
    text = json.dumps(out, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
