"""SupCLAP support vector regularization: values, gradients (Appendix D), radius models, regularizer."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from mlatr.errors import MlatrError
from mlatr.losses.clip import clip_loss
from mlatr.losses.radius import DynamicRadius, StaticRadius
from mlatr.losses.siglip import siglip_loss
from mlatr.losses.simple_reweight import SimpleReweight, reweighted_infonce_loss
from mlatr.losses.support_vectors import constraint_loss, support_vectors, svr_loss
from mlatr.losses.svr_regularizer import build_svr_regularizer

# ----------------------------------------------------------------------------- hand-written reference


def _unit(row):
    n = math.sqrt(sum(x * x for x in row))
    return [x / n for x in row]


def _dot(u, v):
    return sum(x * y for x, y in zip(u, v, strict=True))


def _support(anchor, target, r):
    dist = math.sqrt(sum((y - x) ** 2 for x, y in zip(anchor, target, strict=True)))
    return [x + r * (y - x) / dist for x, y in zip(anchor, target, strict=True)]


def _ref_direction(anchors, cands, radii, tau, base, bias, similarity):
    n = len(anchors)
    total = 0.0
    for i in range(n):
        s = _support(anchors[i], cands[i], radii[i])
        if similarity == "cosine":  # s(t_sup, a) = cos(t_sup, a) / tau: the support vector renormalised
            s = _unit(s)
        logits = [_dot(s, cands[j]) / tau for j in range(n)]
        if base == "infonce":
            total += -(logits[i] - math.log(sum(math.exp(z) for z in logits)))
        else:
            for j in range(n):
                z = 1.0 if i == j else -1.0
                total += -math.log(1.0 / (1.0 + math.exp(-z * (logits[j] + bias))))
    return total / n


def ref_svr(audio, text, tau, r_t2a, r_a2t=None, base="infonce", bias=None, similarity="cosine"):
    """Explicit loops with math.exp / math.log; radii given as Python lists (one per row)."""
    a = [_unit(r) for r in audio.tolist()]
    t = [_unit(r) for r in text.tolist()]
    loss = _ref_direction(t, a, r_t2a, tau, base, bias, similarity)
    if r_a2t is not None:
        loss += _ref_direction(a, t, r_a2t, tau, base, bias, similarity)
    return loss


def _batch(n=5, d=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    audio = torch.randn(n, d, generator=g, dtype=dtype)
    text = torch.randn(n, d, generator=g, dtype=dtype) * 3.0  # not unit norm: normalised inside
    return audio, text


# ----------------------------------------------------------------------------- support vectors


def test_support_vectors_hand_values_not_renormalised():
    sv = support_vectors(torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 5.0]]), math.sqrt(2) / 2)
    assert torch.allclose(sv, torch.tensor([[0.5, 0.5]]))
    assert math.isclose(float(sv.norm()), math.sqrt(0.5), rel_tol=1e-6)  # inside the ball, kept so
    raw = support_vectors(torch.tensor([[2.0, 0.0]]), torch.tensor([[2.0, 3.0]]), 1.0, normalize=False)
    assert torch.allclose(raw, torch.tensor([[2.0, 1.0]]))


def test_support_vectors_radius_shapes_and_errors():
    anchor, target = _batch(4, 3)
    r = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    by_row = support_vectors(anchor, target, r)
    assert torch.equal(by_row, support_vectors(anchor, target, r[:, None]))
    for i in range(4):  # row i uses radius r[i]
        assert torch.allclose(
            by_row[i], support_vectors(anchor[i : i + 1], target[i : i + 1], float(r[i]))[0]
        )
    shared = support_vectors(anchor, target, torch.tensor(0.25, dtype=torch.float64))
    assert torch.allclose(shared, support_vectors(anchor, target, 0.25))
    with pytest.raises(ValueError):
        support_vectors(anchor, target, torch.ones(3))
    with pytest.raises(ValueError):
        support_vectors(anchor, target[:3], 0.1)


def test_support_vectors_coincident_pair_is_finite():
    x = torch.tensor([[1.0, 0.0]], requires_grad=True)
    sv = support_vectors(x, x.detach().clone(), 0.5)
    sv.sum().backward()
    assert torch.allclose(sv, torch.tensor([[1.0, 0.0]]))
    assert torch.isfinite(x.grad).all()


# ----------------------------------------------------------------------------- svr_loss values


@pytest.mark.parametrize("base", ["infonce", "siglip"])
@pytest.mark.parametrize("bi", [False, True])
@pytest.mark.parametrize("per_row", [False, True])
def test_svr_loss_matches_hand_reference(base, bi, per_row):
    audio, text = _batch(5, 6, seed=1)
    tau, bias = 0.3, (-1.5 if base == "siglip" else None)
    if per_row:
        r_t2a = [0.05, 0.4, 0.2, 0.7, 0.1]
        r_a2t = [0.3, 0.15, 0.6, 0.0, 0.25]
        rt, ra = torch.tensor(r_t2a, dtype=torch.float64), torch.tensor(r_a2t, dtype=torch.float64)[:, None]
    else:
        r_t2a, r_a2t = [0.35] * 5, [0.2] * 5
        rt, ra = torch.tensor(0.35, dtype=torch.float64), 0.2
    got = svr_loss(audio, text, tau, rt, ra if bi else None, base=base, bias=bias)
    want = ref_svr(audio, text, tau, r_t2a, r_a2t if bi else None, base=base, bias=bias)
    assert math.isclose(float(got), want, rel_tol=1e-10)


def test_svr_loss_radius_zero_is_plain_infonce_and_siglip():
    audio, text = _batch(6, 4, seed=2)
    tau = 0.07
    cos = F.normalize(text, dim=1) @ F.normalize(audio, dim=1).T
    t2a = F.cross_entropy(cos / tau, torch.arange(6))
    assert torch.allclose(svr_loss(audio, text, tau, 0.0), t2a, rtol=1e-12)
    # bi with both radii 0: the two InfoNCE directions summed = 2 * clip_loss (which averages them)
    assert torch.allclose(svr_loss(audio, text, tau, 0.0, 0.0), 2 * clip_loss(audio, text, tau), rtol=1e-12)
    sig = svr_loss(audio, text, 0.1, 0.0, base="siglip", bias=-2.0)
    assert torch.allclose(sig, siglip_loss(text, audio, 0.1, -2.0), rtol=1e-12)
    # a positive radius moves the support vector to the positive: the term changes (and here drops)
    assert float(svr_loss(audio, text, tau, 0.3)) < float(t2a)


def test_svr_loss_in_radius_cosine_has_its_minimum_near_the_positive_distance():
    """§3.1's cosine form: the term falls until the support vector reaches its clip (R ~ ||a - t||) and
    rises past it, so a learned radius is held near the distance (the earlier form's dot score falls
    monotonically: tests/test_supclap_earlier_form.py)."""
    g = torch.Generator().manual_seed(0)
    audio = F.normalize(torch.randn(32, 64, generator=g, dtype=torch.float64), dim=1)
    text = F.normalize(audio + 0.9 * F.normalize(torch.randn(32, 64, generator=g, dtype=torch.float64), dim=1), dim=1)
    dist = torch.linalg.vector_norm(audio - text, dim=1)  # partially aligned pairs, ||a - t|| ~ 0.7

    at_zero, at_dist, at_three = [float(svr_loss(audio, text, 0.07, f * dist)) for f in (0.0, 1.0, 3.0)]
    assert at_dist < at_zero / 10 and at_three > 10 * at_dist


def test_svr_loss_errors():
    audio, text = _batch(3, 4)
    with pytest.raises(MlatrError):
        svr_loss(audio, text, 0.1, 0.1, base="hinge")
    with pytest.raises(MlatrError):
        svr_loss(audio, text, 0.1, 0.1, base="siglip")
    with pytest.raises(ValueError):
        svr_loss(audio, text, 0.0, 0.1)


@pytest.mark.parametrize("base", ["infonce", "siglip"])
def test_svr_loss_gradcheck_float64(base):
    audio, text = _batch(4, 3, seed=3)
    audio.requires_grad_(True)
    text.requires_grad_(True)
    rt = torch.tensor([0.1, 0.3, 0.2, 0.4], dtype=torch.float64, requires_grad=True)
    ra = torch.tensor(0.25, dtype=torch.float64, requires_grad=True)
    tau = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    bias = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)

    def f(a, t, r1, r2, temp, b):
        return svr_loss(a, t, temp, r1, r2, base=base, bias=b)

    assert torch.autograd.gradcheck(f, (audio, text, rt, ra, tau, bias))


# ----------------------------------------------------------------------------- Appendix D


def _appendix_setup(seed=4, n=5, d=6):
    g = torch.Generator().manual_seed(seed)
    t = F.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    a = F.normalize(torch.randn(n, d, generator=g, dtype=torch.float64), dim=1)
    return t, a


def test_appendix_d_jacobian_of_support_vector():
    """eq. 15: d t_sup / d t+ = I - R/||a+ - t+|| (I - u u^T), with a+ held fixed."""
    t, a = _appendix_setup()
    r = 0.3
    jac = torch.autograd.functional.jacobian(
        lambda x: support_vectors(x[None], a[:1], r, normalize=False)[0], t[0]
    )
    dist = torch.linalg.vector_norm(a[0] - t[0])
    u = (a[0] - t[0]) / dist
    p_perp = torch.eye(6, dtype=torch.float64) - torch.outer(u, u)
    assert torch.allclose(jac, torch.eye(6, dtype=torch.float64) - r / dist * p_perp, atol=1e-12)


@pytest.mark.parametrize("r", [0.2, 0.6, 1.8])  # 1.8 > ||a+ - t+||: the factor turns negative
def test_appendix_d_negative_force_decomposition(r):
    """eq. 16-18, checked with autograd for every negative of one anchor.

    For the logit of negative j, ``ell_j(t) = t_sup(t) . a_j / tau``, autograd gives
    ``grad ell_j = (a_par + (1 - R/||a+ - t+||) a_perp) / tau`` while InfoNCE's
    ``grad (t . a_j / tau) = (a_par + a_perp) / tau``: the component along ``u`` is unchanged and the
    perpendicular one is scaled by ``1 - R/||a+ - t+||``. Weighted by the softmax probabilities, the
    total pushing force of negative j under ``L_orig + alpha L_svr`` is eq. 17 (parallel) + eq. 18
    (perpendicular), and pull + the forces of all negatives is the whole autograd gradient.
    """
    t, a = _appendix_setup()
    tau, alpha, n, d = 0.25, 0.7, 5, 6
    t0 = t[0].clone().requires_grad_(True)
    dist = torch.linalg.vector_norm(a[0] - t[0])
    u = (a[0] - t[0]) / dist
    factor = 1 - r / dist
    assert (factor < 0) == (r > float(dist))

    def sup_logits(x):
        return support_vectors(x[None], a[:1], r, normalize=False)[0] @ a.T / tau

    def orig_logits(x):
        return x @ a.T / tau

    with torch.no_grad():
        p = torch.softmax(orig_logits(t[0]), 0)  # P+ = p[0], P_j- = p[j] (eq. 2-3)
        p_sup = torch.softmax(sup_logits(t[0]), 0)  # same with t_sup (eq. 16)

    forces = []
    for j in range(1, n):
        (g_sup,) = torch.autograd.grad(sup_logits(t0)[j], t0)
        (g_orig,) = torch.autograd.grad(orig_logits(t0)[j], t0)
        a_par = (a[j] @ u) * u
        a_perp = a[j] - a_par
        # InfoNCE: the whole a_j / tau; SVR: parallel unchanged, perpendicular scaled (eq. 16)
        assert torch.allclose(g_orig, a[j] / tau, atol=1e-12)
        assert torch.allclose((g_sup @ u) * u, a_par / tau, atol=1e-12)
        assert torch.allclose(g_sup - (g_sup @ u) * u, factor * a_perp / tau, atol=1e-12)
        assert torch.allclose(g_sup - (g_sup @ u) * u, factor * (g_orig - (g_orig @ u) * u), atol=1e-12)
        f_j = p[j] * g_orig + alpha * p_sup[j] * g_sup  # total pushing force of negative j
        assert torch.allclose(
            (f_j @ u) * u, (p[j] / tau + alpha * p_sup[j] / tau) * a_par, atol=1e-12
        )  # eq. 17
        perp = f_j - (f_j @ u) * u
        assert torch.allclose(
            perp, (p[j] / tau + alpha * p_sup[j] / tau * factor) * a_perp, atol=1e-12
        )  # eq. 18
        forces.append(f_j)

    # The decomposition accounts for the whole gradient of L_orig,t2a + alpha L_svr for this anchor.
    def objective(x):
        lo, ls = orig_logits(x), sup_logits(x)
        return -torch.log_softmax(lo, 0)[0] - alpha * torch.log_softmax(ls, 0)[0]

    (g_total,) = torch.autograd.grad(objective(t0), t0)
    jac = torch.eye(d, dtype=torch.float64) - r / dist * (
        torch.eye(d, dtype=torch.float64) - torch.outer(u, u)
    )
    pull = (p[0] - 1) * a[0] / tau + alpha * (p_sup[0] - 1) * (jac @ a[0]) / tau
    assert torch.allclose(g_total, pull + torch.stack(forces).sum(0), atol=1e-12)


# ----------------------------------------------------------------------------- constraint


def test_constraint_loss_hand_values():
    a, t = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])  # ||a - t|| = sqrt(2)
    assert math.isclose(float(constraint_loss(a, t, 2.0)), 2 - math.sqrt(2), rel_tol=1e-6)
    assert math.isclose(float(constraint_loss(a, t, -0.5)), 0.5, rel_tol=1e-6)
    assert float(constraint_loss(a, t, 1.0)) == 0.0
    # two rows, distances sqrt(2) and 2 (antipodal); per-row radii
    a2 = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    t2 = torch.tensor([[0.0, 2.0], [0.0, -1.0]])
    r = torch.tensor([1.5, -0.25])
    want = ((1.5 - math.sqrt(2)) + 0.25) / 2
    assert math.isclose(float(constraint_loss(a2, t2, r)), want, rel_tol=1e-6)
    assert math.isclose(float(constraint_loss(a2, t2, 2.5)), ((2.5 - math.sqrt(2)) + 0.5) / 2, rel_tol=1e-6)


def test_constraint_loss_gradients_reach_radius_only_by_default():
    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]], requires_grad=True)
    t = torch.tensor([[0.0, 1.0], [0.0, -1.0]])
    r = torch.tensor([2.0, -0.5], requires_grad=True)
    constraint_loss(a, t, r).backward()
    assert torch.allclose(r.grad, torch.tensor([0.5, -0.5]))  # d/dR of ReLU(R-d) and ReLU(-R), / N
    assert a.grad is None or torch.count_nonzero(a.grad) == 0
    a.grad = None
    constraint_loss(a, t, r, detach_distance=False).backward()
    assert torch.count_nonzero(a.grad) > 0


# ----------------------------------------------------------------------------- radius models


def test_static_radius_is_one_learnable_scalar():
    model = StaticRadius(0.3)
    out = model(torch.eye(4))
    assert out.dim() == 0 and float(out.detach()) == pytest.approx(0.3)
    audio, text = _batch(4, 3, dtype=torch.float32)
    svr_loss(audio, text, 0.1, out).backward()
    assert model.radius.grad is not None and float(model.radius.grad) != 0.0
    with pytest.raises(ValueError):
        model(torch.ones(2, 3))


def test_dynamic_radius_features_batch_order_logits_pad_and_cut():
    """§3.2's S = [s(t+, a+), s(t+, a_1^-), ...] with s = cos / tau, negatives in batch order."""
    sim = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, -0.3], [0.4, 0.6, 0.7]])
    tau = 0.5
    padded = DynamicRadius(batch_size=5).features(sim, tau)
    want = torch.tensor(
        [[0.9, 0.1, 0.5, -1.0, -1.0], [0.8, 0.2, -0.3, -1.0, -1.0], [0.7, 0.4, 0.6, -1.0, -1.0]]
    ) / tau
    assert torch.allclose(padded, want)
    assert torch.allclose(DynamicRadius(batch_size=3).features(sim, tau), want[:, :3])
    assert torch.allclose(DynamicRadius(batch_size=2).features(sim, tau), want[:, :2])


