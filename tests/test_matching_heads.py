"""Table 2 pooling modes by hand, the cosine head, the head registry and the chunked scorer."""

from __future__ import annotations

import math

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.matching import (
    MATCHING_HEADS,
    a2t_t2a_scores,
    build_matching_head,
    build_matching_head_from_config,
    chunked_scores,
    mode_local_scores,
    mode_scores,
    plan_chunks,
)
from mlatr.matching.chunked import blocks_as_on
from mlatr.models.outputs import EncoderOutput

R = 1 / math.sqrt(2)


def hand_case():
    # query: two valid positions e1, e2 (+ one padded garbage position)
    # context: two valid positions e1, (e1+e2) scaled (+ padded garbage)
    q = torch.tensor([[[1.0, 0.0], [0.0, 3.0], [1e9, -1e9]]], dtype=torch.float64)
    qm = torch.tensor([[True, True, False]])
    c = torch.tensor([[[2.0, 0.0], [-7.0, 5.0], [5.0, 5.0]]], dtype=torch.float64)
    cm = torch.tensor([[True, False, True]])
    # cos(q_i, c_j) over valid positions: i=0: [1, R]; i=1: [0, R]
    return q, qm, c, cm


@pytest.mark.parametrize("mode,want", [
    ("max-mean", (1 + R) / 2),                    # mean_i max_j: (max(1,R) + max(0,R)) / 2
    ("max-max", 1.0),                             # max_i max_j
    ("mean-mean", ((1 + R) / 2 + R / 2) / 2),     # mean_i mean_j
    ("mean-max", (1 + R) / 2),                    # max_i mean_j: max((1+R)/2, R/2)
])
def test_modes_by_hand(mode, want):
    q, qm, c, cm = hand_case()
    assert mode_scores(q, qm, c, cm, mode).item() == pytest.approx(want, rel=1e-12)
    head = build_matching_head(mode)
    assert head.name == mode
    assert head.scores(EncoderOutput(None, q, qm), EncoderOutput(None, c, cm)).item() == pytest.approx(want, rel=1e-12)


def test_mode_local_scores_by_hand():
    q, qm, c, cm = hand_case()
    assert mode_local_scores(q, qm, c, cm, "max-mean")[0, 0, :2].tolist() == pytest.approx([1.0, R])
    want = [(1 + R) / 2, R / 2]
    assert mode_local_scores(q, qm, c, cm, "mean-max")[0, 0, :2].tolist() == pytest.approx(want)


def test_modes_against_loops_and_directions():
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    c = torch.randn(2, 6, 5, generator=gen, dtype=torch.float64)
    qm = torch.rand(3, 4, generator=gen) > 0.3
    cm = torch.rand(2, 6, generator=gen) > 0.3
    qm[:, 0] = True
    cm[:, 0] = True
    agg = {"max": max, "mean": lambda xs: sum(xs) / len(xs)}
    for mode in ("max-mean", "max-max", "mean-mean", "mean-max"):
        over_c, over_q = mode.split("-")
        got = mode_scores(q, qm, c, cm, mode)
        for a in range(3):
            for b in range(2):
                qa, cb = q[a][qm[a]], c[b][cm[b]]
                per_i = [agg[over_c]([float(torch.nn.functional.cosine_similarity(x, y, dim=0)) for y in cb])
                         for x in qa]
                assert got[a, b].item() == pytest.approx(agg[over_q](per_i), rel=1e-10)
    sym = mode_scores(c, cm, q, qm, "mean-mean")
    torch.testing.assert_close(sym, mode_scores(q, qm, c, cm, "mean-mean").T)


def test_cosine_head():
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(4, 8, generator=gen)
    t = torch.randn(3, 8, generator=gen)
    head = build_matching_head("cosine")
    a2t, t2a = a2t_t2a_scores(head, EncoderOutput(a), EncoderOutput(t))
    want = torch.nn.functional.cosine_similarity(a[:, None], t[None], dim=-1)
    torch.testing.assert_close(a2t, want)
    torch.testing.assert_close(t2a, want.T)
    with pytest.raises(MlatrError, match="pooled"):
        head.scores(EncoderOutput(None, torch.randn(2, 3, 8)), EncoderOutput(t))


