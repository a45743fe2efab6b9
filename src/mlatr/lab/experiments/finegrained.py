"""Fine-grained matching on the synthetic benchmark: cosine vs LGMM vs Table 2's modes, CMSC ablation.

Paper: "Fine-grained audio-text retrieval: local-to-global multiscale matching and cross-modal
similarity consistency".

This module declares the rows (:data:`METHODS`), tables and figure panels (imported by the CLI without
torch); :func:`mlatr.lab.experiments.finegrained_report.run_finegrained` trains a grid of methods x seeds
with :mod:`mlatr.lab.experiments.runner` on the synthetic multilingual benchmark with the demo's model and
optimizer (:func:`~mlatr.lab.experiments.demo.demo_config`, ML-CLAP pairing: same steps and clips for every
method), evaluates each
best-by-validation checkpoint on the test split *with its own matching head* (T2A and A2T scored
separately) and writes, under ``OUT/report``:

- ``summary.md`` / ``results.json``: Table 2 (pooled cosine, Max-Mean, Max-Max, Mean-Mean, Mean-Max,
  LGMM; every method trained with ``L_InterC`` alone, eq. 6, as in §3.3) and Table 3 (the CMSC ablation
  of LGMM: ``L``, ``-L_Jnt``, ``-L_IntraC``, ``-L_IntraC - L_Jnt``), mean ± std over seeds, plus the
  training overhead;
- ``word_to_clip.png`` (Figure 2): the word-to-clip similarities ``S(f_t,j, v_j)`` (eq. 4 with the
  caption as the query, :meth:`~mlatr.matching.heads.MatchingHead.local_scores`) of one English test
  caption against its clip A0 and two hard negatives A1, A2 (clips the benchmark built as variants of
  one another: ``extra.variant_of``), for LGMM and, when trained, Max-Mean (the paper's panel b).

Rerunning the same command resumes: finished runs are skipped.
"""

from __future__ import annotations

from typing import Any

from mlatr.lab.experiments.demo import demo_config

LGMM = {"name": "lgmm", "tau_w": 0.25, "lam": 10.0}  # §3.2

#: method key -> (label, objective keys added to the demo config).
METHODS: dict[str, tuple[str, dict[str, Any]]] = {
    "cosine": ("Cosine (pooled)", {"matching": {"name": "cosine"}}),
    "max-mean": ("Max-Mean", {"matching": {"name": "max-mean"}}),
    "max-max": ("Max-Max", {"matching": {"name": "max-max"}}),
    "mean-mean": ("Mean-Mean", {"matching": {"name": "mean-mean"}}),
    "mean-max": ("Mean-Max", {"matching": {"name": "mean-max"}}),
    "lgmm": ("LGMM (L_InterC)", {"matching": LGMM}),
    "lgmm-cmsc": ("LGMM + CMSC (L)", {"matching": LGMM, "cmsc": {"beta": 0.3}}),
    "lgmm-no-jnt": ("L - L_Jnt", {"matching": LGMM, "cmsc": {"beta": 0.3, "jnt": False}}),
    "lgmm-no-intrac": ("L - L_IntraC", {"matching": LGMM, "cmsc": {"beta": 0.3, "intrac": False}}),
    "lgmm-cmsc-logit": ("L, earlier mlatr soft labels (softmax of the mixture)",
                        {"matching": LGMM, "cmsc": {"beta": 0.3, "mixture": "logit"}}),
}

#: The report's tables: (title, method keys); a table shows the methods the grid has (2 at least).
TABLES = [
    ("Matching heads (fine-grained paper Table 2; all trained with L_InterC)",
     ["cosine", "max-mean", "max-max", "mean-mean", "mean-max", "lgmm"]),
    ("CMSC ablation with LGMM (Table 3; L_InterC alone = L - L_IntraC - L_Jnt)",
     ["lgmm-cmsc", "lgmm-no-jnt", "lgmm-no-intrac", "lgmm", "lgmm-cmsc-logit"]),
]

#: Figure 2 panels: (method, panel title) drawn when that method was trained.
FIGURE_METHODS = [("lgmm-cmsc", "LGMM + CMSC"), ("lgmm", "LGMM"), ("max-mean", "Max-Mean")]


#: Validate every N epochs by default: ranking 100 clips x 4,000 captions with a frame-level head in both
#: directions costs as much as a couple of training epochs on a CPU, so validating every epoch would
#: double the grid. Every method uses the same schedule (the best checkpoint is chosen among the
#: same epochs).
EVAL_EVERY = 3


def finegrained_config(manifest: str, epochs: int, method: str, eval_every: int = EVAL_EVERY) -> dict[str, Any]:
    """The training config tree of one run: the demo's ML-CLAP setup with the method's head / loss,
    validated every ``eval_every`` epochs (and at the last epoch when it is not a multiple)."""
    tree = demo_config(manifest, "mlclap", epochs)
    tree["objective"].update(METHODS[method][1])
    tree["train"]["eval_every"] = eval_every
    return tree
