"""Speed and memory of LGMM scoring (fine-grained paper, Section 2.1, eq. 1-5).

Two measurements:

1. ``batch``: a training batch, B=128 clips x B captions, La=32 frames, Lt=30 tokens, d=512. The
   batched :func:`mlatr.matching.lgmm_scores` (A2T and T2A, forward; and forward+backward) and the
   block-wise :func:`mlatr.matching.chunked_scores` (A2T forward, cache-sized blocks; and both
   directions forward+backward, as training computes them) against a naive
   per-pair loop (eq. 1-5 for one pair at a time on its unpadded features, with an explicit v_i). The
   loop is timed on ``--loop-pairs`` pairs and extrapolated linearly to B*B pairs (stated in the
   output); its scores are checked against the batched ones on those pairs. Also printed: the time of
   eq. 1's product alone (one ``[B*La, d] x [d, B*Lt]`` matrix product), which any exact LGMM must
   compute and the loop computes too, so ``loop / product`` bounds the speed-up a batched CPU
   implementation can reach (``speedup_bound_from_product``).
2. ``testset``: a whole test set, 1000 clips x 5000 captions, A2T (and T2A with ``--both``) with
   :func:`mlatr.matching.chunked_scores` under ``torch.no_grad()`` and ``--budget-mb`` (default 2048).
   Peak memory is measured in a fresh subprocess as ``ru_maxrss`` (peak resident set size of the whole
   process) at the end minus the resident set size (``/proc/self/statm``) just before scoring, after the
   inputs exist. That is the extra resident memory scoring needed, including allocator slack and the
   20 MB result; if building the inputs had a transient peak above the current RSS it counts too, so
   the figure is an upper bound. Blocks are processed one at a time, so the peak does not depend on
   ``--clips``: a run with fewer clips (same captions) has the same block shape and peak, and its time
   scales linearly with the number of clips. Wall time and process CPU time are both reported (the
   latter is the useful figure on a shared machine). ``--block-target-mb`` sets the preferred block
   size below the budget (default: the library's CPU default, cache-sized blocks; ``inf``: the largest
   blocks the budget allows, the behaviour before the target existed); ``--compare-targets`` runs
   both and prints the speed ratio.

Usage: ``python benchmarks/bench_matching.py [batch|testset|all] [--threads N] ...``; prints one JSON
object per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch

from mlatr.matching import build_matching_head, chunked_scores, lgmm_scores
from mlatr.models.outputs import EncoderOutput


def loop_pair(q: torch.Tensor, c: torch.Tensor, tau_w: float = 0.25, lam: float = 10.0) -> torch.Tensor:
    """Eq. 1-5 for one pair of unpadded features ``q [lq, d]``, ``c [lc, d]`` (the naive baseline)."""
    s = q @ c.T                                                  # eq. 1
    sbar = s / s.pow(2).sum(dim=0, keepdim=True).sqrt()         # eq. 2 (normalise over i)
    w = torch.softmax(sbar / tau_w, dim=1)                       # eq. 2 (softmax over j)
    v = w @ c                                                    # eq. 3
    local = torch.nn.functional.cosine_similarity(q, v, dim=1)   # eq. 4
    return torch.logsumexp(lam * local, dim=0) / lam             # eq. 5


def features(n: int, length: int, d: int, min_len: int, gen: torch.Generator):
    x = torch.randn(n, length, d, generator=gen)
    lengths = torch.randint(min_len, length + 1, (n,), generator=gen)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return x, mask


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_batch(args) -> dict:
    gen = torch.Generator().manual_seed(0)
    b, d = args.batch, args.dim
    audio, am = features(b, args.la, d, args.la // 2, gen)
    text, tm = features(b, args.lt, d, 6, gen)
    fwd_a2t = best_of(lambda: lgmm_scores(audio, am, text, tm), args.repeats)
    fwd_t2a = best_of(lambda: lgmm_scores(text, tm, audio, am), args.repeats)
    head = build_matching_head("lgmm")
    with torch.no_grad():
        audio_side, text_side = EncoderOutput(None, audio, am), EncoderOutput(None, text, tm)
        fwd_chunked = best_of(lambda: chunked_scores(head, audio_side, text_side), args.repeats)
        product = best_of(lambda: audio.reshape(-1, d) @ text.reshape(-1, d).T, args.repeats)
    a_req, t_req = audio.clone().requires_grad_(True), text.clone().requires_grad_(True)

    def fwd_bwd():
        (lgmm_scores(a_req, am, t_req, tm).sum() + lgmm_scores(t_req, tm, a_req, am).sum()).backward()
    fb_both = best_of(fwd_bwd, args.repeats)

    def fwd_bwd_blocks():  # what training does (MatchingObjective): block-wise under autograd
        a_side, t_side = EncoderOutput(None, a_req, am), EncoderOutput(None, t_req, tm)
        budget = 1 << 20
        (chunked_scores(head, a_side, t_side, budget).sum() + chunked_scores(head, t_side, a_side, budget).sum()
         ).backward()
    fb_blocks = best_of(fwd_bwd_blocks, args.repeats)

    batched = lgmm_scores(audio, am, text, tm)
    pairs = [(i % b, (i * 7919) % b) for i in range(args.loop_pairs)]
    a_list = [audio[i][am[i]] for i in range(b)]
    t_list = [text[j][tm[j]] for j in range(b)]
    with torch.no_grad():
        t0 = time.perf_counter()
        loop_vals = [loop_pair(a_list[i], t_list[j]) for i, j in pairs]
        loop_time = time.perf_counter() - t0
    max_err = max(abs(float(v) - float(batched[i, j])) for v, (i, j) in zip(loop_vals, pairs, strict=True))
    per_pair = loop_time / len(pairs)
    loop_full = per_pair * b * b
    return {
        "measure": "batch", "B": b, "La": args.la, "Lt": args.lt, "d": d, "threads": torch.get_num_threads(),
        "batched_a2t_forward_s": round(fwd_a2t, 4), "batched_t2a_forward_s": round(fwd_t2a, 4),
        "batched_both_directions_forward_backward_s": round(fb_both, 4),
        "blockwise_both_directions_forward_backward_s": round(fb_blocks, 4),
        "loop_pairs_timed": len(pairs), "loop_s_per_pair": per_pair,
        "loop_a2t_forward_s_extrapolated_to_BxB": round(loop_full, 3),
        "speedup_a2t_forward": round(loop_full / fwd_a2t, 1),
        "chunked_a2t_forward_s": round(fwd_chunked, 4),
        "speedup_chunked_a2t_forward": round(loop_full / fwd_chunked, 1),
        "eq1_product_only_s": round(product, 4),
        "speedup_bound_from_product": round(loop_full / product, 1),
        "max_abs_diff_loop_vs_batched": max_err,
    }


def _rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def testset_child(args) -> dict:
    """Runs in a fresh process so that ru_maxrss only covers this measurement."""
    gen = torch.Generator().manual_seed(1)
    audio, am = features(args.clips, args.la, args.dim, args.la // 2, gen)
    text, tm = features(args.captions, args.lt, args.dim, 6, gen)
    head = build_matching_head("lgmm")
    audio_side, text_side = EncoderOutput(None, audio, am), EncoderOutput(None, text, tm)
    directions = [("a2t", audio_side, text_side)] + ([("t2a", text_side, audio_side)] if args.both else [])
    out = {"measure": "testset", "clips": args.clips, "captions": args.captions, "La": args.la, "Lt": args.lt,
           "d": args.dim, "budget_mb": args.budget_mb, "block_target_mb": args.block_target_mb,
           "threads": torch.get_num_threads(),
           "inputs_mb": round((audio.nbytes + text.nbytes) / 2**20, 1)}
    for name, q, c in directions:
        rss_before = _rss_bytes()
        blocks = []
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        with torch.no_grad():
            scores = chunked_scores(head, q, c, memory_budget_mb=args.budget_mb,
                                    on_block=lambda done, total, seen=blocks: seen.append(total),
                                    block_target_mb=args.block_target_mb)
        elapsed = time.perf_counter() - t0
        out[f"{name}_cpu_s"] = round(time.process_time() - cpu0, 2)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: kilobytes
        out[f"{name}_s"] = round(elapsed, 2)
        out[f"{name}_blocks"] = blocks[-1]
        out[f"{name}_pairs_per_s"] = round(scores.numel() / elapsed)
        out[f"{name}_peak_extra_rss_mb"] = round((peak - rss_before) / 2**20, 1)
        out[f"{name}_finite"] = bool(torch.isfinite(scores).all())
        del scores
    return out


def bench_testset(args, block_target_mb: float | None = None) -> dict:
    cmd = [sys.executable, __file__, "_testset_child", "--threads", str(args.threads),
           "--clips", str(args.clips), "--captions", str(args.captions), "--la", str(args.la),
           "--lt", str(args.lt), "--dim", str(args.dim), "--budget-mb", str(args.budget_mb)]
    cmd += ["--both"] if args.both else []
    target = args.block_target_mb if block_target_mb is None else block_target_mb
    cmd += [] if target is None else ["--block-target-mb", str(target)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare_targets(args) -> dict:
    """The test set scored with cache-sized blocks (the CPU default) and with the largest blocks the
    budget allows; CPU seconds of each and their ratio."""
    small, large = bench_testset(args, None), bench_testset(args, float("inf"))
    out = {"measure": "block_target", "default_target": small, "budget_sized_blocks": large}
    for name in ("a2t", "t2a"):
        if f"{name}_cpu_s" in small:
            out[f"{name}_speedup_cpu"] = round(large[f"{name}_cpu_s"] / small[f"{name}_cpu_s"], 2)
            out[f"{name}_speedup_wall"] = round(large[f"{name}_s"] / small[f"{name}_s"], 2)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", nargs="?", default="all", choices=["batch", "testset", "all", "_testset_child"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--la", type=int, default=32)
    p.add_argument("--lt", type=int, default=30)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--loop-pairs", type=int, default=1024)
    p.add_argument("--clips", type=int, default=1000)
    p.add_argument("--captions", type=int, default=5000)
    p.add_argument("--budget-mb", type=float, default=2048.0)
    p.add_argument("--both", action="store_true", help="test set: also T2A")
    p.add_argument("--block-target-mb", type=float, default=None,
                   help="preferred block working set (default: the library's CPU default; inf: none)")
    p.add_argument("--compare-targets", action="store_true",
                   help="test set: run with the default target and with none, print the ratio")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    if args.what == "_testset_child":
        print(json.dumps(testset_child(args)))
        return 0
    if args.what in ("batch", "all"):
        print(json.dumps(bench_batch(args)), flush=True)
    if args.what in ("testset", "all"):
        print(json.dumps(compare_targets(args) if args.compare_targets else bench_testset(args)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
