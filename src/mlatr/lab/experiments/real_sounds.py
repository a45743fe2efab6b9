"""The real-sound demo (``mlatr demo-real``): frozen real backbones, trained projection heads, an index.

Frozen backbones (aisfx audio; USE and/or e5-small text): only the projection heads train, with one of
the head options of :mod:`mlatr.lab.experiments.real_heads` (by default the one that does best on libraries
never trained on, ``mlatr experiment unseen-library``), on features computed once. Evaluation on the
held-out test split (hash splits, ``mlatr data split``): the clips' captions, the hand-written queries in
eight languages with the consistency metrics, zero-shot folder labels, against the same pipeline with
random (untrained) heads. An option that trains on several caption languages (KCL) gets the English captions
translated by Apertium when the manifest has no others (:func:`translated_captions`). The checkpoint and the
index of the whole library come from the first text encoder's model
(:func:`mlatr.search.from_features.index_from_features`, from the cached features).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from mlatr.data.debian_sounds import read_licences
from mlatr.data.manifest import Manifest
from mlatr.data.splits import assign_hash_splits
from mlatr.errors import MlatrError
from mlatr.evaluation.plots import plot_recall_by_language
from mlatr.inference.checkpoint import save_checkpoint
from mlatr.inference.loaded_model import LoadedModel
from mlatr.inference.model_identity import weights_sha256
from mlatr.io_utils import atomic_write_json, atomic_write_jsonl, atomic_write_text
from mlatr.lab.experiments.head_options import DEFAULT_BATCH_SIZE, DEFAULT_ENSEMBLE, DEFAULT_EPOCHS, DEFAULT_HEADS
from mlatr.lab.experiments.head_recipe import HeadRecipe, train_recipe
from mlatr.lab.experiments.learning_curve import FrozenInputs, run_learning_curve
from mlatr.lab.experiments.real_heads import RealSounds, evaluate_clips, text_space
from mlatr.lab.experiments.relevance_fit import calibrate_recipe, calibration_summary
from mlatr.lab.experiments.unseen_library import sound_only_cells
from mlatr.matching import build_matching_head
from mlatr.search.from_features import index_from_features
from mlatr.search.index import Index
from mlatr.training.run_log import head_log_records
from mlatr.translation import ApertiumBackend, TranslationCache, Translator, translate_manifest

#: The languages a KCL recipe's English captions are translated into when the manifest has none (Apertium's
#: pairs in Debian: apertium-eng-spa, apertium-eng-cat, installed by scripts/setup-system.sh).
TRAINING_TRANSLATIONS = ("spa", "cat")

#: Example queries the demo answers with the index (text, language).
EXAMPLE_QUERIES = [("wolf howling", "eng"), ("un chien aboie", "fra"), ("Schritte im Schnee", "deu"),
                   ("una explosión", "spa"), ("een deur gaat dicht", "nld"), ("foc que crepita", "cat"),
                   ("魔法の呪文", "jpn"), ("马在奔跑", "zho")]



def run_real_demo(manifest_path: str | Path, out: str | Path, text_encoders: list[str], heads: str = DEFAULT_HEADS,
                  embed_dim: int = 256, epochs: int = DEFAULT_EPOCHS, batch_size: int = DEFAULT_BATCH_SIZE,
                  lr: float = 1e-3, seed: int = 0, max_seconds: float = 10.0, progress: bool = True,
                  unseen_epochs: int | None = None, added_groups: int = 12, augment: Sequence[str] = (),
                  augment_views: int = 1, ensemble: int = DEFAULT_ENSEMBLE, workers: int = 1) -> dict:
    """Train the heads (option ``heads``; ``ensemble`` head pairs trained apart, their unit outputs averaged:
    :func:`~mlatr.lab.experiments.head_recipe.train_recipe`) over frozen aisfx + each text encoder, evaluate
    against random heads, build the index with the first text encoder, answer the example queries; writes
    ``OUT/report.md``, ``OUT/results.json``, ``OUT/model.pt`` with its card ``OUT/model-card.md`` (data,
    licences, figures on unseen libraries) and the training curve of each head pair,
    ``OUT/members/K/log.jsonl`` (``mlatr plot OUT`` draws them together),
    the index folder ``OUT/sounds.idx`` (the current format, :mod:`mlatr.search.shards`) and
    ``OUT/query-recall-by-language.png`` (hand-written queries' t2a R@10 per language, one bar per run).
    Returns the results dict.

    ``unseen_epochs`` (None: no such run): the same recipe with the first text encoder on the
    leave-one-library-out protocol (:mod:`mlatr.lab.experiments.learning_curve`, sound-only queries; the 12
    original libraries held out one by one, the added ones ``added_groups`` folds at a time; ``workers``
    processes train its folds side by side), in ``OUT/unseen/``. The report also shows the licence table beside
    the manifest (``licences.json``).
    ``augment``: the heads (here and in the unseen run) train also on ``augment_views`` augmented views of
    these kinds (:meth:`~mlatr.lab.experiments.real_heads.RealSounds.augment`, cached in ``OUT/cache``)."""
    started = time.monotonic()
    recipe = HeadRecipe(heads, ensemble, epochs=epochs, batch_size=batch_size, lr=lr, embed_dim=embed_dim)
    baseline = HeadRecipe("random", embed_dim=embed_dim, untrained=True)
    out = Path(out)
    (out / "cache").mkdir(parents=True, exist_ok=True)
    data = RealSounds.load(manifest_path, out / "cache" / "aisfx.npz", max_seconds, progress)
    if augment:
        data.augment(augment, augment_views, out / "cache", max_seconds, progress)
    manifest = data.manifest
    if all(c.split is None for c in manifest.clips):
        assign_hash_splits(manifest)
    by_split = {s: [i for i, c in enumerate(manifest.clips) if c.split == s] for s in ("train", "val", "test")}
    if not by_split["train"] or not by_split["test"]:
        raise MlatrError(f"{manifest_path}: the demo needs train and test clips (splits {manifest.splits()})")
    option = recipe.option
    translated = option.caption_languages == "all" and data.caption_languages() == ["eng"]
    if translated:
        data = replace(data, manifest=translated_captions(manifest, out / "cache", progress))
    results: dict = {"manifest": str(manifest_path), "clips": {s: len(r) for s, r in by_split.items()},
                     "settings": {"heads": heads, "ensemble": ensemble, "embed_dim": embed_dim, "epochs": epochs,
                                  "batch_size": batch_size,
                                  "lr": lr, "seed": seed, "max_seconds": max_seconds, "objective": option.scheme,
                                  "caption_languages": data.training_languages(option),
                                  "translated_by_apertium": list(TRAINING_TRANSLATIONS) if translated else [],
                                  **({"augment": [v.augmentation.name for v in data.views]} if augment else {})},
                     "runs": {}}
    models, banks = {}, {}
    for name in text_encoders:
        text_enc, bank = text_space(name, data, out / "cache")
        banks[name] = bank
        untrained = train_recipe(baseline, data, text_enc, bank, [], [], seed).model
        results["runs"][f"{name}/random"] = {**evaluate_clips(untrained, data, bank, by_split["test"]), "members": []}
        trained = train_recipe(recipe, data, text_enc, bank, by_split["train"], by_split["val"], seed,
                               out / "heads" / f"{name}-{option.name}", progress)  # an interrupted run resumes there
        models[name] = trained.model
        results["runs"][f"{name}/{option.name}"] = {
            **evaluate_clips(models[name], data, bank, by_split["test"]),
            "members": [{"seed": s, "log": log} for s, log in zip(trained.seeds, trained.logs, strict=True)]}
        if name == text_encoders[0]:  # the indexed model's curves: epoch records that mlatr plot reads
            shutil.rmtree(out / "members", ignore_errors=True)  # an earlier run's larger ensemble
            (out / "log.jsonl").unlink(missing_ok=True)  # an earlier version's one curve: mlatr plot would draw it
            for k, log in enumerate(trained.logs):
                atomic_write_jsonl(out / "members" / str(k) / "log.jsonl", head_log_records(log))
    shutil.rmtree(out / "heads", ignore_errors=True)  # every head run is trained
    name = text_encoders[0]
    if unseen_epochs is not None:
        curve = run_learning_curve(FrozenInputs(data, banks[name], name, {}, {}), out / "unseen", train_blocks=(0,),
                                   fractions=(1.0,), seeds=(seed,), epochs=unseen_epochs, heads=heads,
                                   added_groups=added_groups, batch_size=batch_size, progress=progress,
                                   ensemble=ensemble, workers=workers, keep_embeddings=True)
        point = next(iter(curve["points"].values()))
        results["unseen"] = {"epochs": unseen_epochs, "added_groups": added_groups, **point["summary"],
                             "best_epochs": {f: r["best_epoch"] for f, r in point["folds"].items()}}
    licences = Path(manifest_path).parent / "licences.json"
    if licences.is_file():
        results["licences"] = read_licences(licences)
    model = models[name]
    data_cfg = {"data": {"sample_rate": 16000, "eval_max_seconds": max_seconds, "languages": data.languages}}
    calibration = None
    if unseen_epochs is not None:  # the shipped model's own calibration, from its recipe's held-out folds
        fitted, cal = calibrate_recipe(out / "unseen" / "embeddings", data, out / "calibration",
                                       weights_sha256(model.state_dict()),
                                       {"command": "mlatr demo-real", "manifest": str(manifest_path)},
                                       progress=lambda m: None)
        calibration = cal.to_dict()
        results["calibration"] = calibration_summary(fitted, cal)
    save_checkpoint(out / "model.pt", {"model_config": model.config(), "model": model.state_dict(),
                                       "train_config": data_cfg, "epoch": epochs, "step": 0}, calibration)
    loaded = LoadedModel(model.eval(), build_matching_head("cosine"), data_cfg, out / "model.pt")
    loaded.use_calibration(calibration)
    index = index_from_features(loaded, manifest, data.features, max_seconds)
    index.save(out / "sounds.idx")
    index = Index.load(out / "sounds.idx", model=loaded)
    index.record_abstention()  # its own "nothing relevant" level (none without a calibration)
    results["examples"] = [{"query": q, "lang": lang,
                            "hits": [h.to_dict() for h in index.search_text(q, lang, 3)]}
                           for q, lang in EXAMPLE_QUERIES]
    results["index"] = {"path": str(out / "sounds.idx"), "clips": len(index), "text_encoder": name,
                        "heads": heads}
    figure = plot_recall_by_language({key: run["queries"] for key, run in results["runs"].items()},
                                     out / "query-recall-by-language.png", metric="R10")
    results["figure"] = str(figure)
    results["seconds"] = round(time.monotonic() - started, 1)
    atomic_write_json(out / "results.json", results)
    atomic_write_text(out / "report.md", real_demo_report(results, data.languages))
    atomic_write_text(out / "model-card.md", model_card(results, data.languages))
    return results


def translated_captions(manifest: Manifest, cache_dir: Path, progress: bool = True) -> Manifest:
    """A copy of ``manifest`` whose English captions are translated offline into :data:`TRAINING_TRANSLATIONS`
    by Apertium (cached in ``cache_dir/translations.jsonl``): what a head option that trains on several
    caption languages (KCL, ATRI eq. 9) trains on when the manifest has English only. The index keeps the
    manifest's own captions."""
    try:
        translator = Translator(ApertiumBackend(), TranslationCache(cache_dir / "translations.jsonl"))
        out, summary = translate_manifest(manifest, TRAINING_TRANSLATIONS, translator, progress=progress)
    except MlatrError as exc:
        raise MlatrError(f"this head option trains on translated captions: {exc} (or translate the manifest "
                         "yourself with mlatr data translate, or choose --heads near-identity)") from exc
    if summary.failures:
        print(f"mlatr: {summary.failed} caption(s) Apertium did not translate are left out of training",
              file=sys.stderr)
    return out


def _f(x: float) -> str:
    return "-" if x != x else f"{x:.1f}"


def real_demo_report(results: dict, languages: list[str]) -> str:
    """Markdown tables of :func:`run_real_demo`'s results."""
    runs = results["runs"]
    first = next(iter(runs.values()))
    lines = ["# mlatr demo-real", "", f"Clips: {results['clips']}; settings: {results['settings']}.", "",
             "## Held-out test split, each clip's caption against its own clip (percent)", "",
             "| run | t2a R@1 | R@5 | R@10 | a2t R@1 | R@10 |", "|---|---:|---:|---:|---:|---:|"]
    for key, run in runs.items():
        e, b = run["captions"]["t2a"], run["captions"]["a2t"]
        lines.append(f"| {key} | {_f(e['R1'])} | {_f(e['R5'])} | {_f(e['R10'])} | {_f(b['R1'])} | {_f(b['R10'])} |")
    ch = first["captions"]["chance"]
    lines.append(f"| chance | {_f(ch['t2a']['R1'])} | {_f(ch['t2a']['R5'])} | {_f(ch['t2a']['R10'])} | "
                 f"{_f(ch['a2t']['R1'])} | {_f(ch['a2t']['R10'])} |")
    q0 = first["queries"]
    lines += ["", f"## Hand-written multilingual queries ({q0['n_queries']} queries with a relevant test clip x "
              f"{len(languages)} languages; hit = a test clip whose caption has a query keyword; t2a, percent)", "",
              "| run | " + " | ".join(f"{lang} R@1/R@10" for lang in languages) + " | avg R@1 | avg R@10 | "
              "a2t avg R@1 | MRV | mean dis |", "|---|" + "---:|" * (len(languages) + 5)]
    for key, run in runs.items():
        m = run["queries"]
        cells = [f"{m['t2a'][lang]['R1']:.0f}/{m['t2a'][lang]['R10']:.0f}" for lang in languages]
        dis = list(m["consistency"]["dis"].values())
        lines.append(f"| {key} | " + " | ".join(cells) + f" | {_f(m['t2a']['avg']['R1'])} | "
                     f"{_f(m['t2a']['avg']['R10'])} | {_f(m['a2t']['avg']['R1'])} | {_f(m['consistency']['mrv'])} | "
                     f"{sum(dis) / len(dis):.3f} |")
    c = q0["chance"]
    lines.append("| chance | " + " | ".join(f"{c['t2a']['R1']:.0f}/{c['t2a']['R10']:.0f}" for _ in languages)
                 + f" | {_f(c['t2a']['R1'])} | {_f(c['t2a']['R10'])} | {_f(c['a2t']['R1'])} | | |")
    if first["zero_shot"]:
        z0 = first["zero_shot"]
        lines += ["", f"## Zero-shot folder labels ({len(z0['classes'])} labels, {z0['n_clips']} test clips; "
                  "SupCLAP §4.2.2 prompts; top-1 percent)", "",
                  "| run | " + " | ".join(languages) + " | avg |", "|---|" + "---:|" * (len(languages) + 1)]
        for key, run in runs.items():
            z = run["zero_shot"]
            lines.append(f"| {key} | " + " | ".join(_f(z[lang]["top1"]) for lang in languages)
                         + f" | {_f(z['avg']['top1'])} |")
        lines.append("| chance | " + " | ".join(_f(z0["chance"]["top1"]) for _ in [*languages, "avg"]) + " |")
    lines += _unseen_lines(results.get("unseen"), languages) + _licence_lines(results.get("licences"))
    ix = results["index"]
    lines += ["", f"## Example queries (index: {ix['clips']} clips, text encoder {ix['text_encoder']}, "
              f"heads {ix['heads']})", ""]
    for ex in results["examples"]:
        hits = ", ".join(f"{h['id']} ({h['score']:.2f})" for h in ex["hits"])
        lines.append(f"- [{ex['lang']}] {ex['query']} -> {hits}")
    lines.append("")
    lines.append(f"Wall time of the demo: {results.get('seconds', float('nan')):.0f} s.")
    return "\n".join(lines) + "\n"


def model_card(results: dict, languages: list[str]) -> str:
    """The card of the demo's model (``OUT/model-card.md``): what it is and was trained on, its figures on
    libraries never trained on, the licences of its training sounds, its limits."""
    st, ix = results["settings"], results["index"]
    run = results["runs"][f"{ix['text_encoder']}/{ix['heads']}"]
    q, ch = run["queries"]["t2a"]["avg"], run["queries"]["chance"]["t2a"]
    lines = ["# Model card: mlatr demo-real (`model.pt`)", "",
             f"- **Model**: aiSFX's CNN (frozen) for the audio, {ix['text_encoder']} (frozen) for the text, projection "
             f"heads `{ix['heads']}` trained with {_objective_words(st)}, {st['epochs']} epochs, "
             f"batch {st['batch_size']}, AdamW lr {st['lr']}, seed {st['seed']}; the epoch of the best validation "
             "t2a R@10."
             + _ensemble_words(run, st.get("ensemble", 1)),
             f"- **Training data**: the train split of `{results['manifest']}` ({results['clips']['train']} clips; "
             f"{results['clips']['val']} validation, {results['clips']['test']} test); captions from the files' "
             "paths (English), queries in " + ", ".join(languages) + ".",
             "- **Use**: searching a sound library by text in those languages (`mlatr search`, `mlatr serve`).",
             f"- **Held-out test split** (libraries it trained on): hand-written queries t2a R@1 {_f(q['R1'])}, "
             f"R@10 {_f(q['R10'])} (chance {_f(ch['R1'])} / {_f(ch['R10'])})."]
    lines += _unseen_lines(results.get("unseen"), languages) + _calibration_lines(results.get("calibration"))
    lines += _licence_lines(results.get("licences"))
    lines += ["", "## Limits", "",
              "Captions come from file paths, relevance from keywords; the sounds are games', music tools' and "
              "desktop themes' (little speech, few real-world scenes). On a library never trained on, expect the "
              "figures of the leave-one-library-out table, not those of the test split.", ""]
    return "\n".join(lines)


def _objective_words(settings: dict) -> str:
    langs = settings.get("caption_languages", ["eng"])
    if settings.get("objective", "mlclap") == "mlclap":
        return "InfoNCE (tau 0.07) on the English captions"
    machine = settings.get("translated_by_apertium") or []
    return (f"KCL (ATRI eq. 9, tau 0.07) over the captions in {', '.join(langs)}"
            + (f" ({', '.join(machine)} translated from English by Apertium)" if machine else ""))


def _ensemble_words(run: dict, n: int) -> str:
    if n == 1:
        return ""
    seeds = ", ".join(str(m["seed"]) for m in run["members"])
    return (f" {n} such head pairs trained apart (seeds {seeds}); the model averages their unit embeddings on "
            "each side.")


def _unseen_lines(unseen: dict | None, languages: list[str]) -> list[str]:
    """The recipe on libraries never trained on: sound-only query recall, original 12 and added apart."""
    if not unseen:
        return []
    lines = ["", f"## Libraries never trained on (leave-one-library-out, sound only, {unseen['epochs']} epochs)", "",
             "The same recipe, the first text encoder; each of the 12 original libraries held out alone, the added "
             f"ones {unseen['added_groups']} folds at a time; the 32 hand-written queries in {len(languages)} "
             "languages, a hit = a clip whose caption has a query keyword; means over the held-out folds, percent.", "",
             "| held out | folds | R@1 | R@10 | " + " | ".join(f"{lang} R@10" for lang in languages)
             + " | a2t R@1 | MRV | chance R@10 |", "|---|---:|" + "---:|" * (len(languages) + 6)]
    lines += [f"| {name} | {g['libraries']} | {sound_only_cells(g, languages)}"
              for name, g in (("all", unseen), *unseen["groups"].items()) if g.get("libraries")]
    return lines


def _calibration_lines(cal: dict | None) -> list[str]:
    """Which calibration the model carries and its figures on its own held-out folds (``mlatr experiment
    calibrate``'s, cross-fitted), or that it has none."""
    if not cal:
        return ["", "## Relevance calibration", "", "None: this model was saved without its leave-one-library-out "
                "run, so its searches carry no relevance and never say \"nothing relevant\" (mlatr experiment "
                "calibrate --model fits one)."]
    fitted = cal.get("fitted") or {}
    names = cal["abstention"]["names"]
    return ["", "## Relevance calibration", "",
            f"Calibration {cal['id']}, fitted for these weights (sha256 {cal['weights_sha256'][:12]}) by "
            f"`{fitted.get('command', '?')}` at commit {fitted.get('commit') or 'unknown'} on the "
            f"{len(fitted.get('units') or [])} held-out folds of its own leave-one-library-out run "
            f"({fitted.get('clips', '?')} clips); stored in the checkpoint. Cross-fitted figures (no library and no "
            f"query text both fitted and measured): ECE of the top 10 hits {cal['ece_shown']:.3f}, over the hits of "
            f"relevance >= 0.1 {cal['ece_read']:.3f}; the first hit's relevance separates right from wrong first "
            f"hits with AUC {cal['auc_first']:.3f}; \"nothing relevant\" (each index's own level plus a margin of "
            f"{cal['margin']:.2f}) for {names['nonsense']:.1f} % of nonsense queries, {names['no_relevant']:.1f} % "
            f"of queries whose concept the library lacks and {names['relevant']:.1f} % of those it holds (file-name "
            "captions; calibration/report.md has every figure)."]


def _licence_lines(table: dict | None) -> list[str]:
    """The licence table of the corpus (``licences.json`` beside the manifest)."""
    if not table:
        return []
    lines = ["", f"## Licences of the sounds ({len(table['packages'])} packages; refused: "
             + (", ".join(r["package"] for r in table["refused"]) or "none") + ")", "",
             "| package | version | library | clips | licences | copyright holders |", "|---|---|---|---:|---|---|"]
    for row in table["packages"]:
        holders = "; ".join(row["holders"][:2]) + (" ..." if len(row["holders"]) > 2 else "")
        lines.append(f"| {row['package']} | {row['version']} | {row['library']} | {row['clips']} | "
                     f"{'; '.join(row['licences'])} | {holders.replace('|', '/')} |")
    return lines
