"""Speed of ``evaluate_embeddings`` against the per-query loop and against the bare similarity product.

AudioCaps-test size by default: 957 clips x 5 captions x 8 languages (38,280 captions), D = 1024,
float32. Three timings in one run:

- *bare product*: normalise both sides and compute the full score matrix once (the floor);
- *vectorized*: ``mlatr.evaluation.evaluate_embeddings`` (all metrics, chunked);
- *loop*: the independent per-query reference of the tests (``tests/test_evaluation_reference.py``).

Goal (issue 2): vectorized >= 50x faster than the loop and within 2x of the bare product.

    .venv/bin/python benchmarks/bench_evaluation.py [--clips 957] [--captions 5] [--dim 1024]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from mlatr.evaluation import evaluate_embeddings  # noqa: E402
from mlatr.evaluation.synthetic import structured_embeddings  # noqa: E402


def best_of_interleaved(fns: list, repeats: int) -> list[float]:
    """Best wall time of each function, the runs interleaved so that load changes hit all alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--clips", type=int, default=957)
    p.add_argument("--captions", type=int, default=5)
    p.add_argument("--dim", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--memory-budget-mb", type=float, default=512.0)
    p.add_argument("--skip-loop", action="store_true", help="do not run the (slow) per-query loop")
    args = p.parse_args()

    data = structured_embeddings(n_clips=args.clips, captions_per_clip=args.captions, dim=args.dim,
                                 missing_fraction=0.0, seed=0)
    audio, text = data["audio"].astype(np.float32), data["text"].astype(np.float32)
    ta, tl, tg = data["text_audio"], data["text_lang"], data["text_group"]
    print(f"clips={audio.shape[0]} captions={text.shape[0]} languages={len(set(tl.tolist()))} "
          f"D={audio.shape[1]} dtype=float32")

    def bare():
        a = audio / np.linalg.norm(audio, axis=1, keepdims=True)
        t = text / np.linalg.norm(text, axis=1, keepdims=True)
        return t @ a.T

    def vectorized():
        return evaluate_embeddings(audio, text, ta, tl, tg, memory_budget_mb=args.memory_budget_mb)

    t_bare, t_vec = best_of_interleaved([bare, vectorized], args.repeats)
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; best of {args.repeats} runs")
    print(f"bare similarity product : {t_bare:8.3f} s")
    print(f"vectorized evaluation   : {t_vec:8.3f} s   ({t_vec / t_bare:.2f}x the bare product; goal <= 2x)")
    if not args.skip_loop:
        from test_evaluation_reference import reference_evaluate

        t0 = time.perf_counter()
        want = reference_evaluate(audio, text, ta, tl, tg)
        t_loop = time.perf_counter() - t0
        got = vectorized()
        diff = max(abs(got[task][lang][k] - want[task][lang][k])
                   for task in ("t2a", "a2t") for lang in want[task] for k in want[task][lang])
        print(f"per-query loop          : {t_loop:8.3f} s   (vectorized is {t_loop / t_vec:.0f}x faster; "
              f"goal >= 50x)")
        print(f"max |difference| of the metrics, vectorized vs loop: {diff:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
