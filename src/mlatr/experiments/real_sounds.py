"""Real sound libraries: deterministic splits of an imported folder manifest, and the real-sound demo.

``scripts/get-real-sounds.sh`` unpacks the Debian sound packages and imports them with the folder
importer; :func:`assign_hash_splits` then gives every clip a split from a hash of its id, so that the
split of a clip never depends on which other files are present (adding a library keeps old splits).

:func:`run_real_demo` (``mlatr demo-real``): frozen real backbones (aisfx audio, e5-small and/or USE
text), only the projection heads train (ATRI sec. 3.1 / 5.3: Linear-ReLU-Linear heads, cosine / tau
logits, eq. 1; symmetric InfoNCE, the ML-CLAP baseline loss), on features computed once (the backbones
are frozen, so their outputs are fixed: :class:`AudioFeatureCache` keeps the aisfx vectors of a run on
disk, keyed by clip id, file size and mtime, and the encoder's config). Evaluation on the held-out test
split (English captions from the file names) with :func:`mlatr.evaluation.evaluate_embeddings`, and on
the hand-written multilingual query set (:func:`multilingual_query_eval`), against the same pipeline
with random (untrained) projection heads.
"""

from __future__ import annotations

import hashlib
import sys
from collections import Counter
from pathlib import Path

from mlatr.data.manifest import Manifest

#: Default fractions (the rest is train).
VAL_FRACTION = 0.1
TEST_FRACTION = 0.25


def hash_unit(text: str) -> float:
    """A number in ``[0, 1)`` from the first 8 bytes of ``sha256(text)``: stable across runs/machines."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "big") / 2.0 ** 64


def split_of(clip_id: str, val: float = VAL_FRACTION, test: float = TEST_FRACTION) -> str:
    """``test`` if ``hash_unit(id) < test``, ``val`` if below ``test + val``, else ``train``."""
    u = hash_unit(clip_id)
    return "test" if u < test else "val" if u < test + val else "train"


def assign_hash_splits(manifest: Manifest, val: float = VAL_FRACTION, test: float = TEST_FRACTION) -> Counter:
    """Set every clip's ``split`` by :func:`split_of` (in place); returns the count per split."""
    counts: Counter = Counter()
    for clip in manifest.clips:
        clip.split = split_of(clip.id, val, test)
        counts[clip.split] += 1
    return counts