def test_dynamic_radius_starts_at_init_and_is_real_valued():
    """The paper's R in R: DynamicRadius(batch_size=8, init=-0.2)(S) is -0.2 for every row at first."""
    sim = torch.rand(5, 5, generator=torch.Generator().manual_seed(0)) * 2 - 1
    assert torch.equal(DynamicRadius(batch_size=8, init=-0.2)(sim, 0.07), torch.full((5,), -0.2))
    with pytest.raises(ValueError):
        DynamicRadius(batch_size=0)


@pytest.mark.parametrize("n", [1, 3, 8, 11])
def test_dynamic_radius_shape_and_real_output(n):
    torch.manual_seed(0)
    model = DynamicRadius(batch_size=8, hidden=16, init=0.2)
    sim = torch.rand(n, n) * 2 - 1
    assert torch.allclose(model(sim, 0.1), torch.full((n,), 0.2), atol=1e-6)  # starts as a static radius
    with torch.no_grad():  # a trained-looking last layer: outputs differ per row, and may go negative (R in R)
        model.mlp[-1].weight.normal_(0.0, 5.0)
        model.mlp[-1].bias.fill_(-3.0)
    out = model(sim, 0.1)
    assert out.shape == (n,)
    hidden = model.mlp[:-1](model.features(sim, 0.1))
    assert torch.allclose(out, hidden @ model.mlp[-1].weight[0] - 3.0)  # the last layer's value, unsquashed
    if n > 1:
        assert out.std() > 0
        assert (out < 0).any()


