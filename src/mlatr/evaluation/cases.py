"""Case analysis: for a few caption groups, the rank of the right clip in every language.

ATRI's case analysis (Appendix "Case Analysis", Table 5) shows, for selected AudioCaps captions, the
t2a retrieval rank of the described clip for each language; a consistent model ranks it alike in all
languages. Here the groups present in every language are chosen either as those with the largest
rank spread across languages (``"spread"``, the most telling) or the first ones (``"first"``).
"""

from __future__ import annotations

import numpy as np

from mlatr.errors import MlatrError
from mlatr.evaluation.consistency import complete_groups
from mlatr.evaluation.evaluate import Evaluation


def rank_cases(evaluation: Evaluation, n: int, select: str = "spread") -> list[dict]:
    """``n`` cases ``{"group", "clip", "ranks": {lang: t2a rank}, "spread": std of the ranks}``."""
    if n < 0:
        raise MlatrError(f"cases: the number of cases must be >= 0, got {n}")
    table = evaluation.table
    groups = complete_groups(table)
    ranks = evaluation.ranks.t2a[groups]  # [G, K]
    spread = ranks.std(axis=1) if groups.size else np.zeros(0)
    if select == "spread":
        order = np.lexsort((np.arange(len(spread)), -spread))
    elif select == "first":
        order = np.arange(len(spread))
    else:
        raise MlatrError(f"cases: select must be 'spread' or 'first', got {select!r}")
    cases = []
    for g in order[:n]:
        first = groups[g, 0]
        gid = table.group_ids[table.group_idx[first]]
        cases.append({
            "group": gid.item() if hasattr(gid, "item") else gid,
            "clip": int(table.text_audio[first]),
            "ranks": {lang: int(ranks[g, k]) for k, lang in enumerate(table.languages)},
            "spread": float(spread[g]),
        })
    return cases


def format_cases(cases: list[dict]) -> str:
    """The cases as an aligned text table (rows: groups; columns: languages)."""
    if not cases:
        return "Cases: no caption group is present in every language."
    langs = list(cases[0]["ranks"])
    header = ["group", "clip", *langs, "std"]
    rows = [[str(c["group"]), str(c["clip"]), *(str(c["ranks"][lg]) for lg in langs), f"{c['spread']:.1f}"]
            for c in cases]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = lambda r: "  ".join(x.rjust(w) for x, w in zip(r, widths, strict=True))  # noqa: E731
    title = "Cases: t2a rank of the right clip per language (ATRI case analysis)"
    return "\n".join([title, line(header), "  ".join("-" * w for w in widths), *map(line, rows)])
