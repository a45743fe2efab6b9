"""LGMM (fine-grained paper, Section 2.1, eq. 1-5) against an independent per-pair loop."""

from __future__ import annotations

import math

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.matching import LGMMHead, build_matching_head, lgmm_local_scores, lgmm_scores
from mlatr.models.outputs import EncoderOutput


def reference_pair(q: torch.Tensor, c: torch.Tensor, tau_w: float, lam: float) -> float:
    """Eq. 1-5 for one pair of *unpadded* feature lists, with explicit loops and an explicit v_i."""
    lq, lc = q.shape[0], c.shape[0]
    s = [[float(q[i] @ c[j]) for j in range(lc)] for i in range(lq)]                     # eq. 1
    col = [math.sqrt(sum(s[i][j] ** 2 for i in range(lq))) for j in range(lc)]
    local = []
    for i in range(lq):
        e = [math.exp(s[i][j] / col[j] / tau_w) for j in range(lc)]                      # eq. 2
        w = [x / sum(e) for x in e]
        v = sum(w[j] * c[j] for j in range(lc))                                          # eq. 3
        local.append(float(q[i] @ v) / (float(q[i].norm()) * float(v.norm())))          # eq. 4
    return math.log(sum(math.exp(lam * x) for x in local)) / lam                        # eq. 5


def random_case(gen, nq=3, nc=4, lq=5, lc=6, d=7, dtype=torch.float64):
    q = torch.randn(nq, lq, d, generator=gen, dtype=dtype)
    c = torch.randn(nc, lc, d, generator=gen, dtype=dtype)
    qm = torch.rand(nq, lq, generator=gen) > 0.4
    cm = torch.rand(nc, lc, generator=gen) > 0.4
    qm[:, 0] = True
    cm[:, -1] = True
    qm[0] = True           # one fully valid query
    cm[1] = False          # one context with a single valid position
    cm[1, 2] = True
    return q, qm, c, cm


@pytest.mark.parametrize("tau_w,lam", [(0.25, 10.0), (1.0, 1.0), (0.05, 30.0)])
def test_lgmm_matches_per_pair_loop(tau_w, lam):
    gen = torch.Generator().manual_seed(1)
    q, qm, c, cm = random_case(gen)
    got = lgmm_scores(q, qm, c, cm, tau_w=tau_w, lam=lam)
    assert got.shape == (3, 4)
    for a in range(3):
        for b in range(4):
            want = reference_pair(q[a][qm[a]], c[b][cm[b]], tau_w, lam)
            assert got[a, b].item() == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_single_positions_reduce_to_cosine():
    # Lq = Lc = 1: w = 1, v = c, so S_g = cos(q, c) for any lam.
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(4, 1, 5, generator=gen, dtype=torch.float64)
    c = torch.randn(3, 1, 5, generator=gen, dtype=torch.float64)
    cos = torch.nn.functional.cosine_similarity(q[:, None, 0], c[None, :, 0], dim=-1)
    torch.testing.assert_close(lgmm_scores(q, None, c, None, lam=3.0), cos)


@pytest.mark.parametrize("garbage", [1e30, -1e30, float("inf"), float("nan"), "random"])
def test_padding_contents_never_matter(garbage):
    gen = torch.Generator().manual_seed(3)
    q, qm, c, cm = random_case(gen, dtype=torch.float32)
    base = lgmm_scores(q, qm, c, cm)
    q2, c2 = q.clone(), c.clone()
    if garbage == "random":
        q2[~qm] = torch.randn(int((~qm).sum()), q.shape[-1], generator=gen) * 1e6
        c2[~cm] = torch.randn(int((~cm).sum()), c.shape[-1], generator=gen) * 1e6
    else:
        q2[~qm] = garbage
        c2[~cm] = garbage
    q2.requires_grad_(True)
    c2.requires_grad_(True)
    out = lgmm_scores(q2, qm, c2, cm)
    assert torch.equal(out.detach(), base)
    out.sum().backward()
    assert torch.isfinite(q2.grad).all() and torch.isfinite(c2.grad).all()
    assert (q2.grad[~qm] == 0).all() and (c2.grad[~cm] == 0).all()