def main(argv: list[str] | None = None) -> int:
    """``python -m mlatr.experiments.real_sounds split MANIFEST``: rewrite MANIFEST with hash splits."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2 or argv[0] != "split":
        print("usage: python -m mlatr.experiments.real_sounds split MANIFEST", file=sys.stderr)
        return 2
    path = Path(argv[1])
    manifest = Manifest.load(path)
    counts = assign_hash_splits(manifest)
    manifest.save(path)
    print(f"{path}: {len(manifest)} clips; " + ", ".join(f"{k} {counts[k]}" for k in ("train", "val", "test")))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# ---- the real-sound demo ---------------------------------------------------------------------------

QUERIES_PATH = Path(__file__).resolve().parent.parent / "data" / "queries_multilingual.json"

#: Example queries the demo answers with the index (text, language).
EXAMPLE_QUERIES = [("wolf howling", "eng"), ("un chien aboie", "fra"), ("Schritte im Schnee", "deu"),
                   ("una explosión", "spa"), ("een deur gaat dicht", "nld"), ("foc que crepita", "cat"),
                   ("魔法の呪文", "jpn"), ("马在奔跑", "zho")]


class AudioFeatureCache:
    """Pooled features of a frozen audio encoder per clip, in one ``.npz`` (written atomically).

    Key: ``(clip id, file size, file mtime_ns)``; the whole cache is tied to the encoder's config (a
    different encoder or crop length starts empty). Owned by the run that creates it (no global state).
    """

    def __init__(self, path: str | Path, encoder_key: str):
        import json

        import numpy as np

        self.path, self.encoder_key = Path(path), encoder_key
        self.vectors: dict[tuple[str, int, int], np.ndarray] = {}
        if self.path.is_file():
            with np.load(self.path, allow_pickle=False) as z:
                meta = json.loads(str(z["meta"]))
                if meta["encoder"] == encoder_key:
                    for key, vec in zip(meta["keys"], z["vectors"], strict=True):
                        self.vectors[tuple(key)] = vec

    @staticmethod
    def file_key(clip_id: str, path: Path) -> tuple[str, int, int]:
        st = path.stat()
        return (clip_id, int(st.st_size), int(st.st_mtime_ns))

    def save(self) -> None:
        import json

        import numpy as np

        from mlatr.io_utils import atomic_write_with

        keys = list(self.vectors)
        vectors = np.stack([self.vectors[k] for k in keys]) if keys else np.zeros((0, 0), np.float32)
        meta = np.asarray(json.dumps({"encoder": self.encoder_key, "keys": [list(k) for k in keys]}))
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_with(self.path, lambda fh: np.savez(fh, vectors=vectors, meta=meta))


def audio_features(encoder, manifest: Manifest, cache: AudioFeatureCache, max_seconds: float,
                   batch_size: int = 8, progress: bool = True):
    """``[N, D]`` pooled features of every clip (frozen ``encoder``), computing only those not cached."""
    import numpy as np
    import torch
    from tqdm import tqdm

    from mlatr.audio.io import collate_waveforms, crop_or_pad, load_audio

    keys = [cache.file_key(c.id, c.audio_path(manifest.root)) for c in manifest.clips]
    todo = [i for i, k in enumerate(keys) if k not in cache.vectors]
    limit = int(round(max_seconds * 16000))
    bar = tqdm(total=len(todo), desc="aisfx features", unit="clip", disable=not progress or not todo)
    encoder.eval()
    for start in range(0, len(todo), batch_size):
        rows = todo[start:start + batch_size]
        waves = []
        for i in rows:
            w = load_audio(manifest.clips[i].audio_path(manifest.root), 16000)
            waves.append(crop_or_pad(w, limit, mode="center")[0] if w.shape[0] > limit else w)
        wave, lens = collate_waveforms(waves)
        with torch.no_grad():
            pooled = encoder(wave, lens).pooled.float().numpy()
        for i, vec in zip(rows, pooled, strict=True):
            cache.vectors[keys[i]] = vec
        bar.update(len(rows))
        if (start // batch_size) % 10 == 9:
            cache.save()
    bar.close()
    if todo:
        cache.save()
    return np.stack([cache.vectors[k] for k in keys]).astype(np.float32)


def keyword_relevance(queries: list[dict], captions: list[str]):
    """``[Q, N]`` bool: clip n is relevant to query q when a word of its English caption (lower case,
    split on non-alphanumerics) equals one of the query's English keywords."""
    import re

    import numpy as np

    words = [set(re.findall(r"[a-z0-9]+", c.lower())) for c in captions]
    return np.array([[bool(set(q["keywords"]) & w) for w in words] for q in queries], dtype=bool)


