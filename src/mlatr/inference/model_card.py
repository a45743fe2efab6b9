"""A model folder's ``README.md``: its model card, written by ``mlatr export``.

The card says what a person needs before using a model they did not train: how to load it (mlatr, and only
mlatr: :mod:`mlatr.inference.model_folder`), what it is (encoders, dimension, head, audio settings,
languages), what it was trained on (the training manifest's libraries with their clip counts and licences,
from the ``licences.json`` table beside the manifest when there is one), its metrics with the commands that
measured them (the validation record the checkpoint carries; ``--metrics`` files: an ``mlatr eval --json``
file, ``demo-real``'s or ``experiment unseen-library``'s ``results.json``), its intended use and its limits.
Every section is generated from the checkpoint and the files given; where something is not known the card
says so instead of leaving the section out (:data:`SECTIONS` is what a test checks).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from mlatr.calibration_file import calibration_id
from mlatr.data.manifest import Manifest
from mlatr.errors import MlatrError
from mlatr.json_input import parse_json
from mlatr.languages import LANGUAGE_NAMES
from mlatr.version import __version__

#: The card's sections, in order.
SECTIONS = ("How to load", "Model", "Training data", "Metrics", "Intended use", "Limits")

#: The pip extra each encoder needs (the encoders' own packages; weights are in the folder).
ENCODER_EXTRAS = {"aisfx": None, "small-cnn": None, "small-transformer": None, "e5-small": "real",
                  "use-multilingual": "real", "ced-tiny": None, "ced-mini": None, "ced-small": None,
                  "ced-base": None, "htsat": "hf", "hf-clap-audio": "hf", "hf-clap-text": "hf", "sonar": "hf",
                  "labse": "hf", "xlmr": "hf", "bert": "hf"}

#: The licence table a corpus ships beside its manifest (``scripts/get-real-sounds.sh``).
LICENCES_FILE = "licences.json"


def _encoder(config: dict[str, Any], side: str) -> str:
    return str((config.get(side) or {}).get("name", "?"))


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]


def _load_section(name: str, config: dict[str, Any]) -> list[str]:
    extras = sorted({e for e in (ENCODER_EXTRAS.get(_encoder(config, s)) for s in ("audio_encoder", "text_encoder"))
                     if e})
    install = "pip install 'mlatr" + (f"[{','.join(extras)}]" if extras else "") + "'"
    return ["## How to load", "",
            "mlatr loads this folder, and only mlatr: the file names follow the Hugging Face layout "
            "(`config.json`, `model.safetensors`), but the encoders are mlatr's, so `transformers` cannot load "
            "it and there is no ONNX export. The weights are all in `model.safetensors` (no pickle); nothing "
            "of the training machine is needed.", "",
            "```bash", f"{install}                 # mlatr {__version__} or later",
            f"mlatr index build my-sounds/ --model {name} -o my-sounds.idx   # or any command's --model",
            "mlatr search my-sounds.idx --lang fra \"la pluie sur un toit\"",
            "```", "", "```python", "import mlatr", f"model = mlatr.load(\"{name}\")",
            "vectors = model.embed_text([\"la pluie sur un toit\"], lang=\"fra\")   # [1, d], unit norm",
            "index = mlatr.Index.build(model, \"my-sounds/\")", "```", "",
            "`mlatr export --name NAME` registers a folder so that `--model NAME` finds it from any folder "
            "(`mlatr models` lists them)."]


def _head_pairs(n: int) -> str:
    return "1" if n == 1 else f"{n}, trained apart; each side's unit outputs averaged"


def _model_section(config: dict[str, Any], head: dict[str, Any], data: dict[str, Any], digests: dict[str, str],
                   calibration: dict | None = None) -> list[str]:
    langs = data.get("languages") or []
    rows = [("audio encoder", _encoder(config, "audio_encoder")), ("text encoder", _encoder(config, "text_encoder")),
            ("text head", config.get("text_head", "mlp")),
            ("head pairs", _head_pairs(config.get("ensemble", 1))),
            ("embedding", f"{config.get('embed_dim', '?')}-d, unit norm"),
            ("matching head", head.get("name", "cosine")),
            ("audio", f"{data.get('sample_rate', 16000)} Hz mono, clips centre-cropped to "
                      f"{data.get('eval_max_seconds', 10.0)} s (longer files: windows averaged)"),
            ("languages", ", ".join(f"{c} ({LANGUAGE_NAMES.get(c, c)})" for c in langs) or "not recorded"),
            ("weights sha256", digests.get("weights", "?")), ("relevance calibration", _calibration_words(calibration))]
    if digests.get("stored_as"):
        rows.append(("weights stored as", digests["stored_as"]))
    return ["## Model", "", *_table(("", ""), rows)]


def _calibration_words(calibration: dict | None) -> str:
    """Which calibration the model carries (:mod:`mlatr.calibration_file`), or that its searches are uncalibrated."""
    if not calibration:
        return ("none: searches carry no relevance and never say \"nothing relevant\" (mlatr experiment calibrate "
                "--model fits one)")
    fitted = calibration.get("fitted") or {}
    return (f"{calibration_id(calibration)}, fitted for these weights by {fitted.get('command', '?')} at commit "
            f"{fitted.get('commit') or 'unknown'} on {len(fitted.get('units') or [])} held-out folds of "
            f"{fitted.get('clips', '?')} clips")


def with_calibration_row(card: str, calibration: dict | None) -> str:
    """The model ``card`` with its "relevance calibration" row saying ``calibration`` (a calibration stored in the
    folder after it was exported: :func:`mlatr.inference.checkpoint.store_calibration`); a card without the row
    is returned as it is."""
    row = _table(("", ""), [("relevance calibration", _calibration_words(calibration))])[-1]
    return "\n".join(row if line.startswith("| relevance calibration |") else line for line in card.split("\n"))


def _licences(manifest_path: Path) -> dict[str, dict[str, Any]]:
    """``{library: {"package", "licences"}}`` of the licence table beside the manifest (empty without one)."""
    table_path = manifest_path.parent / LICENCES_FILE
    if not table_path.is_file():
        return {}
    table = parse_json(table_path.read_bytes(), str(table_path))
    out = {}
    for entry in (table.get("packages") or []) if isinstance(table, dict) else []:
        if isinstance(entry, dict) and entry.get("library"):
            licences = entry.get("licences") or []
            out[str(entry["library"])] = {"package": entry.get("package", ""),
                                          "licences": ", ".join(map(str, licences)) if isinstance(licences, list)
                                          else str(licences)}
    return out


def _data_section(manifest_path: str | None) -> list[str]:
    lines = ["## Training data", ""]
    path = Path(manifest_path) if manifest_path else None
    if path is None or not path.is_file():
        where = f" (`{Path(manifest_path).name}`, not found where the model was exported)" if manifest_path else ""
        return lines + [f"Not recorded with the model{where}: give the training manifest with `mlatr export "
                        "--training-data MANIFEST` to list its libraries and their licences here."]
    manifest = Manifest.load(path)
    splits = Counter(c.split or "none" for c in manifest.clips)
    libraries = Counter(c.id.split("/", 1)[0] if "/" in c.id else "(top level)" for c in manifest.clips)
    licences = _licences(path)
    lines += [f"`{path.name}`: {len(manifest):,} clips ("
              + ", ".join(f"{s} {n:,}" for s, n in sorted(splits.items())) + "), captions in "
              + (", ".join(manifest.languages()) or "no language") + ".", ""]
    rows = [(lib, f"{n:,}", licences.get(lib, {}).get("package", "") or "-",
             licences.get(lib, {}).get("licences", "") or "not recorded") for lib, n in sorted(libraries.items())]
    lines += _table(("library", "clips", "package", "licences"), rows)
    lines += ["", f"Licences: from `{LICENCES_FILE}` beside the manifest (the copyright files it names are the "
                  "authority)." if licences else
              f"Licences: not recorded beside the manifest (no `{LICENCES_FILE}`); check each library's own "
              "licence before publishing the model or an index of these sounds."]
    return lines


def _f(x: Any) -> str:
    return "-" if not isinstance(x, int | float) or x != x else f"{x:.2f}"


def _metrics_rows(path: Path) -> tuple[str, list[tuple[str, str, str]]]:
    """``(command, [(what, metric, value)])`` of a metrics file mlatr writes."""
    data = parse_json(path.read_bytes(), str(path))
    if not isinstance(data, dict):
        raise MlatrError(f"--metrics {path}: not a metrics file (expected a JSON object)")
    rows = []
    if "t2a" in data and "a2t" in data:  # mlatr eval --json
        for direction in ("t2a", "a2t"):
            avg = (data.get(direction) or {}).get("avg") or {}
            rows += [(direction.upper() + ", average over languages", k, _f(avg.get(k))) for k in ("R1", "R5", "R10")
                     if k in avg]
        mrv = (data.get("consistency") or {}).get("mrv")
        if mrv is not None:
            rows.append(("consistency", "MRV", _f(mrv)))
        return f"mlatr eval --model MODEL --manifest MANIFEST --split test --json {path.name}", rows
    if isinstance(data.get("runs"), dict):  # demo-real / experiment unseen-library results.json
        unseen = any(isinstance(run, dict) and "unseen" in run for run in data["runs"].values())
        for key, run in data["runs"].items():
            queries = ((run or {}).get("unseen") if unseen else (run or {}).get("queries")) or {}
            avg = (queries.get("queries") if unseen else queries) or {}
            avg = (avg.get("t2a") or {}).get("avg") or {}
            what = "held-out libraries' queries (mean over folds)" if unseen else "hand-written queries"
            rows += [(f"{key}: {what}, t2a", k, _f(avg.get(k))) for k in ("R1", "R10") if k in avg]
        return (f"mlatr experiment unseen-library (its {path.name})" if unseen else
                f"mlatr demo-real (its {path.name})"), rows
    raise MlatrError(f"--metrics {path}: not a metrics file mlatr writes (mlatr eval --json, demo-real's or "
                     "experiment unseen-library's results.json)")


def _metrics_section(state: dict[str, Any], metrics: Sequence[str | os.PathLike]) -> list[str]:
    lines = ["## Metrics", ""]
    best = state.get("best") or {}
    if isinstance(best, dict) and best.get("score") is not None:
        lines += [f"Validation during training (`mlatr train`, the best epoch {best.get('epoch', '?')}): "
                  f"{best.get('metric', 'score')} {_f(best.get('score'))}.", ""]
    for file in metrics:
        command, rows = _metrics_rows(Path(file))
        lines += [f"From `{Path(file).name}`, measured by `{command}` (recall in percent):", "",
                  *_table(("what", "metric", "value"), rows or [("-", "-", "-")]), ""]
    if len(lines) == 2:
        lines += ["None given: `mlatr export --metrics FILE` quotes an `mlatr eval --json` file or a results.json "
                  "of `mlatr demo-real` / `mlatr experiment unseen-library` here.", ""]
    lines.append("Figures of one run on one machine: the exact numbers vary with the CPU (its floating-point "
                 "kernels); the conclusions and ranges hold.")
    return lines


def _use_and_limits(config: dict[str, Any], data: dict[str, Any]) -> list[str]:
    langs = ", ".join(data.get("languages") or []) or "its training languages"
    return ["## Intended use", "",
            f"Searching a sound-effects library with text queries in {langs} or with a sound (`mlatr search`, "
            "`mlatr serve`, `mlatr.Index`), embedding sounds and texts into one space (`mlatr embed`), and "
            "zero-shot tagging of sound effects (`mlatr classify`). For research and for finding sounds; not "
            "for decisions about people.", "",
            "## Limits", "",
            "- Trained on the data above only: sounds unlike it (speech content, music structure, field "
            "recordings of places) rank less well, and its captions' vocabulary bounds what a query can name.",
            f"- Queries in languages other than {langs} are read as the text encoder "
            f"({_encoder(config, 'text_encoder')}) reads them, without any training for them.",
            "- Scores are cosines, not probabilities: compare them within one query, not across queries or models.",
            "- Audio is resampled to mono at the rate above; a clip longer than the crop is embedded as the mean of "
            "its windows, so a short event inside a long file is diluted."]


def model_card(state: dict[str, Any], name: str, head: dict[str, Any], digests: dict[str, str],
               metrics: Sequence[str | os.PathLike] = (), training_data: str | None = None,
               notes: str | None = None) -> str:
    """The Markdown model card of checkpoint ``state`` exported as ``name`` (see the module docstring).

    Args:
        state: the checkpoint dict (``model_config``, ``train_config``, optional ``best``).
        name: how the card tells the reader to load the model (the folder or the registered name).
        head: the matching head's config.
        digests: ``{"weights": sha256}`` of the weights (of the checkpoint's, and ``"stored_as"``: how the folder
            stores them, where not as the checkpoint does).
        metrics: metrics files to quote.
        training_data: the training manifest (default: the one ``train_config.data.manifest`` records).
        notes: Markdown appended as it is (what the card cannot know: how the model was chosen, what its data's
            licences mean for it).
    """
    config = state["model_config"]
    data = (state.get("train_config") or {}).get("data") or {}
    manifest = training_data or data.get("manifest")
    title = f"# mlatr model: {_encoder(config, 'audio_encoder')} + {_encoder(config, 'text_encoder')}, " \
            f"{config.get('embed_dim', '?')}-d"
    parts = [[title, "", f"Written by `mlatr export` (mlatr {__version__}). A multilingual audio-text retrieval "
              "model: sounds and texts in one embedding space."],
             _load_section(name, config), _model_section(config, head, data, digests, state.get("calibration")),
             _data_section(str(manifest) if manifest else None), _metrics_section(state, metrics),
             _use_and_limits(config, data)] + ([[notes.strip()]] if notes else [])
    return "\n\n".join("\n".join(p).rstrip() for p in parts) + "\n"


def card_sections(text: str) -> list[str]:
    """The level-2 section titles of a card, in order."""
    return [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]

