"""The real-sound demo (``mlatr demo-real``): frozen real backbones, trained projection heads, an index.

Frozen backbones (aisfx audio, e5-small and/or USE text): only the projection heads train (ATRI sec.
3.1 / 5.3: Linear-ReLU-Linear heads, cosine / tau logits, eq. 1; symmetric InfoNCE, the ML-CLAP
baseline loss) with :func:`mlatr.training.heads.train_heads`, on features computed once
(:mod:`mlatr.frozen_features`). Evaluation on the held-out test split (English captions from the file
names) with :func:`mlatr.evaluation.evaluate_embeddings`, and on the hand-written multilingual query set
(:func:`mlatr.evaluation.queries.multilingual_query_eval`), against the same pipeline with random
(untrained) projection heads; the index of the whole library comes from the cached features
(:func:`mlatr.search.from_features.index_from_features`). The splits come from the manifest (``mlatr
data split``, :mod:`mlatr.data.splits`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import torch

from mlatr.data.manifest import Manifest
from mlatr.data.splits import assign_hash_splits
from mlatr.errors import MlatrError
from mlatr.evaluation import evaluate_embeddings
from mlatr.evaluation.queries import keyword_relevance, multilingual_query_eval
from mlatr.frozen_features import AudioFeatureCache, audio_features
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.matching import build_matching_head
from mlatr.models.dual_encoder import DualEncoder
from mlatr.models.registry import build_audio_encoder, build_text_encoder
from mlatr.search.from_features import index_from_features
from mlatr.training.checkpoint import LoadedModel, save_checkpoint
from mlatr.training.heads import HeadTraining, TextBank, caption_rows, project, train_heads

QUERIES_PATH = Path(__file__).resolve().parent.parent / "data" / "queries_multilingual.json"

#: Example queries the demo answers with the index (text, language).
EXAMPLE_QUERIES = [("wolf howling", "eng"), ("un chien aboie", "fra"), ("Schritte im Schnee", "deu"),
                   ("una explosión", "spa"), ("een deur gaat dicht", "nld"), ("foc que crepita", "cat"),
                   ("魔法の呪文", "jpn"), ("马在奔跑", "zho")]


def _split_arrays(manifest: Manifest, rows: list[int]):
    """(texts, text_audio (into ``rows``), text_lang, text_group) of the English captions."""
    sub = Manifest(clips=[manifest.clips[i] for i in rows], root=manifest.root, path=manifest.path)
    arr = sub.caption_arrays(["eng"])
    return arr["texts"], arr["text_audio"], arr["text_lang"], np.asarray(arr["text_group"])


def _train_english_heads(model, manifest, feats, by_split, splits, tf, settings, progress):
    """Train the heads on the train split's English captions (ML-CLAP's InfoNCE with one language), keeping
    the epoch of the best validation t2a R@10."""
    train_rows = by_split["train"]
    rows = [caption_rows(manifest.clips[i].captions, ["eng"]) for i in train_rows]
    bank = TextBank(list(zip(["eng"] * len(splits["train"][0]), splits["train"][0], strict=True)), tf["train"])
    validate = None
    if by_split["val"]:
        def validate(m):
            va, vt = project(m, feats[by_split["val"]], tf["val"])
            return evaluate_embeddings(va, vt, *splits["val"][1:])["t2a"]["avg"]["R10"]
    return train_heads(model, feats[train_rows], rows, ["eng"], bank, settings, validate, progress)


def run_real_demo(manifest_path: str | Path, out: str | Path, text_encoders: list[str], embed_dim: int = 256,
                  epochs: int = 60, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                  max_seconds: float = 10.0, progress: bool = True) -> dict:
    """Train the heads over frozen aisfx + each text encoder, evaluate against random heads, build the
    index with the first text encoder, answer the example queries; writes ``OUT/report.md``,
    ``OUT/results.json``, ``OUT/model.pt`` and ``OUT/sounds.idx.npz``. Returns the results dict."""
    out = Path(out)
    (out / "cache").mkdir(parents=True, exist_ok=True)
    manifest = Manifest.load(manifest_path)
    if all(c.split is None for c in manifest.clips):
        assign_hash_splits(manifest)
    by_split = {s: [i for i, c in enumerate(manifest.clips) if c.split == s] for s in ("train", "val", "test")}
    if not by_split["train"] or not by_split["test"]:
        raise MlatrError(f"{manifest_path}: the demo needs train and test clips (splits {manifest.splits()})")
    audio_enc = build_audio_encoder("aisfx", frozen=True)
    t0 = time.perf_counter()
    cache = AudioFeatureCache(out / "cache" / "aisfx.npz",
                              json.dumps({**audio_enc.config(), "max_seconds": max_seconds}, sort_keys=True))
    n_cached = cache.count_cached(manifest)
    feats = audio_features(audio_enc, manifest, cache, max_seconds, progress=progress)
    audio_seconds = time.perf_counter() - t0
    qdata = json.loads(QUERIES_PATH.read_text(encoding="utf-8"))
    queries, qlangs = qdata["queries"], list(qdata["languages"])
    q_text = [q["captions"][lang] for q in queries for lang in qlangs]
    q_lang = [lang for _ in queries for lang in qlangs]
    q_group = np.repeat(np.arange(len(queries)), len(qlangs))
    test_rows = by_split["test"]
    test_caps = [manifest.clips[i].captions["eng"][0] or "" for i in test_rows]
    relevant = keyword_relevance(queries, test_caps)
    splits = {s: _split_arrays(manifest, rows) for s, rows in by_split.items()}
    results: dict = {"manifest": str(manifest_path), "clips": {s: len(r) for s, r in by_split.items()},
                     "audio_features": {"computed": len(manifest) - n_cached, "cached": n_cached,
                                        "seconds": round(audio_seconds, 1)},
                     "settings": {"embed_dim": embed_dim, "epochs": epochs, "batch_size": batch_size, "lr": lr,
                                  "seed": seed, "max_seconds": max_seconds}, "runs": {}}
    models = {}
    settings = HeadTraining(epochs=epochs, batch_size=batch_size, lr=lr, seed=seed)
    for name in text_encoders:
        opts = {"cache_path": str(out / "cache" / f"{name}.npz")}
        if name == "use-multilingual":
            opts["allow_unsupported_languages"] = True  # the Catalan queries, marked in the report
        text_enc = build_text_encoder(name, **opts)
        tf = {s: text_enc.embed_numpy(splits[s][0], ["eng"] * len(splits[s][0])) for s in splits}
        qf = text_enc.embed_numpy(q_text, q_lang)
        text_enc.save_cache()
        for variant in ("random", "trained"):
            torch.manual_seed(seed)
            model = DualEncoder(audio_enc, text_enc, embed_dim=embed_dim)
            log = []
            if variant == "trained":
                log = _train_english_heads(model, manifest, feats, by_split, splits, tf, settings,
                                           progress)
                models[name] = model
            a, t = project(model, feats[test_rows], tf["test"])
            eng = evaluate_embeddings(a, t, *splits["test"][1:])
            qa, qt = project(model, feats[test_rows], qf)
            multi = multilingual_query_eval(qt, q_lang, q_group, qa, relevant, qlangs)
            results["runs"][f"{name}/{variant}"] = {"english_test": eng["t2a"]["avg"],
                                                    "english_a2t": eng["a2t"]["avg"], "multilingual": multi,
                                                    "log": log}
    # the model of the first text encoder: checkpoint + index of the whole library
    name = text_encoders[0]
    model = models[name]
    data_cfg = {"data": {"sample_rate": 16000, "eval_max_seconds": max_seconds, "languages": qlangs}}
    save_checkpoint(out / "model.pt", {"model_config": model.config(), "model": model.state_dict(),
                                       "train_config": data_cfg, "epoch": epochs, "step": 0})
    loaded = LoadedModel(model.eval(), build_matching_head("cosine"), data_cfg, out / "model.pt")
    index = index_from_features(loaded, manifest, feats, max_seconds)
    index.save(out / "sounds.idx.npz")
    results["examples"] = [{"query": q, "lang": lang,
                            "hits": [h.to_dict() for h in index.search_text(q, lang, 3)]}
                           for q, lang in EXAMPLE_QUERIES]
    results["index"] = {"path": str(out / "sounds.idx.npz"), "clips": len(index), "text_encoder": name}
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "report.md", real_demo_report(results, qlangs))
    return results


def real_demo_report(results: dict, languages: list[str]) -> str:
    """Markdown tables of :func:`run_real_demo`'s results."""
    lines = ["# mlatr demo-real", "",
             f"Clips: {results['clips']}; aisfx features: {results['audio_features']}.", "",
             "## Held-out test split, English captions from file names (t2a unless marked; percent)", "",
             "| run | R@1 | R@5 | R@10 | mAP@10 | a2t R@1 | a2t R@10 |", "|---|---:|---:|---:|---:|---:|---:|"]
    for key, run in results["runs"].items():
        e, b = run["english_test"], run["english_a2t"]
        lines.append(f"| {key} | {e['R1']:.1f} | {e['R5']:.1f} | {e['R10']:.1f} | {e['mAP10']:.1f} | "
                     f"{b['R1']:.1f} | {b['R10']:.1f} |")
    first = next(iter(results["runs"].values()))["multilingual"]
    lines += ["", f"## Hand-written multilingual queries ({first['n_queries']} queries with a relevant test clip "
              "x 8 languages; hit = a test clip whose caption has a query keyword; percent)", "",
              "| run | " + " | ".join(f"{lang} R@1/R@10" for lang in languages) + " | avg R@1 | avg R@10 | MRV | "
              "mean dis |", "|---|" + "---:|" * (len(languages) + 4)]
    for key, run in results["runs"].items():
        m = run["multilingual"]
        cells = [f"{m['t2a'][lang]['R1']:.0f}/{m['t2a'][lang]['R10']:.0f}" for lang in languages]
        dis = [v for v in m["consistency"]["dis"].values()]
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {m['t2a']['avg']['R1']:.1f} | "
                     f"{m['t2a']['avg']['R10']:.1f} | {m['consistency']['mrv']:.1f} | {sum(dis) / len(dis):.3f} |")
    lines += ["", f"## Example queries (index: {results['index']['clips']} clips, text encoder "
              f"{results['index']['text_encoder']})", ""]
    for ex in results["examples"]:
        hits = ", ".join(f"{h['id']} ({h['score']:.2f})" for h in ex["hits"])
        lines.append(f"- [{ex['lang']}] {ex['query']} -> {hits}")
    return "\n".join(lines) + "\n"