def test_dynamic_radius_input_gradients_flow_into_the_similarities():
    torch.manual_seed(1)
    sim = (torch.rand(4, 4) * 2 - 1).requires_grad_(True)
    model = DynamicRadius(batch_size=4, hidden=8)
    with torch.no_grad():
        model.mlp[-1].weight.normal_()
    model(sim, 0.1).sum().backward()
    assert sim.grad is not None and torch.count_nonzero(sim.grad) > 0


def _train_steps(seed, steps=3):
    torch.manual_seed(seed)
    reg = build_svr_regularizer("dynamic", "bi", batch_size=6, hidden=16)
    g = torch.Generator().manual_seed(123)
    audio = torch.randn(6, 8, generator=g, requires_grad=True)
    text = torch.randn(6, 8, generator=g, requires_grad=True)
    opt = torch.optim.Adam([*reg.parameters(), audio, text], lr=0.05)
    radii = []
    for _ in range(steps):
        term, diag = reg(audio, text, 0.1)
        opt.zero_grad()
        term.backward()
        opt.step()
        radii.append(float(diag["radius"]))
    return [p.detach().clone() for p in reg.parameters()], radii


def test_dynamic_radius_determinism_with_seed():
    params_a, radii_a = _train_steps(7)
    params_b, radii_b = _train_steps(7)
    params_c, _ = _train_steps(8)
    assert radii_a == radii_b
    assert all(torch.equal(x, y) for x, y in zip(params_a, params_b, strict=True))
    assert not torch.equal(params_a[0], params_c[0])
    assert len(set(radii_a)) > 1  # the radius learns