def test_registry_and_config_round_trip():
    assert set(MATCHING_HEADS) == {"cosine", "lgmm", "max-mean", "max-max", "mean-mean", "mean-max"}
    for name in MATCHING_HEADS:
        head = build_matching_head(name)
        assert build_matching_head_from_config(head.config()).config() == head.config()
    want = {"name": "lgmm", "tau_w": 0.5, "lam": 3.0}
    assert build_matching_head("lgmm", tau_w=0.5, lam=3).config() == want
    with pytest.raises(MlatrError, match="unknown matching head"):
        build_matching_head("max-min")
    with pytest.raises(MlatrError, match="bad options"):
        build_matching_head("lgmm", temperature=1.0)
    with pytest.raises(MlatrError, match="no options"):
        build_matching_head("max-mean", tau_w=1.0)
    with pytest.raises(MlatrError, match="needs frame"):
        build_matching_head("lgmm").scores(EncoderOutput(torch.randn(2, 3)), EncoderOutput(torch.randn(2, 3)))


def test_plan_chunks_respects_budget():
    cases = [(1000, 5000, 23_000, 200_000, 200_000, 2 << 30), (7, 9, 100, 10, 10, 1000), (5, 5, 1, 0, 0, 1),
             (3, 50, 7, 3, 5, 60)]
    for nq, nc, ppair, pq, pc, budget in cases:
        bq, bc = plan_chunks(nq, nc, ppair, pq, pc, budget)
        assert 1 <= bq <= nq and 1 <= bc <= nc
        assert bq * bc * ppair + bq * pq + bc * pc <= budget
    assert plan_chunks(10, 10, 1, 0, 0, 10**6) == (10, 10)
    with pytest.raises(MlatrError, match="too small"):
        plan_chunks(2, 2, 100, 0, 0, 50)


def test_plan_chunks_target_gives_balanced_cache_sized_blocks():
    def cost(bq, bc, ppair, pq, pc):
        return bq * bc * ppair + bq * pq + bc * pc

    # test-set shape: 4000 captions x 100 clips, 37 kB per pair; 48 MB target inside a 1 GB budget
    bq, bc = plan_chunks(4000, 100, 37_000, 10_000, 80_000, 1 << 30, target_bytes=48 << 20)
    assert cost(bq, bc, 37_000, 10_000, 80_000) <= 48 << 20
    assert bc < 100 and 0.5 <= bq / bc <= 2          # balanced, not whole contexts x a sliver of queries
    # the block is (nearly) as large as the target allows: one more query would not fit
    assert cost(bq + 1, bc, 37_000, 10_000, 80_000) > 48 << 20
    # few queries: they all go in, and the contexts take the remaining room
    bq, bc = plan_chunks(3, 10_000, 1_000, 0, 0, 1 << 30, target_bytes=1_000_000)
    assert (bq, bc) == (3, 333)
    # everything fits the target: one block
    assert plan_chunks(10, 10, 1, 0, 0, 10**6, target_bytes=1000) == (10, 10)
    # a pair larger than the target but within the budget: the target is dropped, the budget holds
    bq, bc = plan_chunks(4, 4, 100, 0, 0, 1000, target_bytes=50)
    assert bq * bc * 100 <= 1000 and bq * bc >= 8
    # the budget stays a hard bound below the target
    bq, bc = plan_chunks(100, 100, 10, 0, 0, 1000, target_bytes=10**6)
    assert bq * bc * 10 <= 1000


