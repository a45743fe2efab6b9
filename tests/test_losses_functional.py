"""mlatr.losses against hand computations written here with plain loops and math.log / math.exp."""

from __future__ import annotations

import doctest
import importlib
import math

import pytest
import torch

from dense_losses import cacl_loss, kcl_loss, mlclap_loss, mlclap_pairs
from mlatr.errors import MlatrError
from mlatr.losses import (
    Pair,
    PairSum,
    cacl_pairs,
    clip_loss,
    draw_languages,
    kcl_pairs,
    pair_loss,
    pairs_loss,
    siglip_loss,
)

TAU = 0.5
BIAS = -1.5


# ---------------------------------------------------------------- hand references (pure Python)

def rows(t: torch.Tensor) -> list[list[float]]:
    return [[float(x) for x in row] for row in t.detach().double()]


def cos(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def nce_one_way(U: list[list[float]], V: list[list[float]], tau: float) -> float:
    """-sum_i log exp(s(u_i, v_i)/tau) / sum_j exp(s(u_i, v_j)/tau)."""
    total = 0.0
    for i in range(len(U)):
        den = sum(math.exp(cos(U[i], V[j]) / tau) for j in range(len(V)))
        total -= math.log(math.exp(cos(U[i], V[i]) / tau) / den)
    return total


def nce_both_ways(U, V, tau):  # ATRI eq. 13
    return nce_one_way(U, V, tau) + nce_one_way(V, U, tau)


def siglip_sum(U, V, tau, b):
    total = 0.0
    for i in range(len(U)):
        for j in range(len(V)):
            z = 1.0 if i == j else -1.0
            logit = cos(U[i], V[j]) / tau + b
            total -= math.log(1.0 / (1.0 + math.exp(-z * logit)))
    return total


def hand_kcl_eq9(audio: torch.Tensor, text: torch.Tensor, tau: float) -> float:
    """ATRI eq. 9-11 written out term by term."""
    A, N, K = rows(audio), audio.shape[0], text.shape[1]
    T = [[rows(text[i])[k] for k in range(K)] for i in range(N)]
    a2t = t2a = 0.0
    for k in range(K):
        for i in range(N):
            num = math.exp(cos(A[i], T[i][k]) / tau)
            a2t -= math.log(num / sum(math.exp(cos(A[i], T[j][k]) / tau) for j in range(N)))
            num = math.exp(cos(T[i][k], A[i]) / tau)
            t2a -= math.log(num / sum(math.exp(cos(T[i][k], A[j]) / tau) for j in range(N)))
    return (a2t + t2a) / (2 * N * K)


def masked_language_sets(audio, text, mask):
    """For each language with a caption: (audio rows, caption rows) of the clips that have one."""
    sets = []
    for k in range(text.shape[1]):
        valid = [i for i in range(audio.shape[0]) if bool(mask[i, k])]
        if valid:
            sets.append(([rows(audio)[i] for i in valid], [rows(text[:, k])[i] for i in valid]))
    return sets


def batch(n=5, k=3, d=6, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    audio = torch.randn(n, d, generator=g, dtype=dtype)
    text = torch.randn(n, k, d, generator=g, dtype=dtype)
    return audio, text


MASK = torch.tensor(
    [[1, 1, 0], [1, 0, 1], [1, 1, 1], [0, 1, 1], [1, 0, 0]], dtype=torch.bool
)  # 5 clips x 3 languages, 10 valid captions


def close(x: torch.Tensor, ref: float, tol: float = 1e-5) -> None:
    assert float(x.detach()) == pytest.approx(ref, rel=tol, abs=tol)


# ---------------------------------------------------------------- the hand references themselves

def test_hand_references_on_closed_forms():
    eye = rows(torch.eye(3))
    assert nce_one_way(eye, eye, 1.0) == pytest.approx(3 * math.log(1 + 2 / math.e))
    assert siglip_sum(eye, eye, 1.0, 0.0) == pytest.approx(3 * math.log(1 + math.exp(-1)) + 6 * math.log(2))


# ---------------------------------------------------------------- base losses

def test_clip_loss_matches_hand_symmetric_infonce():
    audio, text = batch()
    u, v = rows(audio), rows(text[:, 0])
    ref = (nce_one_way(u, v, TAU) / 5 + nce_one_way(v, u, TAU) / 5) / 2
    close(clip_loss(audio, text[:, 0], TAU), ref)


def test_clip_loss_is_not_symmetric_in_a_trivial_way():
    # a2t and t2a differ on a random batch, so averaging both directions is observable
    audio, text = batch(seed=3)
    u, v = rows(audio), rows(text[:, 0])
    assert abs(nce_one_way(u, v, TAU) - nce_one_way(v, u, TAU)) > 1e-3


def test_siglip_loss_matches_hand():
    audio, text = batch()
    ref = siglip_sum(rows(audio), rows(text[:, 1]), TAU, BIAS) / 5
    close(siglip_loss(audio, text[:, 1], TAU, BIAS), ref)


def test_tensor_temperature_and_bias_are_accepted_and_learnable():
    audio, text = batch()
    tau = torch.tensor(TAU, requires_grad=True)
    bias = torch.tensor(BIAS, requires_grad=True)
    loss = siglip_loss(audio, text[:, 0], tau, bias) + clip_loss(audio, text[:, 0], tau)
    loss.backward()
    assert tau.grad is not None and bias.grad is not None and float(tau.grad.abs()) > 0
    close(siglip_loss(audio, text[:, 0], tau, bias), siglip_sum(rows(audio), rows(text[:, 0]), TAU, BIAS) / 5)


# ---------------------------------------------------------------- KCL

def test_kcl_full_mask_is_atri_eq9():
    audio, text = batch()
    ref = hand_kcl_eq9(audio, text, TAU)
    close(kcl_loss(audio, text, TAU), ref)
    close(kcl_loss(audio, text, TAU, text_mask=torch.ones(5, 3, dtype=torch.bool)), ref)


def test_kcl_with_mask_matches_hand():
    audio, text = batch()
    sets = masked_language_sets(audio, text, MASK)
    ref = sum(nce_both_ways(A, T, TAU) for A, T in sets) / (2 * int(MASK.sum()))
    close(kcl_loss(audio, text, TAU, text_mask=MASK), ref)
    # and it is not the unmasked value
    assert abs(float(kcl_loss(audio, text, TAU)) - ref) > 1e-3


def test_kcl_skips_empty_language_and_rejects_empty_batch():
    audio, text = batch()
    mask = MASK.clone()
    mask[:, 1] = False
    assert [p.name for p in kcl_pairs(audio, text, mask)] == ["audio-text[0]", "audio-text[2]"]
    with pytest.raises(ValueError):
        kcl_loss(audio, text, TAU, text_mask=torch.zeros(5, 3, dtype=torch.bool))


def test_kcl_pairs_hold_the_valid_rows():
    audio, text = batch()
    pairs = kcl_pairs(audio, text, MASK)
    assert len(pairs) == 3
    for k, pair in enumerate(pairs):
        valid = MASK[:, k].nonzero().squeeze(1)
        assert torch.equal(pair.anchor, audio[valid]) and torch.equal(pair.target, text[valid, k])


def test_kcl_with_identical_languages_is_clip_loss():
    audio, text = batch()
    same = text[:, :1].expand(5, 4, 6)
    close(kcl_loss(audio, same, TAU), float(clip_loss(audio, text[:, 0], TAU)))


def test_kcl_siglip_matches_hand():
    audio, text = batch()
    full = torch.ones(5, 3, dtype=torch.bool)
    per_language = [siglip_sum(A, T, TAU, BIAS) / len(A) for A, T in masked_language_sets(audio, text, full)]
    close(kcl_loss(audio, text, TAU, base="siglip", bias=BIAS), sum(per_language) / 3)
    sets = masked_language_sets(audio, text, MASK)
    ref = sum(siglip_sum(A, T, TAU, BIAS) for A, T in sets) / int(MASK.sum())
    close(kcl_loss(audio, text, TAU, text_mask=MASK, base="siglip", bias=BIAS), ref)


# ---------------------------------------------------------------- CACL

def test_cacl_is_atri_eq12():
    audio, text = batch()
    A, E, O = rows(audio), rows(text[:, 0]), rows(text[:, 2])
    ref = (nce_both_ways(A, E, TAU) + nce_both_ways(A, O, TAU) + nce_both_ways(E, O, TAU)) / (6 * 5)
    close(cacl_loss(audio, text[:, 0], text[:, 2], TAU), ref)


def test_cacl_with_other_mask_matches_hand():
    audio, text = batch()
    has_other = torch.tensor([True, False, True, True, False])
    A, E, O = rows(audio), rows(text[:, 0]), rows(text[:, 2])
    keep = [0, 2, 3]
    Ak, Ek, Ok = [A[i] for i in keep], [E[i] for i in keep], [O[i] for i in keep]
    terms = nce_both_ways(A, E, TAU) + nce_both_ways(Ak, Ok, TAU) + nce_both_ways(Ek, Ok, TAU)
    ref = terms / (2 * 5 + 4 * 3)  # 2N audio-English terms + 2 x 2 x 3 other-language terms
    close(cacl_loss(audio, text[:, 0], text[:, 2], TAU, other_mask=has_other), ref)
    full = cacl_loss(audio, text[:, 0], text[:, 2], TAU, other_mask=torch.ones(5, dtype=torch.bool))
    assert float(full) == float(cacl_loss(audio, text[:, 0], text[:, 2], TAU))
    alone = cacl_loss(audio, text[:, 0], text[:, 2], TAU, other_mask=torch.zeros(5, dtype=torch.bool))
    close(alone, float(clip_loss(audio, text[:, 0], TAU)))


def test_cacl_pairs_are_the_three_alignments():
    audio, text = batch()
    names = [p.name for p in cacl_pairs(audio, text[:, 0], text[:, 1])]
    assert names == ["audio-eng", "audio-other", "eng-other"]


def test_cacl_siglip_matches_hand():
    audio, text = batch()
    A, E, O = rows(audio), rows(text[:, 0]), rows(text[:, 1])
    ref = (siglip_sum(A, E, TAU, BIAS) + siglip_sum(A, O, TAU, BIAS) + siglip_sum(E, O, TAU, BIAS)) / (3 * 5)
    close(cacl_loss(audio, text[:, 0], text[:, 1], TAU, base="siglip", bias=BIAS), ref)


# ---------------------------------------------------------------- ML-CLAP

def test_mlclap_with_one_caption_per_clip_is_clip_loss_on_those_captions():
    audio, text = batch()
    picked = [2, 0, 1, 1, 0]  # chosen by hand; the mask leaves no other choice
    mask = torch.zeros(5, 3, dtype=torch.bool)
    mask[torch.arange(5), torch.tensor(picked)] = True
    captions = [rows(text[:, k])[i] for i, k in enumerate(picked)]
    A = rows(audio)
    ref = (nce_one_way(A, captions, TAU) + nce_one_way(captions, A, TAU)) / (2 * 5)
    close(mlclap_loss(audio, text, TAU, text_mask=mask), ref)  # no generator needed: no choice
    close(mlclap_loss(audio, text, TAU, text_mask=mask, generator=torch.Generator().manual_seed(7)), ref)


def test_mlclap_with_a_fixed_generator_uses_the_drawn_languages():
    audio, text = batch()
    chosen = draw_languages(MASK, torch.Generator().manual_seed(11)).tolist()
    assert all(bool(MASK[i, k]) for i, k in enumerate(chosen))
    captions = [rows(text[:, k])[i] for i, k in enumerate(chosen)]
    A = rows(audio)
    ref = (nce_one_way(A, captions, TAU) + nce_one_way(captions, A, TAU)) / (2 * 5)
    loss = mlclap_loss(audio, text, TAU, text_mask=MASK, generator=torch.Generator().manual_seed(11))
    close(loss, ref)
    again = mlclap_loss(audio, text, TAU, text_mask=MASK, generator=torch.Generator().manual_seed(11))
    assert float(again) == float(loss)


def test_draw_languages_respects_mask_is_uniform_and_seeded():
    mask = torch.tensor([[True, False, True, True]]).expand(3000, 4)
    chosen = draw_languages(mask, torch.Generator().manual_seed(0))
    counts = torch.bincount(chosen, minlength=4).tolist()
    assert counts[1] == 0
    for c in (counts[0], counts[2], counts[3]):  # 1000 expected, sd ~26
        assert 850 < c < 1150
    assert torch.equal(chosen, draw_languages(mask, torch.Generator().manual_seed(0)))
    assert not torch.equal(chosen, draw_languages(mask, torch.Generator().manual_seed(1)))
    other = draw_languages(mask, torch.Generator().manual_seed(0), exclude=0)
    assert set(other.tolist()) == {2, 3}


def test_draw_languages_needs_a_generator_for_a_real_choice():
    with pytest.raises(ValueError, match="Generator"):
        draw_languages(MASK)
    assert draw_languages(torch.tensor([[False, True], [False, False]])).tolist() == [1, -1]


def test_mlclap_leaves_out_clips_without_captions():
    audio, text = batch()
    mask = torch.tensor([[1, 0, 0], [0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 0]], dtype=torch.bool)
    pair = mlclap_pairs(audio, text, mask)[0]
    assert torch.equal(pair.anchor, audio[[0, 2, 3]])
    assert torch.equal(pair.target, torch.stack([text[0, 0], text[2, 2], text[3, 1]]))


def test_mlclap_siglip_matches_hand():
    audio, text = batch()
    chosen = draw_languages(MASK, torch.Generator().manual_seed(5)).tolist()
    captions = [rows(text[:, k])[i] for i, k in enumerate(chosen)]
    ref = siglip_sum(rows(audio), captions, TAU, BIAS) / 5
    loss = mlclap_loss(audio, text, TAU, MASK, torch.Generator().manual_seed(5), base="siglip", bias=BIAS)
    close(loss, ref)


# ---------------------------------------------------------------- composition

def test_custom_pair_objective_composes_with_schemes():
    audio, text = batch()
    seen = []

    def count_rows(u, v):
        seen.append(u.shape[0])
        return PairSum(total=(u * 0).sum() + u.shape[0], count=2 * u.shape[0])

    assert float(kcl_loss(audio, text, TAU, text_mask=MASK, base=count_rows)) == pytest.approx(0.5)
    assert seen == MASK.sum(0).tolist()
    objective = pair_loss("infonce", TAU)
    both = pairs_loss([Pair(audio, text[:, 0], "a"), Pair(audio, text[:, 1], "b")], objective)
    close(both, (float(clip_loss(audio, text[:, 0], TAU)) + float(clip_loss(audio, text[:, 1], TAU))) / 2)


def test_errors():
    audio, text = batch()
    with pytest.raises(MlatrError, match="unknown base"):
        kcl_loss(audio, text, TAU, base="triplet")
    with pytest.raises(MlatrError, match="bias"):
        cacl_loss(audio, text[:, 0], text[:, 1], TAU, base="siglip")
    with pytest.raises(ValueError):
        clip_loss(audio, text[:4, 0], TAU)
    with pytest.raises(ValueError):
        clip_loss(audio, text[:, 0], 0.0)
    with pytest.raises(ValueError):
        kcl_loss(audio, text, TAU, text_mask=MASK.int())
    with pytest.raises(ValueError):
        kcl_loss(audio, text[:, :, :4], TAU)


# ---------------------------------------------------------------- invariances and gradients

def all_losses(audio, text, tau, bias):
    gen = torch.Generator().manual_seed(3)
    return [
        clip_loss(audio, text[:, 0], tau),
        siglip_loss(audio, text[:, 0], tau, bias),
        kcl_loss(audio, text, tau, text_mask=MASK),
        kcl_loss(audio, text, tau, text_mask=MASK, base="siglip", bias=bias),
        cacl_loss(audio, text[:, 0], text[:, 1], tau),
        cacl_loss(audio, text[:, 0], text[:, 1], tau, base="siglip", bias=bias),
        mlclap_loss(audio, text, tau, text_mask=MASK, generator=gen),
    ]


def test_losses_are_invariant_to_input_scale():
    audio, text = batch()
    scale = torch.tensor([3.0, 0.2, 7.0]).view(1, 3, 1)
    plain = all_losses(audio, text, TAU, BIAS)
    scaled = all_losses(audio * 5.0, text * scale, TAU, BIAS)
    for a, b in zip(plain, scaled, strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-5)


def test_gradcheck_float64():
    audio, text = batch(n=3, k=3, d=3, seed=2, dtype=torch.float64)
    audio.requires_grad_(True)
    text.requires_grad_(True)
    tau = torch.tensor(TAU, dtype=torch.float64, requires_grad=True)
    bias = torch.tensor(BIAS, dtype=torch.float64, requires_grad=True)
    mask = MASK[:3]
    gen = lambda: torch.Generator().manual_seed(4)  # noqa: E731  (same draw at every evaluation)
    cases = {
        "clip": lambda a, t, s, b: clip_loss(a, t[:, 0], s),
        "siglip": lambda a, t, s, b: siglip_loss(a, t[:, 0], s, b),
        "kcl": lambda a, t, s, b: kcl_loss(a, t, s, text_mask=mask),
        "kcl-siglip": lambda a, t, s, b: kcl_loss(a, t, s, text_mask=mask, base="siglip", bias=b),
        "cacl": lambda a, t, s, b: cacl_loss(a, t[:, 0], t[:, 2], s),
        "cacl-siglip": lambda a, t, s, b: cacl_loss(a, t[:, 0], t[:, 2], s, base="siglip", bias=b),
        "mlclap": lambda a, t, s, b: mlclap_loss(a, t, s, text_mask=mask, generator=gen()),
    }
    for name, fn in cases.items():
        assert torch.autograd.gradcheck(fn, (audio, text, tau, bias), eps=1e-6, atol=1e-5), name


def test_docstring_examples():
    for name in ("clip", "siglip", "pair_losses", "schemes", "radius", "support_vectors"):
        module = importlib.import_module(f"mlatr.losses.{name}")
        result = doctest.testmod(module)
        assert result.failed == 0 and result.attempted > 0, name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_with_a_cpu_generator_match_cpu():
    audio, text = batch()
    on_cpu = all_losses(audio, text, TAU, BIAS)
    on_gpu = all_losses(audio.cuda(), text.cuda(), TAU, BIAS)  # MASK stays on the CPU: moved inside
    for a, b in zip(on_cpu, on_gpu, strict=True):
        assert float(a) == pytest.approx(float(b), rel=1e-4)