# ----------------------------------------------------------------------------- regularizer


@pytest.mark.parametrize("base", ["infonce", "siglip"])
def test_regularizer_is_the_weighted_sum_it_documents(base):
    audio, text = _batch(5, 4, seed=9, dtype=torch.float32)
    bias = -1.0 if base == "siglip" else None
    torch.manual_seed(0)
    reg = build_svr_regularizer("dynamic", "bi", base=base, batch_size=5, hidden=8, alpha=0.8, beta=0.5)
    with torch.no_grad():
        reg.radius_model.mlp[-1].weight.normal_(0.0, 3.0)
        reg.radius_model.mlp[-1].bias.fill_(1.2)
    term, diag = reg(audio, text, 0.1, bias=bias)
    sim = F.normalize(text, dim=1) @ F.normalize(audio, dim=1).T
    rt, ra = reg.radius_model(sim, 0.1), reg.radius_model(sim.T, 0.1)
    svr = svr_loss(audio, text, 0.1, rt, ra, base=base, bias=bias)
    cons = constraint_loss(audio, text, rt) + constraint_loss(audio, text, ra)
    scale = 0.5 if base == "infonce" else 1.0
    assert torch.allclose(term, scale * (0.8 * svr + 0.5 * cons))
    assert cons > 0  # radii from the random head do overshoot some pairs
    assert set(diag) == {"svr_loss", "constraint", "radius", "radius_t2a", "radius_a2t", "distance", "suppression"}
    assert torch.allclose(diag["radius_t2a"], rt.mean()) and torch.allclose(diag["radius_a2t"], ra.mean())
    dist = torch.linalg.vector_norm(F.normalize(audio, dim=1) - F.normalize(text, dim=1), dim=1)
    assert torch.allclose(diag["suppression"], (1 - rt / dist).mean())
    assert torch.allclose(diag["distance"], dist.mean())
    assert all(not v.requires_grad for v in diag.values())


