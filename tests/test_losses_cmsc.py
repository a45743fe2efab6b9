"""CMSC losses (fine-grained paper, Section 2.2, eq. 6-11) against hand-written loops."""

from __future__ import annotations

import math

import pytest
import torch

from mlatr.errors import MlatrError
from mlatr.losses.cmsc import (
    cmsc_loss,
    cmsc_loss_terms,
    cmsc_similarities,
    interc_loss,
    intrac_loss,
    jnt_loss,
    soft_labels,
)
from mlatr.matching import Side, build_matching_head

TAU, BETA = 0.07, 0.3


def mats(seed=0, b=4):
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(b, b, generator=gen, dtype=torch.float64) * 2 - 1 for _ in range(4)]


def loop_interc(a2t, t2a, tau=TAU):
    b = len(a2t)
    total = 0.0
    for m in range(b):
        total += math.log(math.exp(a2t[m][m] / tau) / sum(math.exp(a2t[m][n] / tau) for n in range(b)))
    for n in range(b):
        total += math.log(math.exp(t2a[n][n] / tau) / sum(math.exp(t2a[n][m] / tau) for m in range(b)))
    return -total / b


def loop_kl_rows(target, pred, tau=TAU):
    b = len(target)
    total = 0.0
    for m in range(b):
        zp = sum(math.exp(target[m][n] / tau) for n in range(b))
        zq = sum(math.exp(pred[m][n] / tau) for n in range(b))
        for n in range(b):
            p = math.exp(target[m][n] / tau) / zp
            q = math.exp(pred[m][n] / tau) / zq
            total += p * math.log(p / q)
    return total / b


def loop_jnt(a2t, t2a, aa, tt, beta=BETA, tau=TAU):
    b = len(a2t)
    sa = [[beta * aa[m][n] + (1 - beta) * (m == n) for n in range(b)] for m in range(b)]
    st = [[beta * tt[m][n] + (1 - beta) * (m == n) for n in range(b)] for m in range(b)]
    return loop_kl_rows(sa, a2t, tau) / 2 + loop_kl_rows(st, t2a, tau) / 2


def loop_intrac(a2t, t2a, aa, tt, tau=TAU):
    # eq. 10 as printed: text term uses S_g(T_m, T_n) summed over m != n (column n of tt)
    b = len(a2t)
    total = 0.0
    for m in range(b):
        neg = sum(math.exp(aa[m][n] / tau) for n in range(b) if n != m)
        total += math.log(math.exp(a2t[m][m] / tau) / neg)
    for n in range(b):
        neg = sum(math.exp(tt[m][n] / tau) for m in range(b) if m != n)
        total += math.log(math.exp(t2a[n][n] / tau) / neg)
    return -total / b


def test_interc_against_loop():
    a2t, t2a, _, _ = mats(0)
    assert interc_loss(a2t).item() == pytest.approx(loop_interc(a2t.tolist(), a2t.T.tolist()), rel=1e-10)
    assert interc_loss(a2t, t2a).item() == pytest.approx(loop_interc(a2t.tolist(), t2a.tolist()), rel=1e-10)
    assert interc_loss(a2t, tau=0.5).item() == pytest.approx(
        loop_interc(a2t.tolist(), a2t.T.tolist(), 0.5), rel=1e-10)


def test_jnt_against_loop():
    a2t, t2a, aa, tt = mats(1)
    want = loop_jnt(a2t.tolist(), t2a.tolist(), aa.tolist(), tt.tolist())
    assert jnt_loss(a2t, aa, tt, t2a).item() == pytest.approx(want, rel=1e-10)
    want_t = loop_jnt(a2t.tolist(), a2t.T.tolist(), aa.tolist(), tt.tolist())
    assert jnt_loss(a2t, aa, tt).item() == pytest.approx(want_t, rel=1e-10)


def test_jnt_is_zero_when_cross_modal_matches_soft_labels():
    _, _, aa, tt = mats(2)
    a2t = soft_labels(aa, BETA)
    t2a = soft_labels(tt, BETA) + 0.123          # a constant shift leaves the row softmax unchanged
    assert jnt_loss(a2t, aa, tt, t2a).item() == pytest.approx(0.0, abs=1e-12)
    bumped = a2t.clone()
    bumped[0, 1] += 0.8
    assert jnt_loss(bumped, aa, tt, t2a).item() > 1e-3


