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
from mlatr.matching import build_matching_head
from mlatr.models.outputs import EncoderOutput

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


def loop_softmax_row(row, tau=TAU):
    z = sum(math.exp(x / tau) for x in row)
    return [math.exp(x / tau) / z for x in row]


def loop_kl(target_rows, pred, tau=TAU):
    """mean_m sum_n P_mn log(P_mn / Q_mn), Q = row softmax of pred / tau; P given as probabilities."""
    b = len(target_rows)
    total = 0.0
    for m in range(b):
        q = loop_softmax_row(pred[m], tau)
        total += sum(p * math.log(p / q[n]) for n, p in enumerate(target_rows[m]) if p > 0)
    return total / b


def loop_targets(intra, labels, beta=BETA, tau=TAU, mixture="probability"):
    """Eq. 7-8 soft labels, one explicit row at a time (labels: 0/1 lists; rows normalised to sum 1)."""
    b = len(intra)
    rows = []
    for m in range(b):
        if mixture == "probability":
            soft = loop_softmax_row(intra[m], tau)
            k = sum(labels[m])
            rows.append([beta * soft[n] + (1 - beta) * labels[m][n] / k for n in range(b)])
        else:
            rows.append(loop_softmax_row([beta * intra[m][n] + (1 - beta) * labels[m][n] for n in range(b)], tau))
    return rows


def loop_jnt(a2t, t2a, aa, tt, beta=BETA, tau=TAU, labels=None, mixture="probability"):
    b = len(a2t)
    y = labels or [[1 if m == n else 0 for n in range(b)] for m in range(b)]
    y_t = [[y[n][m] for n in range(b)] for m in range(b)]
    pa = loop_targets(aa, y, beta, tau, mixture)
    pt = loop_targets(tt, y_t, beta, tau, mixture)
    return loop_kl(pa, a2t, tau) / 2 + loop_kl(pt, t2a, tau) / 2


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


@pytest.mark.parametrize("mixture", ["probability", "logit"])
def test_jnt_against_loop(mixture):
    a2t, t2a, aa, tt = mats(1)
    want = loop_jnt(a2t.tolist(), t2a.tolist(), aa.tolist(), tt.tolist(), mixture=mixture)
    assert jnt_loss(a2t, aa, tt, t2a, mixture=mixture).item() == pytest.approx(want, rel=1e-10)
    want_t = loop_jnt(a2t.tolist(), a2t.T.tolist(), aa.tolist(), tt.tolist(), mixture=mixture)
    assert jnt_loss(a2t, aa, tt, mixture=mixture).item() == pytest.approx(want_t, rel=1e-10)


def test_jnt_with_several_matches_per_row_against_loop():
    a2t, t2a, aa, tt = mats(6)
    y = [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]]  # two captions of clip 0; asymmetric
    labels = torch.tensor(y, dtype=torch.bool)
    for mixture in ("probability", "logit"):
        want = loop_jnt(a2t.tolist(), t2a.tolist(), aa.tolist(), tt.tolist(), labels=y, mixture=mixture)
        got = jnt_loss(a2t, aa, tt, t2a, labels=labels, mixture=mixture).item()
        assert got == pytest.approx(want, rel=1e-10)
    with pytest.raises(MlatrError, match="at least one match"):
        jnt_loss(a2t, aa, tt, labels=torch.zeros(4, 4, dtype=torch.bool))


def test_soft_labels_stay_soft_in_probability_space():
    """The reason for the default: at tau = 0.07 the logit mixture gives the match a margin of at least
    (1 - beta) / tau = 10 and leaves almost no mass elsewhere, even for a near-duplicate; the probability
    mixture hands a near-duplicate a share of the beta = 0.3 that the intra-modal softmax spreads."""
    g = torch.Generator().manual_seed(3)
    base = torch.randn(16, 8, generator=g, dtype=torch.float64)
    pairs = torch.cat([base, base + 0.15 * torch.randn(16, 8, generator=g, dtype=torch.float64)])
    u = torch.nn.functional.normalize(pairs, dim=1)  # rows i and i + 16 are near-duplicates
    aa = u @ u.T  # a cosine matrix, self-similarity 1 on the diagonal like a head's S(A_m, A_m)
    twin = torch.arange(32).roll(16)
    assert float(aa[torch.arange(32), twin].min()) > 0.9
    prob = soft_labels(aa, BETA, tau=TAU)
    logit = soft_labels(aa, BETA, tau=TAU, mixture="logit")
    for p in (prob, logit):
        torch.testing.assert_close(p.sum(1), torch.ones(32, dtype=aa.dtype))
    off = ~torch.eye(32, dtype=torch.bool)
    assert float(logit[off].reshape(32, 31).sum(1).max()) < 31 * math.exp(-(1 - BETA) / TAU)  # <= 0.14 %
    assert float(prob[torch.arange(32), twin].min()) > 0.02        # the near-duplicate keeps a soft label
    assert float(prob[torch.arange(32), twin].mean()) > 100 * float(logit[torch.arange(32), twin].mean())
    # beta = 0 is the binary label alone in both readings; beta = 1 the intra-modal softmax alone
    eye = torch.eye(32, dtype=aa.dtype)
    torch.testing.assert_close(soft_labels(aa, 0.0), eye)
    torch.testing.assert_close(soft_labels(aa, 1.0), torch.softmax(aa / TAU, dim=1))
    with pytest.raises(MlatrError, match="mixture"):
        soft_labels(aa, mixture="sum")


def test_jnt_is_zero_when_prediction_equals_the_soft_labels():
    _, _, aa, tt = mats(2)
    a2t = TAU * soft_labels(aa, BETA).log()          # softmax(a2t / tau) == the target rows
    t2a = TAU * soft_labels(tt, BETA).log() + 0.123  # a constant shift leaves the row softmax unchanged
    assert jnt_loss(a2t, aa, tt, t2a).item() == pytest.approx(0.0, abs=1e-12)
    bumped = a2t.clone()
    bumped[0, 1] += 0.8
    assert jnt_loss(bumped, aa, tt, t2a).item() > 1e-3


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
    audio = EncoderOutput(audio_frames.mean(1), audio_frames, None)
    text = EncoderOutput(text_frames.mean(1), text_frames, text_mask)
    head = build_matching_head(name)
    s = cmsc_similarities(head, audio, text)
    assert s.a2t.shape == s.t2a.shape == s.aa.shape == s.tt.shape == (b, b)
    torch.testing.assert_close(s.aa, head.scores(audio, audio))
    loss = cmsc_loss(s.a2t, s.t2a, s.aa, s.tt)
    loss.backward()
    assert torch.isfinite(loss) and audio_frames.grad.abs().sum() > 0 and text_frames.grad.abs().sum() > 0
    assert cmsc_similarities(head, audio, text, intra=False).aa is None