def test_regularizer_uni_static_defaults_and_composition_over_pair_sets():
    audio, text = _batch(6, 4, seed=10, dtype=torch.float32)
    reg = build_svr_regularizer("static", "uni", init_radius=0.2)
    assert reg.beta == 0.0 and reg.alpha == 1.0 and not reg.bidirectional
    assert build_svr_regularizer("dynamic", "uni", batch_size=4).beta == 0.01
    term, diag = reg(audio, text, 0.07)
    assert torch.allclose(term, 0.5 * svr_loss(audio, text, 0.07, 0.2))
    assert "radius_a2t" not in diag and float(diag["radius"]) == pytest.approx(0.2)
    # KCL-style: one call per language pair set, smaller sets than the dynamic model was built for
    dyn = build_svr_regularizer("dynamic", "bi", batch_size=6, hidden=8)
    terms = [dyn(audio[:k], text[:k], 0.07)[0] for k in (6, 4, 2)]
    torch.stack(terms).mean().backward()
    assert all(p.grad is not None for p in dyn.parameters())
    with pytest.raises(MlatrError):
        build_svr_regularizer("dynamic", "bi")
    with pytest.raises(MlatrError):
        build_svr_regularizer("learned", "bi")
    with pytest.raises(MlatrError):
        reg_sig = build_svr_regularizer("static", "bi", base="siglip")
        reg_sig(audio, text, 0.1)