def test_soft_labels_and_labels_argument():
    _, _, aa, tt = mats(3)
    y = torch.tensor([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    torch.testing.assert_close(soft_labels(aa, 0.3, y), 0.3 * aa + 0.7 * y.double())
    torch.testing.assert_close(soft_labels(aa), 0.3 * aa + 0.7 * torch.eye(4, dtype=aa.dtype))
    a2t = torch.rand(4, 4, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    # with a non-identity Y the loss uses it
    assert jnt_loss(a2t, aa, tt, labels=y).item() != pytest.approx(jnt_loss(a2t, aa, tt).item())


def test_jnt_targets_are_detached_by_default():
    a2t, t2a, aa, tt = mats(4)
    aa.requires_grad_(True)
    a2t.requires_grad_(True)
    jnt_loss(a2t, aa, tt, t2a).backward()
    assert aa.grad is None and a2t.grad.abs().sum() > 0
    jnt_loss(a2t, aa, tt, t2a, detach_targets=False).backward()
    assert aa.grad.abs().sum() > 0


def test_intrac_against_loop():
    a2t, t2a, aa, tt = mats(5)
    tt = tt + 0.5 * torch.triu(torch.ones(4, 4, dtype=tt.dtype))   # make tt clearly asymmetric
    want = loop_intrac(a2t.tolist(), t2a.tolist(), aa.tolist(), tt.tolist())
    assert intrac_loss(a2t, aa, tt, t2a).item() == pytest.approx(want, rel=1e-10)
    want_t = loop_intrac(a2t.tolist(), a2t.T.tolist(), aa.tolist(), tt.tolist())
    assert intrac_loss(a2t, aa, tt).item() == pytest.approx(want_t, rel=1e-10)
    with pytest.raises(MlatrError, match="at least 2"):
        intrac_loss(a2t[:1, :1], aa[:1, :1], tt[:1, :1])


def test_total_and_each_ablation_switch_removes_exactly_its_term():
    a2t, t2a, aa, tt = mats(6)
    full = cmsc_loss_terms(a2t, t2a, aa, tt)
    i, j, k = loop_interc(a2t.tolist(), t2a.tolist()), \
        loop_jnt(a2t.tolist(), t2a.tolist(), aa.tolist(), tt.tolist()), \
        loop_intrac(a2t.tolist(), t2a.tolist(), aa.tolist(), tt.tolist())
    assert full["interc"].item() == pytest.approx(i, rel=1e-10)
    assert full["jnt"].item() == pytest.approx(j, rel=1e-10)
    assert full["intrac"].item() == pytest.approx(k, rel=1e-10)
    assert cmsc_loss(a2t, t2a, aa, tt).item() == pytest.approx(i + j + k, rel=1e-10)
    cases = {  # Table 3 rows
        (True, False, True): i + k,      # L - L_Jnt
        (True, True, False): i + j,      # L - L_IntraC
        (True, False, False): i,         # L - L_IntraC - L_Jnt
        (False, True, True): j + k,
    }
    for (ui, uj, uk), want in cases.items():
        terms = cmsc_loss_terms(a2t, t2a, aa, tt, use_interc=ui, use_jnt=uj, use_intrac=uk)
        assert set(terms) == {n for n, u in (("interc", ui), ("jnt", uj), ("intrac", uk)) if u} | {"total"}
        assert terms["total"].item() == pytest.approx(want, rel=1e-10)
    # InterC alone needs no intra-modal scores
    assert cmsc_loss(a2t, t2a, use_jnt=False, use_intrac=False).item() == pytest.approx(i, rel=1e-10)
    with pytest.raises(MlatrError, match="required"):
        cmsc_loss(a2t, t2a)
    with pytest.raises(MlatrError, match="switched off"):
        cmsc_loss(a2t, use_interc=False, use_jnt=False, use_intrac=False)
    with pytest.raises(MlatrError, match="square"):
        interc_loss(torch.zeros(2, 3))


@pytest.mark.parametrize("name", ["lgmm", "cosine", "max-mean"])
def test_cmsc_on_head_scores_trains(name):
    gen = torch.Generator().manual_seed(7)
    b, d = 5, 8
    audio_frames = torch.randn(b, 6, d, generator=gen, requires_grad=True)
    text_frames = torch.randn(b, 4, d, generator=gen, requires_grad=True)
    text_mask = torch.rand(b, 4, generator=gen) > 0.3
    text_mask[:, 0] = True
    audio = Side(audio_frames.mean(1), audio_frames, None)
    text = Side(text_frames.mean(1), text_frames, text_mask)
    head = build_matching_head(name)
    s = cmsc_similarities(head, audio, text)
    assert s.a2t.shape == s.t2a.shape == s.aa.shape == s.tt.shape == (b, b)
    torch.testing.assert_close(s.aa, head.scores(audio, audio))
    loss = cmsc_loss(s.a2t, s.t2a, s.aa, s.tt)
    loss.backward()
    assert torch.isfinite(loss) and audio_frames.grad.abs().sum() > 0 and text_frames.grad.abs().sum() > 0
    assert cmsc_similarities(head, audio, text, intra=False).aa is None