def test_gradcheck_float64():
    gen = torch.Generator().manual_seed(4)
    q, qm, c, cm = random_case(gen, nq=2, nc=3, lq=3, lc=4, d=3)
    q.requires_grad_(True)
    c.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda a, b: lgmm_scores(a, qm, b, cm), (q, c), eps=1e-6, atol=1e-6)


def test_directions_and_head():
    gen = torch.Generator().manual_seed(5)
    audio = torch.randn(3, 6, 4, generator=gen, dtype=torch.float64)
    text = torch.randn(2, 5, 4, generator=gen, dtype=torch.float64)
    am = torch.ones(3, 6, dtype=torch.bool)
    tm = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    head = build_matching_head("lgmm", tau_w=0.25, lam=10.0)
    a2t = head.scores(EncoderOutput(None, audio, am), EncoderOutput(None, text, tm))
    t2a = head.scores(EncoderOutput(None, text, tm), EncoderOutput(None, audio, am))
    assert a2t.shape == (3, 2) and t2a.shape == (2, 3)
    torch.testing.assert_close(a2t, lgmm_scores(audio, am, text, tm))
    torch.testing.assert_close(t2a, lgmm_scores(text, tm, audio, am))
    # LGMM is asymmetric: T2A is not the transpose of A2T.
    assert not torch.allclose(t2a, a2t.T)
    for n in range(2):
        for m in range(3):
            assert t2a[n, m].item() == pytest.approx(
                reference_pair(text[n][tm[n]], audio[m], 0.25, 10.0), rel=1e-9)


def test_local_scores_shape_and_pooling():
    gen = torch.Generator().manual_seed(6)
    q, qm, c, cm = random_case(gen)
    local = lgmm_local_scores(q, qm, c, cm)
    assert local.shape == (3, 4, 5)
    assert (local[qm[:, None, :].expand_as(local)].abs() <= 1 + 1e-12).all()
    lse = torch.stack([torch.logsumexp(10 * local[a][:, qm[a]], dim=-1) / 10 for a in range(3)])
    torch.testing.assert_close(lse, lgmm_scores(q, qm, c, cm))
    head = LGMMHead()
    torch.testing.assert_close(head.local_scores(EncoderOutput(None, q, qm), EncoderOutput(None, c, cm)), local)


def test_bad_inputs_raise():
    q = torch.randn(2, 3, 4)
    c = torch.randn(2, 3, 4)
    empty = torch.tensor([[True, False, False], [False, False, False]])
    with pytest.raises(MlatrError, match="row 1 has no valid position"):
        lgmm_scores(q, None, c, empty)
    with pytest.raises(MlatrError, match="dim"):
        lgmm_scores(q, None, torch.randn(2, 3, 5), None)
    with pytest.raises(MlatrError, match="mask"):
        lgmm_scores(q, torch.ones(2, 4, dtype=torch.bool), c, None)
    with pytest.raises(MlatrError, match="tau_w"):
        build_matching_head("lgmm", tau_w=0.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_padding_gives_finite_scores_and_gradients(dtype):
    gen = torch.Generator().manual_seed(7)
    q, qm, c, cm = random_case(gen, dtype=torch.float32)
    want = lgmm_scores(q, qm, c, cm)
    q16 = q.to(dtype).requires_grad_(True)
    c16 = c.to(dtype).requires_grad_(True)
    out = lgmm_scores(q16, qm, c16, cm)
    out.float().sum().backward()
    assert torch.isfinite(q16.grad.float()).all() and torch.isfinite(c16.grad.float()).all()
    torch.testing.assert_close(out.float(), want, atol=0.05, rtol=0.05)