# ----------------------------------------------------------------------------- Simple Reweight


def test_simple_reweight_values():
    audio, text = _batch(4, 3, seed=11)
    tau = 0.2
    assert torch.allclose(SimpleReweight()(audio, text, tau)[0], clip_loss(audio, text, tau))
    w = 2.5
    a = [_unit(r) for r in audio.tolist()]
    t = [_unit(r) for r in text.tolist()]

    def direction(rows, cols):
        total = 0.0
        for i in range(4):
            e = [math.exp(_dot(rows[i], cols[j]) / tau) for j in range(4)]
            total += -math.log(w * e[i] / (w * e[i] + sum(e) - e[i]))
        return total / 4

    want = (direction(t, a) + direction(a, t)) / 2
    got = reweighted_infonce_loss(audio, text, tau, torch.tensor(math.log(w), dtype=torch.float64))
    assert math.isclose(float(got), want, rel_tol=1e-10)
    module = SimpleReweight(init=w)
    loss, diag = module(audio, text, tau)
    loss.backward()
    assert float(diag["reweight_w"]) == pytest.approx(w) and module.log_weight.grad is not None


def test_regularizer_over_scheme_pairs_is_row_weighted_and_skips_text_text():
    from mlatr.losses import cacl_pairs, kcl_pairs

    g = torch.Generator().manual_seed(12)
    audio, eng, other = (torch.randn(6, 4, generator=g) for _ in range(3))
    torch.manual_seed(0)
    reg = build_svr_regularizer("dynamic", "bi", batch_size=6, hidden=8)
    mask = torch.tensor([True, True, False, True, False, True])  # 4 clips have a non-English caption
    term, diag = reg.over_pairs(cacl_pairs(audio, eng, other, mask), 0.1)
    t_eng, d_eng = reg(audio, eng, 0.1)
    t_oth, d_oth = reg(audio[mask], other[mask], 0.1)  # eng-other is not regularised
    assert torch.allclose(term, (6 * t_eng + 4 * t_oth) / 10)
    assert torch.allclose(diag["radius"], (6 * d_eng["radius"] + 4 * d_oth["radius"]) / 10)
    text = torch.stack([eng, other], dim=1)  # KCL: [N, K, d], one pair per language
    term_k, _ = reg.over_pairs(kcl_pairs(audio, text), 0.1)
    assert torch.allclose(term_k, (reg(audio, eng, 0.1)[0] + reg(audio, other, 0.1)[0]) / 2)
    with pytest.raises(ValueError):
        reg.over_pairs(cacl_pairs(audio, eng, other)[2:], 0.1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_regularizer_on_cuda_matches_cpu():
    audio, text = _batch(5, 4, seed=13, dtype=torch.float32)
    torch.manual_seed(0)
    reg = build_svr_regularizer("dynamic", "bi", batch_size=8, hidden=8)
    with torch.no_grad():
        reg.radius_model.mlp[-1].weight.normal_()
    term_cpu, diag_cpu = reg(audio, text, 0.1)
    term_gpu, diag_gpu = reg.cuda()(audio.cuda(), text.cuda(), torch.tensor(0.1, device="cuda"))
    assert torch.allclose(term_gpu.cpu(), term_cpu, atol=1e-5)
    assert torch.allclose(diag_gpu["radius"].cpu(), diag_cpu["radius"], atol=1e-5)


def test_constraint_polices_both_sides_of_a_real_valued_dynamic_radius():
    """Appendix B: with the paper's identity output, a negative radius is penalised by ReLU(-R) and an
    overshooting one by ReLU(R - ||a - t||); the constraint's gradient moves R back inside [0, ||a - t||]."""
    audio, text = _batch(6, 4, seed=14, dtype=torch.float32)
    for init, sign in ((-0.3, -1.0), (2.5, 1.0)):  # ||a - t|| <= 2 for unit vectors
        reg = build_svr_regularizer("dynamic", "bi", batch_size=6, hidden=8, init_radius=init, alpha=0.0,
                                    beta=1.0)
        term, diag = reg(audio, text, 0.07)
        assert float(diag["constraint"]) > 0
        term.backward()
        bias_grad = float(reg.radius_model.mlp[-1].bias.grad)
        assert bias_grad * sign > 0  # gradient descent lowers an overshoot and raises a negative radius
