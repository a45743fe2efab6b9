"""SupCLAP on the synthetic benchmark, the grid: baselines vs + SVR, ablation, Simple Reweight, diagnostics.

This module declares the rows (:data:`METHODS`), tables and figures (imported by the CLI without torch);
:func:`mlatr.lab.experiments.supclap_report.run_supclap` trains a grid of methods x seeds with
:mod:`mlatr.lab.experiments.runner` on the synthetic multilingual benchmark and the demo's model and
optimizer (:func:`~mlatr.lab.experiments.demo.demo_config`: same steps and clips for every method), evaluates
each best-by-validation checkpoint on
the test split and writes, under ``OUT/report``:

- ``summary.md``: the rows of SupCLAP Tables 1 / 8 (InfoNCE, SigLIP, each + bi-StaticSVR and
  + bi-DynamicSVR; CACL (ATRI) + SVR), the ablation of Table 3 (uni/bi x with/without constraint),
  Simple Reweight (Table 7 / App. E.4), all as mean ± std over seeds (Table 4), and the overhead;
- ``drift.png`` (Figure 1: per-step cosine between the text update and the pull ``a⁺ − t⁺``),
  ``radius.png`` (Figure 3), ``positive_similarity.png`` (Figure 4, test split),
  ``convergence_t2a.png`` / ``convergence_a2t.png`` (Figure 5: validation R@1 per epoch);
- ``results.json`` with every number.

Every run logs every step (``train.log_every=1``) with the drift diagnostic on, so all methods pay the
same measuring cost. Rerunning the same command resumes: finished runs are skipped.
"""

from __future__ import annotations

import copy
from typing import Any

from mlatr.lab.experiments.demo import demo_config

#: mlatr's form of SVR before the fidelity fix (issue 11), kept as one ablation row: support vectors scored
#: by a dot product, a softplus radius fed sorted, detached cosines (:mod:`mlatr.lab.experiments.supclap_earlier`,
#: named by import path: this module imports no torch).
EARLIER_FORM = {"builder": "mlatr.lab.experiments.supclap_earlier:earlier_svr"}


def _svr(radius: str, bi: bool = True, constraint: bool = True, **options: Any) -> dict[str, Any]:
    # The constraint (Appendix B, eq. 9, beta = 0.01) belongs to DynamicSVR's radius predictor; the
    # paper's StaticSVR is a bare learnable scalar, so it runs without it.
    constraint = constraint and radius == "dynamic"
    return {"radius": radius, "bidirectional": bi, "constraint": constraint, "beta": 0.01 if constraint else 0.0,
            **options}


#: method key -> (label, scheme, base, extra objective keys). Labels follow SupCLAP's tables.
METHODS: dict[str, tuple[str, str, str, dict[str, Any]]] = {
    "infonce": ("InfoNCE", "mlclap", "infonce", {}),
    "infonce-bi-static": ("InfoNCE-bi-StaticSVR", "mlclap", "infonce", {"svr": _svr("static")}),
    "infonce-bi-dynamic": ("InfoNCE-bi-DynamicSVR", "mlclap", "infonce", {"svr": _svr("dynamic")}),
    "siglip": ("SigLIP", "mlclap", "siglip", {}),
    "siglip-bi-static": ("SigLIP-bi-StaticSVR", "mlclap", "siglip", {"svr": _svr("static")}),
    "siglip-bi-dynamic": ("SigLIP-bi-DynamicSVR", "mlclap", "siglip", {"svr": _svr("dynamic")}),
    "cacl": ("CACL (ATRI)", "cacl", "infonce", {}),
    "cacl-bi-static": ("CACL-bi-StaticSVR", "cacl", "infonce", {"svr": _svr("static")}),
    "cacl-bi-dynamic": ("CACL-bi-DynamicSVR", "cacl", "infonce", {"svr": _svr("dynamic")}),
    "infonce-uni-dynamic-nocons": ("uni-DynamicSVR wo/ constraint", "mlclap", "infonce",
                                   {"svr": _svr("dynamic", bi=False, constraint=False)}),
    "infonce-uni-dynamic": ("uni-DynamicSVR", "mlclap", "infonce", {"svr": _svr("dynamic", bi=False)}),
    "infonce-bi-dynamic-nocons": ("bi-DynamicSVR wo/ constraint", "mlclap", "infonce",
                                  {"svr": _svr("dynamic", constraint=False)}),
    "infonce-uni-static": ("uni-StaticSVR", "mlclap", "infonce", {"svr": _svr("static", bi=False)}),
    "reweight": ("Simple Reweight", "mlclap", "infonce", {"reweight": True}),
    "infonce-bi-dynamic-earlier": ("bi-DynamicSVR, earlier mlatr form (dot, softplus, sorted, detached)",
                                   "mlclap", "infonce", {"svr": _svr("dynamic", **EARLIER_FORM)}),
}

#: The tables of the report: (title, method keys). A table shows the methods of the grid it has.
TABLES = [
    ("Baselines + SVR (SupCLAP Tables 1 / 8)",
     ["infonce", "infonce-bi-static", "infonce-bi-dynamic", "siglip", "siglip-bi-static", "siglip-bi-dynamic",
      "cacl", "cacl-bi-static", "cacl-bi-dynamic"]),
    ("Ablation of the SVR components (SupCLAP Table 3)",
     ["infonce", "infonce-bi-dynamic", "infonce-bi-dynamic-nocons", "infonce-uni-dynamic",
      "infonce-uni-dynamic-nocons", "infonce-bi-static", "infonce-uni-static"]),
    ("SVR vs Simple Reweight (SupCLAP Table 7, App. E.4)", ["infonce", "reweight", "infonce-bi-dynamic"]),
    ("SupCLAP as defined (cosine-scored support vectors, real-valued radius from cos/tau) vs mlatr's earlier form",
     ["infonce", "infonce-bi-dynamic", "infonce-bi-dynamic-earlier"]),
]

#: Methods drawn in the drift figure (InfoNCE vs SVR, as Figure 1) and in the similarity histogram.
FIGURE_METHODS = ["infonce", "infonce-bi-static", "infonce-bi-dynamic", "siglip", "siglip-bi-dynamic"]

#: Methods drawn in the radius figure (Figure 3: bi-StaticSVR and bi-DynamicSVR, and the earlier form).
RADIUS_FIGURE_METHODS = ["infonce-bi-static", "infonce-bi-dynamic", "infonce-bi-dynamic-earlier"]


def supclap_config(manifest: str, epochs: int, method: str) -> dict[str, Any]:
    """The training config tree of one run: the demo's setup with the method's objective."""
    _, scheme, base, extra = METHODS[method]
    tree = demo_config(manifest, scheme, epochs, base)
    tree["objective"].update(copy.deepcopy(extra))  # a caller may edit its tree: METHODS stays as declared
    tree["train"].update({"log_every": 1, "diagnostics": ["drift"]})
    return tree
