"""An independent, per-query loop implementation of the evaluation metrics (the test oracle).

Written from the definitions (DCASE / ML-CLAP; ATRI eq. 14-16), one query at a time (a Python loop over
queries; numpy only inside one query); it shares no code with ``mlatr.evaluation``. Ties: a rank is 1 + the number of
candidates with a strictly greater score (the rule ``mlatr.evaluation`` documents).
Also used by ``benchmarks/bench_evaluation.py`` as the speed reference.
"""

from __future__ import annotations

import math
import statistics

import numpy as np


def _unit(v):
    return v / np.linalg.norm(v)


def reference_evaluate(audio, text, text_audio, text_lang, text_group, pivot="eng", scores=None):
    audio = np.asarray(audio, dtype=np.float64) if scores is None else None
    text = None if text is None else np.asarray(text, dtype=np.float64)
    langs = []
    for c in text_lang:
        if c not in langs:
            langs.append(str(c))
    a_unit = None if audio is None else np.stack([_unit(a) for a in audio])
    t_unit = None if text is None else np.stack([_unit(t) for t in text])
    n_audio = a_unit.shape[0] if scores is None else scores.shape[1]

    def t2a_row(i):  # scores of caption i against every clip
        return np.asarray(scores[i], dtype=np.float64) if scores is not None else a_unit @ t_unit[i]

    def a2t_column(j, caps):  # scores of clip j against the given captions
        if scores is not None:
            return np.array([float(scores[i][j]) for i in caps])
        return t_unit[caps] @ a_unit[j]

    out = {"t2a": {}, "a2t": {}}
    t2a_rank = {}
    for lang in langs:
        caps = [i for i in range(len(text_lang)) if text_lang[i] == lang]
        # t2a: one query per caption
        ranks, ap = [], []
        for i in caps:
            row = t2a_row(i)
            r = 1 + int(np.sum(row > row[int(text_audio[i])]))
            t2a_rank[i] = r
            ranks.append(r)
            ap.append(1.0 / r if r <= 10 else 0.0)
        out["t2a"][lang] = _summary(ranks, ap)
        # a2t: one query per clip that has a caption in this language
        best, ap = [], []
        own_of = {}
        for p, i in enumerate(caps):
            own_of.setdefault(int(text_audio[i]), []).append(p)
        for j in range(n_audio):
            own = own_of.get(j, [])
            if not own:
                continue
            col = a2t_column(j, caps)
            own_ranks = sorted(1 + int(np.sum(col > col[p])) for p in own)
            best.append(own_ranks[0])
            total = 0.0
            for m, r in enumerate(own_ranks, start=1):
                if r <= 10:
                    total += m / r
            ap.append(total / len(own))
        out["a2t"][lang] = _summary(best, ap)
    for task in ("t2a", "a2t"):
        keys = ["R1", "R5", "R10", "mAP10", "medR", "meanR"]
        out[task]["avg"] = {k: sum(out[task][lg][k] for lg in langs) / len(langs) for k in keys}
    # consistency over groups present in every language
    by_group = {}
    for i, g in enumerate(text_group):
        by_group.setdefault(g, {})[text_lang[i]] = i
    complete = [m for m in by_group.values() if all(lg in m for lg in langs)]
    gap, dis = {}, {}
    if t_unit is not None and pivot in langs:
        for lang in langs:
            if lang == pivot:
                continue
            if not complete:
                gap[lang] = dis[lang] = math.nan
                continue
            mp = sum(t_unit[m[pivot]] for m in complete) / len(complete)
            ml = sum(t_unit[m[lang]] for m in complete) / len(complete)
            gap[lang] = float(np.linalg.norm(mp - ml))
            dists = [float(np.linalg.norm(t_unit[m[pivot]] - t_unit[m[lang]])) for m in complete]
            dis[lang] = sum(dists) / len(dists)
    total, count = 0.0, 0
    for m in complete:
        rs = [t2a_rank[m[lg]] for lg in langs]
        mean = sum(rs) / len(rs)
        for r in rs:
            total += (r - mean) ** 2
            count += 1
    out["consistency"] = {"gap": gap, "dis": dis, "mrv": total / count if count else math.nan}
    return out


def _summary(ranks, ap):
    n = len(ranks)
    return {
        "R1": 100.0 * sum(r <= 1 for r in ranks) / n,
        "R5": 100.0 * sum(r <= 5 for r in ranks) / n,
        "R10": 100.0 * sum(r <= 10 for r in ranks) / n,
        "mAP10": 100.0 * sum(ap) / n,
        "medR": float(statistics.median(ranks)),
        "meanR": sum(ranks) / n,
    }


def test_oracle_on_a_hand_computed_example():
    # 2 clips on the axes, one language, 3 captions; scores are the x / y coordinates after normalising.
    audio = np.array([[1.0, 0.0], [0.0, 1.0]])
    text = np.array([[1.0, 0.2], [0.3, 1.0], [1.0, 0.9]])  # clip 0, clip 1, clip 1 (misplaced)
    out = reference_evaluate(audio, text, [0, 1, 1], ["eng"] * 3, [0, 1, 2])
    # t2a ranks 1, 1, 2 -> R1 = 2/3, mAP10 = (1 + 1 + 1/2) / 3
    assert out["t2a"]["eng"]["R1"] == 100 * 2 / 3
    assert math.isclose(out["t2a"]["eng"]["mAP10"], 100 * 2.5 / 3)
    # a2t clip 0: cos to captions 0.98, 0.29, 0.74 -> own caption 0 rank 1 -> AP 1
    # clip 1: scores 0.196, 0.958, 0.669 -> own captions 1, 2 ranked 1 and 2 -> AP (1/1 + 2/2) / 2 = 1
    assert out["a2t"]["eng"]["R1"] == 100.0 and out["a2t"]["eng"]["mAP10"] == 100.0
    assert out["t2a"]["eng"]["medR"] == 1.0 and math.isclose(out["t2a"]["eng"]["meanR"], 4 / 3)