def multilingual_query_eval(query_emb, query_lang: list[str], query_group, audio_emb, relevant,
                            languages: list[str], pivot: str = "eng") -> dict:
    """Retrieval and consistency of a multilingual query set with keyword relevance.

    ``query_emb [Nq, d]`` unit rows (query ``i`` in ``query_lang[i]``, translation group
    ``query_group[i]``), ``audio_emb [Na, d]`` unit rows, ``relevant [G, Na]`` bool per group. The rank
    of a query is the 1-based position of its best-ranked relevant clip (ties counted pessimistically:
    1 + the number of clips scoring strictly above, plus the non-relevant ones tied with it); R@k = the
    percentage of queries with rank <= k (ATRI eq. 13's R@k with "any relevant clip" as the hit; percent
    as :func:`mlatr.evaluation.evaluate_embeddings` reports it). Groups
    without a relevant clip are left out. Consistency: ATRI eq. 14-15 (gap, dis) on the query
    embeddings and eq. 16 (MRV) on these ranks, over groups present in every language, via
    :mod:`mlatr.evaluation.consistency`.
    """
    import numpy as np

    from mlatr.evaluation.consistency import embedding_gap_and_distance, mean_rank_variance

    scores = query_emb @ audio_emb.T  # [Nq, Na]
    rel = relevant[query_group]  # [Nq, Na]
    keep_groups = np.flatnonzero(relevant.any(axis=1))
    best = np.where(rel, scores, -np.inf).max(axis=1)
    ranks = 1 + (scores > best[:, None]).sum(axis=1) + ((scores == best[:, None]) & ~rel).sum(axis=1)
    ranks = ranks.astype(np.int64)
    lang_idx = {lang: k for k, lang in enumerate(languages)}
    where = np.full((relevant.shape[0], len(languages)), -1, np.int64)
    for i, (lang, g) in enumerate(zip(query_lang, query_group, strict=True)):
        where[g, lang_idx[lang]] = i
    groups = where[keep_groups]
    groups = groups[np.all(groups >= 0, axis=1)]
    per_lang = {}
    for lang in languages:
        r = ranks[groups[:, lang_idx[lang]]]
        per_lang[lang] = {"R1": 100 * float(np.mean(r <= 1)), "R5": 100 * float(np.mean(r <= 5)),
                          "R10": 100 * float(np.mean(r <= 10)), "medR": float(np.median(r))}
    avg = {m: float(np.mean([per_lang[lang][m] for lang in languages])) for m in ("R1", "R5", "R10", "medR")}
    gap, dis = embedding_gap_and_distance(query_emb, groups, languages, pivot)
    return {"t2a": {**per_lang, "avg": avg}, "n_queries": int(groups.shape[0]),
            "consistency": {"gap": gap, "dis": dis, "mrv": mean_rank_variance(ranks, groups)}}


def _unit(x):
    import numpy as np

    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def project(model, audio_feats, text_feats):
    """Projected unit-norm embeddings of precomputed backbone features (the DualEncoder's heads)."""
    import torch

    with torch.no_grad():
        a = model.audio_projection(torch.from_numpy(audio_feats))
        t = model.text_projection(torch.from_numpy(text_feats))
    return _unit(a.numpy()), _unit(t.numpy())


def train_heads(model, audio_feats, text_feats, pair_audio, val: tuple | None, epochs: int, batch_size: int,
                lr: float, seed: int, progress: bool = True) -> list[dict]:
    """Train only the projection heads on fixed backbone features with symmetric InfoNCE (ATRI sec. 3.1).

    ``pair_audio[i]`` is the clip row of caption ``i`` (each epoch shuffles the caption-clip pairs with a
    seeded generator; one caption per clip per batch is not enforced: the real libraries' captions are
    one per clip). Keeps the heads of the epoch with the best validation t2a R@10 (``val`` =
    (audio feats, text feats, text_audio, text_lang, text_group)); returns the per-epoch log.
    """
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [64, 512] matrices: thread hand-offs cost more than they save (35x on a busy CPU)
    try:
        return _train_heads(model, audio_feats, text_feats, pair_audio, val, epochs, batch_size, lr, seed, progress)
    finally:
        torch.set_num_threads(threads)


def _train_heads(model, audio_feats, text_feats, pair_audio, val, epochs, batch_size, lr, seed, progress):
    import copy

    import numpy as np
    import torch
    from tqdm import tqdm

    from mlatr.evaluation import evaluate_embeddings
    from mlatr.losses import clip_loss

    gen = torch.Generator().manual_seed(seed)
    params = [p for n, p in model.named_parameters() if n.startswith(("audio_projection", "text_projection"))]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=1e-4)
    a_all, t_all = torch.from_numpy(audio_feats), torch.from_numpy(text_feats)
    pairs = torch.from_numpy(np.asarray(pair_audio, np.int64))
    log, best, best_state = [], -1.0, None
    for epoch in tqdm(range(epochs), desc="train heads", unit="epoch", disable=not progress):
        model.audio_projection.train()
        model.text_projection.train()
        order = torch.randperm(len(pairs), generator=gen)
        total = 0.0
        for start in range(0, len(order) - 1, batch_size):
            idx = order[start:start + batch_size]
            if len(idx) < 2:
                continue
            u = model.audio_projection(a_all[pairs[idx]])
            v = model.text_projection(t_all[idx])
            loss = clip_loss(u, v, model.temperature)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        entry = {"epoch": epoch + 1, "loss": total / len(pairs)}
        if val is not None:
            va, vt = project(model, val[0], val[1])
            r10 = evaluate_embeddings(va, vt, *val[2:])["t2a"]["avg"]["R10"]
            entry["val_R10"] = r10
            if r10 > best:
                best, best_state = r10, copy.deepcopy({k: v for k, v in model.state_dict().items()
                                                      if k.startswith(("audio_projection", "text_projection"))})
        log.append(entry)
    if best_state is not None:
        model.load_state_dict(best_state, strict=False)
    return log


