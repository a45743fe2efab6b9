"""Time of one t-SNE view (ATRI Appendix C): 50 clips × (audio + 8 languages) = 450 points.

``mlatr.evaluation.tsne.embed_2d`` fits scikit-learn's t-SNE on one OpenMP thread; this compares it with
the same fit on scikit-learn's default thread count, on random unit vectors of ``--dim`` dimensions.
On a machine busy with other work, spinning OpenMP threads slow the fit down many times.

    .venv/bin/python benchmarks/bench_tsne.py [--points 450] [--dim 256] [--repeat 2]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from sklearn.manifold import TSNE

from mlatr.evaluation.tsne import View, embed_2d


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=450)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.points, args.dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    view = View("bench", x[:50], x[50:], np.zeros(args.points - 50, np.int64), np.full(args.points - 50, "eng"))
    load = os.getloadavg()[0]
    for name, fit in (("embed_2d (one OpenMP thread)", lambda: embed_2d(view)),
                      ("TSNE, default threads", lambda: TSNE(2, perplexity=30, metric="cosine", init="pca",
                                                             random_state=0).fit_transform(x))):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            fit()
            times.append(time.perf_counter() - t0)
        print(f"{name}: {min(times):.2f}-{max(times):.2f} s over {args.repeat} runs ({args.points} points, "
              f"dim {args.dim}; load average {load:.1f} at the start)")


if __name__ == "__main__":
    main()
