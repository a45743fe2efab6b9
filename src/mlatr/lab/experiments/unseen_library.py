"""Leave-one-library-out: how real-sound heads do on a sound library they were never trained on (issue 17).

A person points mlatr at their own folder, which no training clip came from. To measure that, every
library of the real-sound manifest (its clips' first folder: ``scratch``, ``minetest``, ...) is held out
in turn: the heads train on all the other libraries (their hash-``val`` clips choose the epoch) and are
evaluated on every clip of the held-out one (:func:`mlatr.lab.experiments.real_heads.evaluate_clips`: the
file-name captions, the hand-written queries in eight languages with gap / dis / MRV, zero-shot folder
labels in eight languages; each with its chance level). The in-library split (train / val / test by the
hash of each id, every library in all three) is run the same way, for comparison.

Figures are means over the held-out libraries (each library counts once; the query metrics over the
libraries with at least one relevant clip, zero-shot over those with two folder labels or more). MRV
grows with the number of candidate clips, so a mean MRV mixes libraries of different sizes: read it
next to recall, per library in the report.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from tqdm import tqdm

from mlatr.data.splits import hash_unit
from mlatr.errors import MlatrError
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.lab.experiments.head_recipe import HeadRecipe, best_epoch, train_recipe
from mlatr.lab.experiments.real_heads import RealSounds, evaluate_clips, text_space
from mlatr.lab.experiments.relevance_fit import measure_folder, text_search_report
from mlatr.lab.experiments.text_search_eval import fold_embeddings, save_fold_embeddings
from mlatr.plotting import pyplot

IN_LIBRARY = "in-library"
#: The 12 libraries of the first real-sound corpus (issue 17): reported apart from the ones added since
#: (issue 35), so that figures stay comparable across corpus versions.
ORIGINAL_LIBRARIES = ("flare", "freedesktop", "lincity", "lmms", "micropolis", "minetest", "qabcs", "scratch",
                      "sonic-pi", "sound-icons", "wesnoth", "widelands")


def folds(data: RealSounds, libraries: Sequence[str] | None = None, added_groups: int | None = None,
          val_libraries: float | None = None) -> dict[str, dict[str, list[int]]]:
    """``{held-out library: {"train", "val", "test"}}`` row lists, plus the in-library split.

    ``added_groups``: the libraries not in :data:`ORIGINAL_LIBRARIES` are held out ``added_groups`` folds at a
    time instead of one by one (fold ``added-K`` holds the libraries whose name hashes to K), so a corpus of a
    hundred small libraries costs a few folds; the original libraries are always held out one by one.

    ``val_libraries``: the epoch is chosen on whole libraries that do not train (:func:`validation_libraries`:
    that fraction of the fold's other libraries, all their clips) instead of the other libraries' hash-``val``
    clips, so it is chosen for libraries never trained on."""
    libs = data.libraries
    splits = [c.split for c in data.manifest.clips]
    fold_of = {lib: lib if added_groups is None or lib in ORIGINAL_LIBRARIES
               else f"added-{int(hash_unit(lib) * added_groups)}" for lib in set(libs)}
    names = sorted(set(fold_of.values())) if libraries is None else list(libraries)
    unknown = sorted(set(names) - set(fold_of.values()))
    if unknown:
        raise MlatrError(f"no clips from librar{'y' if len(unknown) == 1 else 'ies'} {', '.join(unknown)} "
                         f"(have: {', '.join(sorted(set(fold_of.values())))})")
    out = {}
    for fold in names:
        rest = [i for i, x in enumerate(libs) if fold_of[x] != fold]
        if val_libraries:
            held = validation_libraries({libs[i] for i in rest}, val_libraries)
            is_val = [libs[i] in held for i in rest]
        else:
            is_val = [splits[i] == "val" for i in rest]
        out[fold] = {"train": [i for i, v in zip(rest, is_val, strict=True) if not v],
                     "val": [i for i, v in zip(rest, is_val, strict=True) if v],
                     "test": [i for i, x in enumerate(libs) if fold_of[x] == fold]}
    out[IN_LIBRARY] = {s: [i for i, x in enumerate(splits) if x == s] for s in ("train", "val", "test")}
    if not out[IN_LIBRARY]["train"] or not out[IN_LIBRARY]["test"]:
        raise MlatrError("the manifest needs hash splits (mlatr data split): no train or no test clips")
    return out


def validation_libraries(libraries: set[str], fraction: float) -> set[str]:
    """The libraries whose name hashes (``hash_unit("val:" + name)``) below ``fraction``, at least one and never
    all: the same ones in every fold that holds them."""
    ranked = sorted(libraries, key=lambda lib: hash_unit(f"val:{lib}"))
    held = {lib for lib in ranked if hash_unit(f"val:{lib}") < fraction} or set(ranked[:1])
    if len(held) >= len(ranked):
        raise MlatrError(f"validation libraries: {len(ranked)} librar{'y' if len(ranked) == 1 else 'ies'} "
                         "to train on, none would be left")
    return held


def run_unseen_library(manifest_path: str | Path, out: str | Path, text_encoders: Sequence[str],
                       options: Sequence[str], *, libraries: Sequence[str] | None = None, epochs: int = 60,
                       batch_size: int = 64, lr: float = 1e-3, embed_dim: int = 256, seed: int = 0,
                       max_seconds: float = 10.0, cache_dir: str | Path | None = None, progress: bool = True,
                       added_groups: int | None = None) -> dict:
    """Train and evaluate every text encoder x head option x fold; writes ``OUT/results.json`` (after each
    run, so a rerun with the same settings resumes), ``OUT/report.md`` and ``OUT/unseen-recall-by-language.png``.
    Returns the results dict."""
    if not options:
        raise MlatrError("--heads: no head option given")
    recipes = {name: HeadRecipe(name, epochs=epochs, batch_size=batch_size, lr=lr, embed_dim=embed_dim,
                                untrained=True) for name in options}
    out = Path(out)
    cache_dir = Path(cache_dir) if cache_dir is not None else out / "cache"
    cache_dir.mkdir(parents=True, exist_ok=True)
    data = RealSounds.load(manifest_path, cache_dir / "aisfx.npz", max_seconds, progress)
    fold_rows = folds(data, libraries, added_groups)
    settings = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "embed_dim": embed_dim, "seed": seed,
                "max_seconds": max_seconds, "clips": len(data.manifest)}
    if added_groups is not None:
        settings["added_groups"] = added_groups
    results = _previous(out / "results.json", settings)
    results["folds"] = {f: {s: len(r) for s, r in rows.items()} for f, rows in fold_rows.items()}
    todo = [(enc, opt, f) for enc in text_encoders for opt in options for f in fold_rows
            if not _done(results["runs"].get(f"{enc}/{opt}", {}).get("folds", {}), f, out / "embeddings" / enc / opt)]
    bar = tqdm(total=len(todo), desc="unseen-library runs", unit="run", disable=not progress or not todo)
    for enc in text_encoders:
        if not any(t[0] == enc for t in todo):
            continue
        text_enc, bank = text_space(enc, data, cache_dir)
        for opt, recipe in recipes.items():
            run = results["runs"].setdefault(f"{enc}/{opt}", {"text_encoder": enc, "heads": opt,
                                                              "about": recipe.option.about, "folds": {},
                                                              "manifest": str(manifest_path)})
            for f, rows in fold_rows.items():
                if _done(run["folds"], f, out / "embeddings" / enc / opt):
                    continue
                bar.set_postfix_str(f"{enc} {opt} {f}")
                checkpoints = out / "heads" / enc / opt / f  # an interrupted run resumes from its last epoch
                trained = train_recipe(recipe, data, text_enc, bank, rows["train"], rows["val"], seed, checkpoints)
                model = trained.model
                run["folds"][f] = {**evaluate_clips(model, data, bank, rows["test"]),
                                   "best_epoch": best_epoch(trained.logs[0])}
                if f != IN_LIBRARY:
                    (out / "embeddings" / enc / opt).mkdir(parents=True, exist_ok=True)
                    save_fold_embeddings(out / "embeddings" / enc / opt / f"{f}.npz",
                                         fold_embeddings(model, data, bank, rows["test"]))
                run["unseen"] = summarize(run["folds"])
                atomic_write_json(out / "results.json", results)
                shutil.rmtree(checkpoints, ignore_errors=True)  # the fold is recorded: its heads are not needed
                bar.update(1)
    bar.close()
    shutil.rmtree(out / "heads", ignore_errors=True)  # every run is recorded: no head run left to resume
    for key, run in results["runs"].items():
        run["unseen"] = summarize(run["folds"])
        held_out = [f for f in run["folds"] if f != IN_LIBRARY]
        if len(held_out) > 2:  # the text-search rankings, relevance and classification, cross-fitted
            run["text_search"] = measure_folder(out / "embeddings" / key, data, progress=lambda _: None)
    results["best"] = best_run(results)
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "report.md", unseen_report(results, data.languages))
    plot_unseen_recall(results, data.languages, out / "unseen-recall-by-language.png")
    return results


def _previous(path: Path, settings: dict) -> dict:
    """The finished runs of an earlier call with the same settings (resume), else an empty result."""
    if path.is_file():
        old = json.loads(path.read_text(encoding="utf-8"))
        if old.get("settings") == settings:
            return old
    return {"settings": settings, "runs": {}}


def _done(folds: dict, fold: str, embeddings: Path) -> bool:
    """A fold whose results are complete (a held-out fold of an earlier version may lack its embeddings)."""
    return fold in folds and (fold == IN_LIBRARY or (embeddings / f"{fold}.npz").is_file())


def summarize(fold_results: dict[str, dict]) -> dict:
    """Means over the held-out libraries (the in-library fold apart) of the numbers the report shows."""
    unseen = {f: r for f, r in fold_results.items() if f != IN_LIBRARY}
    with_queries = [r["queries"] for r in unseen.values() if r["queries"]["n_queries"]]
    with_labels = [r["zero_shot"] for r in unseen.values() if r["zero_shot"]]
    caps = [r["captions"] for r in unseen.values()]

    def mean(values):
        values = [v for v in values if v == v]  # drop NaN
        return float(np.mean(values)) if values else float("nan")

    langs = [k for k in (with_queries[0]["t2a"] if with_queries else {}) if k != "avg"]
    out = {
        "libraries": len(unseen), "with_queries": len(with_queries), "with_labels": len(with_labels),
        "files": {d: {k: mean([c[d][k] for c in caps]) for k in ("R1", "R5", "R10")} for d in ("t2a", "a2t")},
        "files_chance": {d: {k: mean([c["chance"][d][k] for c in caps]) for k in ("R1", "R5", "R10")}
                         for d in ("t2a", "a2t")},
        "queries": {d: {lang: {k: mean([q[d][lang][k] for q in with_queries]) for k in ("R1", "R5", "R10")}
                        for lang in [*langs, "avg"]} for d in ("t2a", "a2t")},
        "queries_chance": {d: {k: mean([q["chance"][d][k] for q in with_queries]) for k in ("R1", "R5", "R10")}
                           for d in ("t2a", "a2t")},
        "mrv": mean([q["consistency"]["mrv"] for q in with_queries]),
        "gap": mean([np.mean(list(q["consistency"]["gap"].values())) for q in with_queries]),
        "dis": mean([np.mean(list(q["consistency"]["dis"].values())) for q in with_queries]),
        "zero_shot": {lang: mean([z[lang]["top1"] for z in with_labels]) for lang in [*langs, "avg"]},
        "zero_shot_chance": mean([z["chance"]["top1"] for z in with_labels]),
        "groups": {name: sound_only({f: r for f, r in unseen.items() if (f in ORIGINAL_LIBRARIES) == original})
                   for name, original in (("original", True), ("added", False))},
    }
    if IN_LIBRARY in fold_results:
        q = fold_results[IN_LIBRARY]["queries"]
        out["in_library"] = {"queries_t2a": q["t2a"]["avg"], "mrv": q["consistency"]["mrv"],
                             "files_t2a": fold_results[IN_LIBRARY]["captions"]["t2a"],
                             "queries_chance": q["chance"]["t2a"]}
    return out


def sound_only(fold_results: dict[str, dict]) -> dict:
    """Sound-only query t2a R@1 / R@10 per language, a2t R@1 and MRV: means over the folds with a relevant clip."""
    qs = [r["queries"] for r in fold_results.values() if r["queries"]["n_queries"]]
    if not qs:
        return {"libraries": 0}

    def mean(values):
        values = [v for v in values if v == v]
        return float(np.mean(values)) if values else float("nan")

    langs = list(qs[0]["t2a"])
    return {"libraries": len(qs),
            "t2a": {lang: {k: mean([q["t2a"][lang][k] for q in qs]) for k in ("R1", "R10")} for lang in langs},
            "a2t_R1": mean([q["a2t"]["avg"]["R1"] for q in qs]), "mrv": mean([q["consistency"]["mrv"] for q in qs]),
            "chance": {k: mean([q["chance"]["t2a"][k] for q in qs]) for k in ("R1", "R10")}}


def single_target(fold_results: dict[str, dict]) -> dict:
    """The single-target task (each held-out clip's first English caption against all held-out clips, the fold
    records' ``"captions"``, :func:`~mlatr.lab.experiments.real_heads.caption_retrieval`): t2a R@1 / R@5 / R@10, a2t
    R@1 / R@10 and their chance, means over the folds that have it (each fold counts once)."""
    caps = [r["captions"] for r in fold_results.values() if r.get("captions", {}).get("n_clips")]
    if not caps:
        return {"libraries": 0}
    keys = {"t2a": ("R1", "R5", "R10"), "a2t": ("R1", "R10")}
    return {"libraries": len(caps), "clips": float(np.mean([c["n_clips"] for c in caps])),
            **{d: {k: float(np.mean([c[d][k] for c in caps])) for k in ks} for d, ks in keys.items()},
            "chance": {d: {k: float(np.mean([c["chance"][d][k] for c in caps])) for k in ks}
                       for d, ks in keys.items()}}


def groups_report(runs: dict, languages: list[str]) -> list[str]:
    """Markdown lines: sound-only query recall on the 12 original libraries and on the added ones, apart."""
    if not any(run["unseen"].get("groups", {}).get("added", {}).get("libraries") for run in runs.values()):
        return []
    lines = ["", "## Sound-only queries: the 12 original libraries and the added ones, apart", "",
             "| run | libraries | R@1 | R@10 | " + " | ".join(f"{lang} R@10" for lang in languages)
             + " | a2t R@1 | MRV | chance R@10 |", "|---|---|" + "---:|" * (len(languages) + 6)]
    for key, run in runs.items():
        for name, g in run["unseen"]["groups"].items():
            if g.get("libraries"):
                lines.append(f"| {key} | {name} ({g['libraries']}) | {sound_only_cells(g, languages)}")
    return lines


def sound_only_cells(group: dict, languages: list[str]) -> str:
    """A table row's cells of a :func:`sound_only` group: t2a R@1, R@10, R@10 per language, a2t R@1, MRV and
    chance R@10."""
    t = group["t2a"]
    return (f"{_f(t['avg']['R1'])} | {_f(t['avg']['R10'])} | " + " | ".join(_f(t[lang]["R10"]) for lang in languages)
            + f" | {_f(group['a2t_R1'])} | {_f(group['mrv'])} | {_f(group['chance']['R10'])} |")


def best_run(results: dict) -> str | None:
    """The trained run with the highest mean unseen-library query t2a R@10 (then R@1)."""
    trained = {k: r for k, r in results["runs"].items() if r["heads"] != "random" and r.get("unseen")}
    if not trained:
        return None
    return max(trained, key=lambda k: (trained[k]["unseen"]["queries"]["t2a"]["avg"]["R10"],
                                       trained[k]["unseen"]["queries"]["t2a"]["avg"]["R1"]))


def _f(x: float, digits: int = 1) -> str:
    return "-" if x != x else f"{x:.{digits}f}"


def unseen_report(results: dict, languages: list[str]) -> str:
    """Markdown: the headline table, recall per language, zero-shot per language, the best run per library."""
    runs = results["runs"]
    any_run = next(iter(runs.values()))["unseen"]
    lines = ["# Real sounds on a library never trained on (leave-one-library-out)", "",
             f"Settings: {results['settings']}. Held-out libraries: {any_run['libraries']} "
             f"({any_run['with_queries']} with a relevant clip for some query, {any_run['with_labels']} with two "
             "folder labels or more). Means over the held-out libraries; percent. Queries: 32 hand-written "
             "queries x 8 languages, a hit = a clip whose caption has a query keyword; files: each clip's first "
             "caption against its own clip.", "",
             "| text encoder / heads | queries t2a R@1 | R@10 | queries a2t R@1 | R@10 | files t2a R@1 | R@10 | "
             "files a2t R@1 | R@10 | MRV | dis | zero-shot top-1 | in-library queries R@10 | in-library MRV |",
             "|---|" + "---:|" * 14]
    for key, run in runs.items():
        u = run["unseen"]
        q, fi, inl = u["queries"], u["files"], u.get("in_library", {})
        nan = float("nan")
        lines.append(f"| {key} | {_f(q['t2a']['avg']['R1'])} | {_f(q['t2a']['avg']['R10'])} | "
                     f"{_f(q['a2t']['avg']['R1'])} | {_f(q['a2t']['avg']['R10'])} | {_f(fi['t2a']['R1'])} | "
                     f"{_f(fi['t2a']['R10'])} | {_f(fi['a2t']['R1'])} | {_f(fi['a2t']['R10'])} | {_f(u['mrv'])} | "
                     f"{_f(u['dis'], 3)} | {_f(u['zero_shot']['avg'])} | "
                     f"{_f(inl.get('queries_t2a', {}).get('R10', nan))} | {_f(inl.get('mrv', nan))} |")
    qc, fc = any_run["queries_chance"], any_run["files_chance"]
    lines.append(f"| chance | {_f(qc['t2a']['R1'])} | {_f(qc['t2a']['R10'])} | {_f(qc['a2t']['R1'])} | "
                 f"{_f(qc['a2t']['R10'])} | {_f(fc['t2a']['R1'])} | {_f(fc['t2a']['R10'])} | {_f(fc['a2t']['R1'])} | "
                 f"{_f(fc['a2t']['R10'])} | | | {_f(any_run['zero_shot_chance'])} | "
                 f"{_f(any_run.get('in_library', {}).get('queries_chance', {}).get('R10', float('nan')))} | |")
    manifests = {run.get("manifest") for run in runs.values()} - {None}
    if len(manifests) > 1:  # e.g. a translated copy of the manifest for the KCL option: same clips and splits
        lines += ["", "Manifests: " + "; ".join(f"{k}: {run['manifest']}" for k, run in runs.items()
                                                if run.get("manifest")) + "."]
    lines += ["", f"Best (highest unseen-library query t2a R@10): **{results.get('best')}**."]
    langs = [*languages, "avg"]
    for title, value, chance in (
            ("Queries, text-to-audio R@10", lambda u, lang: u["queries"]["t2a"][lang]["R10"], qc["t2a"]["R10"]),
            ("Queries, audio-to-text R@1", lambda u, lang: u["queries"]["a2t"][lang]["R1"], qc["a2t"]["R1"]),
            ("Zero-shot folder labels (SupCLAP §4.2.2 prompts), top-1", lambda u, lang: u["zero_shot"][lang],
             any_run["zero_shot_chance"])):
        lines += ["", f"## {title} per language (unseen libraries)", "",
                  "| run | " + " | ".join(langs) + " |", "|---|" + "---:|" * len(langs)]
        lines += [f"| {key} | " + " | ".join(_f(value(run["unseen"], lang)) for lang in langs) + " |"
                  for key, run in runs.items()]
        lines.append("| chance | " + " | ".join(_f(chance) for _ in langs) + " |")
    lines += groups_report(runs, languages)
    lines += text_search_report(runs, languages)
    best = results.get("best")
    if best:
        lines += ["", f"## Per held-out library: {best}", "",
                  "| held out | clips | queries | files t2a R@10 (chance) | queries t2a R@10 (chance) | "
                  "queries a2t R@1 (chance) | MRV | zero-shot top-1 (chance) | best epoch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for fold, r in runs[best]["folds"].items():
            c, q, z = r["captions"], r["queries"], r["zero_shot"]
            zs = f"{_f(z['avg']['top1'])} ({_f(z['chance']['top1'])}, {len(z['classes'])} labels)" if z else "-"
            lines.append(f"| {fold} | {c['n_clips']} | {q['n_queries']} | {_f(c['t2a']['R10'])} "
                         f"({_f(c['chance']['t2a']['R10'])}) | {_f(q['t2a']['avg']['R10'])} "
                         f"({_f(q['chance']['t2a']['R10'])}) | {_f(q['a2t']['avg']['R1'])} "
                         f"({_f(q['chance']['a2t']['R1'])}) | {_f(q['consistency']['mrv'])} | {zs} | "
                         f"{r.get('best_epoch') or '-'} |")
    return "\n".join(lines) + "\n"


def plot_unseen_recall(results: dict, languages: list[str], path: str | Path) -> Path:
    """Bars: unseen-library query t2a R@10 per language for each run, the chance level as a line."""
    plt = pyplot()
    runs = results["runs"]
    fig, ax = plt.subplots(figsize=(12, 4))
    width = 0.8 / max(len(runs), 1)
    x = np.arange(len(languages) + 1)
    for k, (key, run) in enumerate(runs.items()):
        t = run["unseen"]["queries"]["t2a"]
        ax.bar(x + k * width - 0.4 + width / 2, [t[lang]["R10"] for lang in [*languages, "avg"]], width, label=key)
    chance = next(iter(runs.values()))["unseen"]["queries_chance"]["t2a"]["R10"]
    ax.axhline(chance, color="black", linestyle="--", linewidth=1, label=f"chance ({chance:.1f})")
    ax.set_xticks(x, [*languages, "avg"])
    ax.set_ylabel("query text-to-audio R@10 (%)")
    ax.set_title("Libraries never trained on: hand-written queries, leave-one-library-out mean")
    ax.legend(fontsize=7, bbox_to_anchor=(1.01, 1), loc="upper left")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
