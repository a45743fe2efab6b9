"""mlatr's earlier form of SVR, experiment code now (mlatr.lab.experiments.supclap_earlier): the dot-scored term
(Appendix D's linearised map), the radius predictor on sorted, detached cosines with a softplus output, and
how a config names it (``objective.svr.builder``)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlatr.errors import MlatrError
from mlatr.lab.experiments.supclap import EARLIER_FORM, supclap_config
from mlatr.lab.experiments.supclap_earlier import DotScoredSVR, EarlierRadius, dot_svr_loss, earlier_svr
from mlatr.losses.clip import clip_loss
from mlatr.losses.radius import DynamicRadius
from mlatr.training.config import SVRConfig, config_from_dict
from mlatr.training.objective import build_objective
from test_losses_svr import _batch, ref_svr


@pytest.mark.parametrize("base", ["infonce", "siglip"])
@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("per_row", [False, True])
def test_dot_svr_loss_matches_hand_reference(base, bi, per_row):
    audio, text = _batch(5, 6, seed=1)
    tau, bias = 0.3, (-1.5 if base == "siglip" else None)
    if per_row:
        r_t2a, r_a2t = [0.05, 0.4, 0.2, 0.7, 0.1], [0.3, 0.15, 0.6, 0.0, 0.25]
        rt, ra = torch.tensor(r_t2a, dtype=torch.float64), torch.tensor(r_a2t, dtype=torch.float64)[:, None]
    else:
        r_t2a, r_a2t = [0.35] * 5, [0.2] * 5
        rt, ra = torch.tensor(0.35, dtype=torch.float64), 0.2
    got = dot_svr_loss(audio, text, tau, rt, ra if bi else None, base=base, bias=bias)
    want = ref_svr(audio, text, tau, r_t2a, r_a2t if bi else None, base=base, bias=bias, similarity="dot")
    assert math.isclose(float(got), want, rel_tol=1e-10)


def test_dot_svr_loss_at_radius_zero_is_infonce_and_falls_monotonically_in_the_radius():
    audio, text = _batch(6, 4, seed=2)
    cos = F.normalize(text, dim=1) @ F.normalize(audio, dim=1).T
    assert torch.allclose(dot_svr_loss(audio, text, 0.07, 0.0), F.cross_entropy(cos / 0.07, torch.arange(6)),
                          rtol=1e-12)
    assert torch.allclose(dot_svr_loss(audio, text, 0.07, 0.0, 0.0), 2 * clip_loss(audio, text, 0.07), rtol=1e-12)
    g = torch.Generator().manual_seed(0)
    a = F.normalize(torch.randn(32, 64, generator=g, dtype=torch.float64), dim=1)
    t = F.normalize(a + 0.9 * F.normalize(torch.randn(32, 64, generator=g, dtype=torch.float64), dim=1), dim=1)
    dist = torch.linalg.vector_norm(a - t, dim=1)
    curve = [float(dot_svr_loss(a, t, 0.07, f * dist)) for f in (0.0, 1.0, 3.0)]
    assert curve[0] > curve[1] > curve[2]  # the support vector's length acts as a logit scale
    with pytest.raises(MlatrError):
        dot_svr_loss(a, t, 0.07, 0.1, base="siglip")


@pytest.mark.parametrize("base", ["infonce", "siglip"])
def test_dot_svr_loss_gradcheck_float64(base):
    audio, text = _batch(4, 3, seed=3)
    args = (audio.requires_grad_(True), text.requires_grad_(True),
            torch.tensor([0.1, 0.3, 0.2, 0.4], dtype=torch.float64, requires_grad=True),
            torch.tensor(0.25, dtype=torch.float64, requires_grad=True),
            torch.tensor(0.2, dtype=torch.float64, requires_grad=True),
            torch.tensor(-1.0, dtype=torch.float64, requires_grad=True))

    def f(a, t, r1, r2, temp, b):
        return dot_svr_loss(a, t, temp, r1, r2, base=base, bias=b)

    assert torch.autograd.gradcheck(f, args)


def test_dot_svr_loss_gradient_is_appendix_d_through_normalisation():
    """``dot_svr_loss`` (the form Appendix D analyses; inputs normalised inside) has, for raw text row i, the
    gradient ``(I - t t^T)/||x_i|| J_i^T [(P_ii - 1) a_i + sum_j P_ij a_j] / (N tau)`` with ``J_i`` of eq. 15."""
    g = torch.Generator().manual_seed(5)
    n, d, tau = 4, 5, 0.3
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * 2.0
    a = F.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    radius = torch.tensor([0.1, 0.5, 0.3, 0.8], dtype=torch.float64)
    x.requires_grad_(True)
    (grad,) = torch.autograd.grad(dot_svr_loss(a, x, tau, radius), x)
    t = F.normalize(x.detach(), dim=1)
    eye = torch.eye(d, dtype=torch.float64)
    for i in range(n):
        dist = torch.linalg.vector_norm(a[i] - t[i])
        u = (a[i] - t[i]) / dist
        jac = eye - radius[i] / dist * (eye - torch.outer(u, u))
        prob = torch.softmax((t[i] + radius[i] * u) @ a.T / tau, 0)
        grad_sup = (prob @ a - a[i]) / tau / n
        norm_jac = (eye - torch.outer(t[i], t[i])) / torch.linalg.vector_norm(x[i].detach())
        assert torch.allclose(grad[i], norm_jac @ jac.T @ grad_sup, atol=1e-12)


def test_earlier_radius_reads_sorted_cosines_padded_and_cut():
    sim = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, -0.3], [0.4, 0.6, 0.7]])
    want = torch.tensor([[0.9, 0.5, 0.1, -1.0, -1.0], [0.8, 0.2, -0.3, -1.0, -1.0], [0.7, 0.6, 0.4, -1.0, -1.0]])
    assert torch.equal(EarlierRadius(batch_size=5).features(sim, 0.5), want)  # cosines: tau not applied
    assert torch.equal(EarlierRadius(batch_size=2).features(sim), want[:, :2])  # the hardest negative kept
    model = EarlierRadius(batch_size=3)
    perm = torch.tensor([0, 2, 1])  # sorted, the features do not depend on the order of the batch
    assert torch.equal(model.features(sim[perm][:, perm], 0.1), model.features(sim, 0.1)[perm])
    # the paper's predictor reads the same matrix in batch order, over tau
    assert not torch.equal(DynamicRadius(batch_size=5).features(sim, 1.0), want)


@pytest.mark.parametrize("n", [1, 3, 8, 11])
def test_earlier_radius_starts_at_init_and_stays_positive(n):
    torch.manual_seed(0)
    model = EarlierRadius(batch_size=8, hidden=16, init=0.2)
    sim = torch.rand(n, n) * 2 - 1
    assert torch.allclose(model(sim, 0.1), torch.full((n,), 0.2), atol=1e-6)
    with torch.no_grad():
        model.mlp[-1].weight.normal_(0.0, 5.0)
        model.mlp[-1].bias.fill_(-3.0)
    out = model(sim, 0.1)
    raw = model.mlp(model.features(sim, 0.1)).squeeze(1)
    assert out.shape == (n,) and (out > 0).all() and torch.allclose(out, F.softplus(raw))
    assert (raw < 0).any() or n == 1
    with pytest.raises(MlatrError, match="init must be > 0"):
        EarlierRadius(batch_size=8, init=-0.2)


def test_earlier_radius_input_is_detached():
    sim = (torch.rand(4, 4, generator=torch.Generator().manual_seed(1)) * 2 - 1).requires_grad_(True)
    model = EarlierRadius(batch_size=4, hidden=8)
    with torch.no_grad():
        model.mlp[-1].weight.normal_()
    model(sim, 0.1).sum().backward()
    assert sim.grad is None and model.mlp[0].weight.grad is not None


def test_earlier_svr_builds_the_dot_scored_regularizer_with_the_earlier_radius():
    reg = earlier_svr(SVRConfig(radius="dynamic", bidirectional=True), "infonce", 6)
    assert isinstance(reg, DotScoredSVR) and isinstance(reg.radius_model, EarlierRadius)
    assert reg.beta == 0.01 and reg.bidirectional
    audio, text = _batch(6, 4, seed=10, dtype=torch.float32)
    term, diag = reg(audio, text, 0.07)
    sim = F.normalize(text, dim=1) @ F.normalize(audio, dim=1).T
    rt, ra = reg.radius_model(sim, 0.07), reg.radius_model(sim.T, 0.07)
    assert torch.allclose(diag["svr_loss"], dot_svr_loss(audio, text, 0.07, rt, ra))
    static = earlier_svr(SVRConfig(radius="static", bidirectional=False), "infonce", 6)
    assert torch.allclose(static(audio, text, 0.07)[0], 0.5 * dot_svr_loss(audio, text, 0.07, 0.1))


def test_the_supclap_row_names_the_earlier_form_by_its_builder():
    cfg = config_from_dict(supclap_config("m.jsonl", 1, "infonce-bi-dynamic-earlier"))
    assert cfg.objective.svr.builder == EARLIER_FORM["builder"]
    objective = build_objective(cfg.objective, 8)
    assert type(objective.svr) is DotScoredSVR and type(objective.svr.radius_model) is EarlierRadius
    defined = build_objective(config_from_dict(supclap_config("m.jsonl", 1, "infonce-bi-dynamic")).objective, 8)
    assert type(defined.svr).__name__ == "SVRRegularizer" and type(defined.svr.radius_model) is DynamicRadius


@pytest.mark.parametrize(("builder", "message"), [
    ("mlatr.lab.experiments.supclap_earlier.earlier_svr", "objective.svr.builder: must be an import path"),
    ("mlatr.lab.experiments.no_such_module:earlier_svr", "objective.svr.builder: cannot import"),
    ("mlatr.lab.experiments.supclap_earlier:no_such_builder", "has no function 'no_such_builder'"),
])
def test_a_wrong_svr_builder_is_refused_naming_the_field(builder, message):
    tree = supclap_config("m.jsonl", 1, "infonce-bi-dynamic")
    tree["objective"]["svr"]["builder"] = builder
    with pytest.raises(MlatrError, match=message):
        build_objective(config_from_dict(tree).objective, 8)