def _split_arrays(manifest: Manifest, rows: list[int]):
    """(clip rows, texts, text_audio (into ``rows``), text_lang, text_group) of the English captions."""
    import numpy as np

    sub = Manifest(clips=[manifest.clips[i] for i in rows], root=manifest.root, path=manifest.path)
    arr = sub.caption_arrays(["eng"])
    return arr["texts"], arr["text_audio"], arr["text_lang"], np.asarray(arr["text_group"])


def run_real_demo(manifest_path: str | Path, out: str | Path, text_encoders: list[str], embed_dim: int = 256,
                  epochs: int = 60, batch_size: int = 64, lr: float = 1e-3, seed: int = 0,
                  max_seconds: float = 10.0, progress: bool = True) -> dict:
    """Train the heads over frozen aisfx + each text encoder, evaluate against random heads, build the
    index with the first text encoder, answer the example queries; writes ``OUT/report.md``,
    ``OUT/results.json``, ``OUT/model.pt`` and ``OUT/sounds.idx.npz``. Returns the results dict."""
    import json
    import time

    import numpy as np
    import torch

    from mlatr.evaluation import evaluate_embeddings
    from mlatr.io_utils import atomic_write_json, atomic_write_text
    from mlatr.matching import build_matching_head
    from mlatr.models.dual_encoder import DualEncoder
    from mlatr.models.registry import build_audio_encoder, build_text_encoder
    from mlatr.training.checkpoint import LoadedModel, save_checkpoint

    out = Path(out)
    (out / "cache").mkdir(parents=True, exist_ok=True)
    manifest = Manifest.load(manifest_path)
    if all(c.split is None for c in manifest.clips):
        assign_hash_splits(manifest)
    by_split = {s: [i for i, c in enumerate(manifest.clips) if c.split == s] for s in ("train", "val", "test")}
    if not by_split["train"] or not by_split["test"]:
        from mlatr.errors import MlatrError
        raise MlatrError(f"{manifest_path}: the demo needs train and test clips (splits {manifest.splits()})")
    audio_enc = build_audio_encoder("aisfx", frozen=True)
    t0 = time.perf_counter()
    cache = AudioFeatureCache(out / "cache" / "aisfx.npz",
                              json.dumps({**audio_enc.config(), "max_seconds": max_seconds}, sort_keys=True))
    n_cached = sum(1 for c in manifest.clips
                   if cache.file_key(c.id, c.audio_path(manifest.root)) in cache.vectors)
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
                tr = splits["train"]
                val = (feats[by_split["val"]], tf["val"], *splits["val"][1:]) if by_split["val"] else None
                log = train_heads(model, feats[by_split["train"]], tf["train"], tr[1], val, epochs, batch_size, lr,
                                  seed, progress)
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


def index_from_features(loaded, manifest: Manifest, feats, max_seconds: float):
    """The index ``build_index`` would write, from already computed frozen-backbone features (same
    embeddings: the heads applied to the encoder's pooled output, then L2-normalised)."""
    from mlatr.search.index import empty_index, file_sha256

    model, checkpoint = loaded.model, Path(loaded.path)
    arr = manifest.caption_arrays(["eng"])
    text = model.text_encoder.embed_numpy(arr["texts"], list(arr["text_lang"]))
    a, t = project(model, feats, text)
    index = empty_index(model.embed_dim, {
        "checkpoint": {"path": str(checkpoint.resolve()), "sha256": file_sha256(checkpoint)},
        "model_config": model.config(), "sample_rate": 16000, "max_seconds": max_seconds,
        "caption_languages": ["eng"], "manifest": str(Path(manifest.path).resolve()) if manifest.path else None},
        loaded)
    index.append(manifest.clips, manifest.root, a, arr, t)
    return index


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
