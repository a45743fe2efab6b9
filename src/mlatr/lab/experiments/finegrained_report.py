"""``mlatr experiment finegrained``: train the fine-grained grid (:mod:`mlatr.lab.experiments.finegrained`),
report it: Table 2 (heads), Table 3 (CMSC ablation), the overhead and Figure 2 (word-to-clip similarities).

Rerunning the same command resumes: finished runs are skipped.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlatr.data.manifest import Manifest
from mlatr.data.pipeline.batches import iter_eval_audio
from mlatr.data.pipeline.file_source import AudioSource
from mlatr.inference.checkpoint import load_model
from mlatr.io_utils import atomic_write_json, atomic_write_text
from mlatr.lab.experiments.aggregate import grid_tables, markdown_table, overhead_rows, text_table
from mlatr.lab.experiments.demo_report import prepare_benchmark
from mlatr.lab.experiments.finegrained import EVAL_EVERY, FIGURE_METHODS, METHODS, TABLES, finegrained_config
from mlatr.lab.experiments.runner import Row, run_grid
from mlatr.languages import DEFAULT_LANGUAGES
from mlatr.plotting import pyplot


def run_finegrained(out: str | Path, size: str = "small", seeds: list[int] = (0,),
                    methods: list[str] | None = None, progress: bool = True, eval_every: int = EVAL_EVERY,
                    log=print) -> dict[str, Any]:
    """Train, evaluate and report the grid (see the module docstring); returns the results.json payload."""
    out = Path(out)
    manifest, preset = prepare_benchmark(out, size, progress, log, tag="finegrained")
    rows = [Row(m, METHODS[m][0], partial(finegrained_config, method=m, eval_every=eval_every))
            for m in (methods or METHODS)]
    runs = run_grid(out, rows, seeds, manifest, preset["epochs"], progress=progress, log=log)
    report_dir = out / "report"
    report_dir.mkdir(parents=True, exist_ok=True)
    figure = None
    panels = [(m, title) for m, title in FIGURE_METHODS if m in runs.metrics]
    if panels:
        figure = word_to_clip_figure([(title, runs.run_dirs[m][0] / "best.pt") for m, title in panels], manifest,
                                     report_dir / "word_to_clip.png", report_dir / "word_to_clip.json")
    return write_finegrained_report(report_dir, size, list(seeds), runs.metrics, runs.summaries, figure, log=log)


def write_finegrained_report(report_dir: Path, size: str, seeds: list[int], results: dict[str, list[dict]],
                             summaries: dict[str, list[dict]], figure: dict | None, log=print) -> dict[str, Any]:
    """``summary.md`` and ``results.json`` of a finished grid (keys are :data:`METHODS` keys)."""
    labels = {m: METHODS[m][0] for m in results}
    first = next(iter(summaries.values()))[0]
    md = ["# Fine-grained matching on the synthetic benchmark", "",
          f"Size `{size}`, seeds {seeds}; every method: {first['epochs']} epochs, {first['steps']} optimizer steps "
          "of 32 clips (ML-CLAP pairing), the demo's model and optimizer, tau = 0.07. Each model is evaluated "
          "with its own matching head (T2A and A2T scored separately); test split, averages over the "
          f"{len(DEFAULT_LANGUAGES)} languages; mean ± std over seeds.", ""]
    # With a single method every table shows it; with several, a table needs two to compare.
    table_md, texts, raw_tables = grid_tables(TABLES, results, labels, min_methods=2 if len(results) > 1 else 1)
    md += table_md
    oh_header, oh_rows = overhead_rows({labels[k]: v for k, v in summaries.items()})
    md += ["## Training overhead", "", markdown_table(oh_header, oh_rows), ""]
    texts.append(text_table(oh_header, oh_rows, "Training overhead"))
    if figure is not None:
        md += ["## Word-to-clip similarities (Figure 2)", "",
               f"Caption: \"{figure['caption']}\" (clip {figure['clips'][0]}); hard negatives "
               + ", ".join(f"{cid} (\"{cap}\")" for cid, cap in zip(figure["clips"][1:],
                                                                     figure.get("negative_captions", []),
                                                                     strict=False))
               + ". Rows: A0 = its clip, A1/A2 = hard negatives; columns: "
               "the caption's tokens; cell = S(f_t,j, v_j), the cosine of token j with its audio-aware "
               "vector (eq. 4, caption as the query). Sentence scores S_g (T2A) per panel: "
               + "; ".join(f"{p['title']}: " + ", ".join(f"A{i} {s:.3f}" for i, s in enumerate(p["sentence"]))
                           for p in figure["panels"]), "",
               "![word-to-clip](word_to_clip.png)", ""]
    atomic_write_text(report_dir / "summary.md", "\n".join(md))
    payload = {"size": size, "seeds": seeds, "methods": labels, "tables": raw_tables, "results": results,
               "training": summaries, "figure2": figure}
    atomic_write_json(report_dir / "results.json", payload)
    log("\n" + "\n\n".join(texts))
    log(f"\n[finegrained] report: {report_dir}/summary.md")
    return payload


def hard_negative_triple(manifest, lang: str = "eng") -> tuple[int, list[int]] | None:
    """``(positive clip row, [two hard-negative rows])`` from ``extra.variant_of``: a clip with two
    relatives (its parent, its variants, or its parent's other variants); None if no clip has two."""
    ids = {c.id: i for i, c in enumerate(manifest)}
    family: dict[int, set[int]] = {i: set() for i in range(len(manifest))}
    for i, c in enumerate(manifest):
        parent = (c.extra or {}).get("variant_of")
        if parent in ids:
            j = ids[parent]
            family[i].add(j)
            family[j].add(i)
    for i in range(len(manifest)):
        relatives = set(family[i])
        for j in list(family[i]):
            relatives |= family[j]
        relatives.discard(i)
        if len(relatives) >= 2 and manifest[i].captions.get(lang):
            return i, sorted(relatives)[:2]
    return None


def caption_token_labels(model, caption: str, length: int) -> list[str]:
    """The ``length`` token labels of ``caption`` as the text encoder sees it ([CLS] first for the
    small transformer); positional names when the encoder does not expose its tokenizer."""
    tok = getattr(getattr(model, "text_encoder", None), "tokenizer", None)
    inner = getattr(tok, "tokenizer", None)
    if inner is not None and hasattr(inner, "encode"):
        pieces = inner.encode(caption).tokens  # word-start marks of BPE / WordPiece / SentencePiece dropped
        labels = ["[CLS]"] + [t.lstrip("#").replace("\u2581", "").replace("\u0120", "") or t for t in pieces]
        return (labels + [f"#{i}" for i in range(len(labels), length)])[:length]
    return [f"#{i}" for i in range(length)]


def word_to_clip_similarities(model, head, manifest, positive: int, negatives: list[int], lang: str = "eng",
                              max_seconds: float = 10.0) -> dict[str, Any]:
    """Figure 2's numbers: ``local [3, Lt]`` word-to-clip similarities of the positive clip's first
    ``lang`` caption against A0 (its clip) and two hard negatives, and the sentence scores ``S_g``."""
    rows = [positive, *negatives]
    sub = Manifest(clips=[manifest[i] for i in rows], root=manifest.root, path=manifest.path)
    caption = manifest[positive].captions[lang][0]
    model.eval()
    with torch.no_grad():
        waves = next(iter(iter_eval_audio(AudioSource(sub, 16000), len(rows), max_seconds)))
        order, wave, lens = waves
        audio = model.encode_audio(wave, lens)
        back = [list(order).index(k) for k in range(len(rows))]
        audio_side = audio.rows(torch.as_tensor(back))
        text_side = model.encode_text([caption], [lang])
        local = head.local_scores(text_side, audio_side)[0]  # [3, Lt]
        sentence = head.scores(text_side, audio_side)[0]  # [3]
    length = int(text_side.mask[0].sum())
    return {"caption": caption, "clips": [manifest[i].id for i in rows],
            "negative_captions": [manifest[i].captions[lang][0] if manifest[i].captions.get(lang) else ""
                                  for i in negatives],
            "tokens": caption_token_labels(model, caption, length),
            "local": local[:, :length].tolist(), "sentence": sentence.tolist()}


def word_to_clip_figure(runs: list[tuple[str, Path]], manifest_path: str, png: Path, json_path: Path,
                        split: str = "test", lang: str = "eng") -> dict[str, Any] | None:
    """Figure 2 for each ``(title, checkpoint)``: one heatmap panel per model (rows A0-A2, columns the
    caption's tokens). Writes ``png`` and the numbers to ``json_path``; None if no hard-negative triple."""
    plt = pyplot()
    manifest = Manifest.load(manifest_path).split(split)
    triple = hard_negative_triple(manifest, lang)
    if triple is None:
        return None
    panels = []
    for title, ckpt in runs:
        loaded = load_model(ckpt)
        head = loaded.head
        if not head.needs_frames:
            continue
        numbers = word_to_clip_similarities(loaded.model, head, manifest, triple[0], triple[1], lang)
        panels.append({"title": f"{title} ({head.name})", **numbers})
    if not panels:
        return None
    fig, axes = plt.subplots(len(panels), 1, figsize=(max(6.0, 0.55 * len(panels[0]["tokens"]) + 2),
                                                     1.6 * len(panels) + 0.8), squeeze=False)
    for ax, p in zip(axes[:, 0], panels, strict=True):
        data = np.asarray(p["local"])
        im = ax.imshow(data, aspect="auto", cmap="viridis")
        ax.set_yticks(range(data.shape[0]),
                      [f"A{i} ({s:.2f})" for i, s in enumerate(p["sentence"])], fontsize=8)
        ax.set_xticks(range(data.shape[1]), p["tokens"], rotation=45, ha="right", fontsize=8)
        for (r, c), v in np.ndenumerate(data):
            ax.text(c, r, f"{v:.2f}", ha="center", va="center", fontsize=6,
                    color="white" if v < data.mean() else "black")
        ax.set_title(p["title"], fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.02, pad=0.01)
    negatives = "; ".join(f"A{i}: \"{cap}\"" for i, cap in enumerate(panels[0]["negative_captions"], start=1))
    fig.suptitle(f"Word-to-clip similarity: \"{panels[0]['caption']}\" (A0 = its clip)\n"
                 f"hard negatives {negatives}", fontsize=9)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=130)
    plt.close(fig)
    figure = {"caption": panels[0]["caption"], "clips": panels[0]["clips"],
              "negative_captions": panels[0]["negative_captions"], "panels": panels}
    atomic_write_json(json_path, figure)
    return figure