def test_chunked_scores_block_target_changes_blocks_not_values():
    gen = torch.Generator().manual_seed(3)
    q = EncoderOutput(None, torch.randn(40, 6, 8, generator=gen), torch.rand(40, 6, generator=gen) > 0.3)
    c = EncoderOutput(None, torch.randn(30, 5, 8, generator=gen), torch.rand(30, 5, generator=gen) > 0.3)
    q.mask[:, 0] = True
    c.mask[:, 0] = True
    head = build_matching_head("lgmm")
    counts = {}
    results = {}
    for target in (float("inf"), 0.05):
        blocks = []
        with torch.no_grad():
            results[target] = chunked_scores(head, q, c, memory_budget_mb=64, block_target_mb=target,
                                             on_block=lambda d, t, blocks=blocks: blocks.append(t))
        counts[target] = blocks[-1]
    assert counts[float("inf")] == 1 and counts[0.05] > 4
    torch.testing.assert_close(results[0.05], results[float("inf")], rtol=1e-5, atol=1e-6)


def test_blocks_as_on_cuda_takes_the_gpu_blocks_on_cpu_tensors():
    """The GPU planner traces on the CPU device: under ``blocks_as_on("cuda")`` the default block choice is
    the GPU's (the largest the budget allows), not the CPU's cache-sized blocks; the values are the same."""
    gen = torch.Generator().manual_seed(4)
    q = EncoderOutput(None, torch.randn(48, 160, 4, generator=gen), torch.ones(48, 160, dtype=torch.bool))
    c = EncoderOutput(None, torch.randn(48, 40, 4, generator=gen), torch.ones(48, 40, dtype=torch.bool))
    head = build_matching_head("lgmm")
    counts, results = {}, {}
    for device in ("cpu", "cuda"):
        blocks = []
        with torch.no_grad(), blocks_as_on(device):
            results[device] = chunked_scores(head, q, c, memory_budget_mb=2048,
                                             on_block=lambda d, t, blocks=blocks: blocks.append(t))
        counts[device] = blocks[-1]
    assert counts["cuda"] == 1 and counts["cpu"] > 1
    torch.testing.assert_close(results["cpu"], results["cuda"], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["lgmm", "max-mean", "mean-max", "cosine"])
def test_chunked_equals_unchunked(name):
    gen = torch.Generator().manual_seed(2)
    q = EncoderOutput(torch.randn(9, 6, generator=gen), torch.randn(9, 5, 6, generator=gen),
             torch.rand(9, 5, generator=gen) > 0.3)
    c = EncoderOutput(torch.randn(11, 6, generator=gen), torch.randn(11, 4, 6, generator=gen),
             torch.rand(11, 4, generator=gen) > 0.3)
    q.mask[:, 0] = True
    c.mask[:, 0] = True
    head = build_matching_head(name)
    full = head.scores(q, c)
    per_pair = head.bytes_per_pair(q, c) + head.bytes_per_item(q) + head.bytes_per_item(c)
    budget_mb = 3 * per_pair / 2**20        # a few pairs per block
    blocks = []
    with torch.no_grad():
        got = chunked_scores(head, q, c, memory_budget_mb=budget_mb, on_block=lambda d, t: blocks.append(t))
    assert len(blocks) > 10
    torch.testing.assert_close(got, full, rtol=1e-5, atol=1e-6)
    # under autograd the blocks are concatenated and gradients match the unchunked ones
    frames = q.frames.clone().requires_grad_(True)
    pooled = q.pooled.clone().requires_grad_(True)
    q_grad = EncoderOutput(pooled, frames, q.mask)
    chunked_scores(head, q_grad, c, memory_budget_mb=budget_mb).pow(2).sum().backward()
    leaf = pooled if name == "cosine" else frames
    grad_chunked = leaf.grad.clone()
    leaf.grad = None
    head.scores(q_grad, c).pow(2).sum().backward()
    torch.testing.assert_close(grad_chunked, leaf.grad, rtol=1e-5, atol=1e-6)


def test_chunked_rejects_tiny_budget():
    q = EncoderOutput(None, torch.randn(2, 3, 4))
    with pytest.raises(MlatrError, match="too small"):
        chunked_scores(build_matching_head("lgmm"), q, q, memory_budget_mb=1e-6)
    with pytest.raises(MlatrError, match="positive"):
        chunked_scores(build_matching_head("lgmm"), q, q, memory_budget_mb=0)
