"""The SupCLAP regularizer as one module: radius model + SVR term + radius constraint (eq. 6, 9).

:class:`SVRRegularizer` is called once per aligned (audio, text) pair set that a pairing scheme
produces (ML-CLAP: one; KCL: one per language; CACL: audio-English and audio-other) and returns the
term to add to the base loss plus detached diagnostics for logging::

    reg = build_svr_regularizer("dynamic", "bi", batch_size=24)
    term, diag = reg(audio, text, temperature)            # SigLIP base: reg(audio, text, tau, bias=b)
    loss = base_loss + term
    # or, over the pairs a scheme produced (the same list pairs_loss scores):
    term, diag = reg.over_pairs(kcl_pairs(audio, text, text_mask), temperature)
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from mlatr.errors import MlatrError
from mlatr.losses._common import Pair, Scalar, check_pair, l2_normalize
from mlatr.losses.radius import DEFAULT_INIT_RADIUS, DynamicRadius, StaticRadius
from mlatr.losses.support_vectors import constraint_loss, positive_distances, svr_loss

#: Radius models by name (SupCLAP §3.2) and SVR directions (§4.1.2).
RADIUS_KINDS = ("static", "dynamic")
SVR_DIRECTIONS = ("uni", "bi")

#: Constraint weight beta of Appendix B (eq. 9) and SVR weight alpha (eq. 6, Table 13).
DEFAULT_BETA = 0.01
DEFAULT_ALPHA = 1.0


class SVRRegularizer(nn.Module):
    """``scale * (alpha * L_svr + beta * L_cons)`` for one aligned (audio, text) pair set (SupCLAP eq. 9).

    - ``L_svr``: :func:`~mlatr.losses.svr_loss` (eq. 6, :meth:`svr_term`) with
      radii from ``radius_model``: for the text-to-audio direction the model reads
      ``(sim, tau)``, ``sim = cos(t_i, a_j)`` (row = text), for the audio-to-text direction ("bi") the
      transpose. One model serves both directions unless
      ``radius_model_a2t`` is given (the paper reports one radius curve per model, Figure 3).
    - ``L_cons``: :func:`~mlatr.losses.constraint_loss` (Appendix B) of every radius used (t2a, plus
      a2t for "bi", summed); ``beta = 0`` turns it off.
    - ``scale``: SupCLAP's ``L_orig`` (eq. 5) *sums* the two InfoNCE directions while mlatr's
      InfoNCE (:func:`~mlatr.losses.clip_loss`, :func:`~mlatr.losses.pairs_loss`) averages them, so for
      ``base="infonce"`` the default scale is 1/2: ``base + term`` is then exactly half of eq. 9, and
      ``alpha`` / ``beta`` keep the paper's meaning. mlatr's SigLIP already sums over the whole matrix
      (``1/N``), so the default is 1 there.

    Args (forward):
        audio, text: ``[N, d]``, ``text[i]`` describes ``audio[i]`` (normalised inside).
        temperature: ``tau``, float or scalar tensor (the base loss's, learnable or not).
        bias: SigLIP's ``b`` (required for ``base="siglip"``, ignored otherwise).

    Returns:
        ``(term, diagnostics)``: ``term`` a scalar tensor to add to the base loss; ``diagnostics`` a dict
        of detached 0-d tensors: ``svr_loss`` (``L_svr``), ``constraint`` (``L_cons``), ``radius`` (mean
        of all radii used), ``radius_t2a`` and, for "bi", ``radius_a2t`` (batch means),
        ``distance`` (batch mean of ``||a_i - t_i||``, what the radius is compared with: Figure 3,
        Appendix B) and ``suppression`` (mean of ``1 - R_i / ||a_i - t_i||`` for t2a, the factor of eq. 8).
    """

    def __init__(
        self,
        radius_model: nn.Module,
        *,
        bidirectional: bool = True,
        alpha: float = DEFAULT_ALPHA,
        beta: float = DEFAULT_BETA,
        base: str = "infonce",
        scale: float | None = None,
        radius_model_a2t: nn.Module | None = None,
    ) -> None:
        super().__init__()
        # base is svr_loss's argument, checked there
        if alpha < 0 or beta < 0:
            raise MlatrError(f"SVR weights must be >= 0, got alpha={alpha}, beta={beta}")
        self.radius_model = radius_model
        self.radius_model_a2t = radius_model_a2t
        self.bidirectional = bidirectional
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.base = base
        self.scale = float(scale) if scale is not None else (0.5 if base == "infonce" else 1.0)

    def radii(self, audio: Tensor, text: Tensor, temperature: Scalar) -> tuple[Tensor, Tensor | None]:
        """``(R_t2a, R_a2t or None)`` for the pair set: 0-d (static) or ``[N]`` (dynamic) tensors."""
        sim_t2a = l2_normalize(text) @ l2_normalize(audio).transpose(0, 1)  # [N, N], row = text
        r_t2a = self.radius_model(sim_t2a, temperature)
        if not self.bidirectional:
            return r_t2a, None
        model_a2t = self.radius_model_a2t if self.radius_model_a2t is not None else self.radius_model
        return r_t2a, model_a2t(sim_t2a.transpose(0, 1), temperature)

    def svr_term(self, audio: Tensor, text: Tensor, temperature: Scalar, r_t2a: Tensor, r_a2t: Tensor | None,
                 bias: Scalar | None) -> Tensor:
        """``L_svr`` of the pair set for the radii given: :func:`~mlatr.losses.svr_loss` (SupCLAP §3.1, eq. 6)."""
        return svr_loss(audio, text, temperature, r_t2a, r_a2t, base=self.base, bias=bias)

    def forward(
        self, audio: Tensor, text: Tensor, temperature: Scalar, bias: Scalar | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        check_pair(audio, text, "SVRRegularizer(audio, text)")
        r_t2a, r_a2t = self.radii(audio, text, temperature)
        svr = self.svr_term(audio, text, temperature, r_t2a, r_a2t, bias)
        cons = constraint_loss(audio, text, r_t2a)
        if r_a2t is not None:
            cons = cons + constraint_loss(audio, text, r_a2t)
        term = self.scale * (self.alpha * svr + self.beta * cons)
        distance = positive_distances(audio, text).detach()
        diagnostics = {
            "svr_loss": svr.detach(),
            "constraint": cons.detach(),
            "radius_t2a": r_t2a.detach().mean(),
            "distance": distance.mean(),
            "suppression": (1.0 - r_t2a.detach() / distance.clamp_min(1e-8)).mean(),
        }
        if r_a2t is not None:
            diagnostics["radius_a2t"] = r_a2t.detach().mean()
            diagnostics["radius"] = (diagnostics["radius_t2a"] + diagnostics["radius_a2t"]) / 2
        else:
            diagnostics["radius"] = diagnostics["radius_t2a"]
        return term, diagnostics

    def over_pairs(
        self, pairs: Sequence[Pair], temperature: Scalar, bias: Scalar | None = None
    ) -> tuple[Tensor, dict[str, Tensor]]:
        """The regularizer over a pairing scheme's pairs: the row-weighted mean of :meth:`forward`.

        Only audio-text pairs are regularised (:attr:`Pair.audio_text <mlatr.losses.Pair.audio_text>`: ML-CLAP's
        ``audio-text``, KCL's ``audio-text[k]``, CACL's ``audio-eng`` and ``audio-other``), with
        ``pair.anchor`` the audio and ``pair.target`` the text; CACL's text-text ``eng-other`` pair is
        left to the base loss (SVR displaces a text towards its *audio*, SupCLAP §3.1). Each pair's term
        is weighted by its number of rows, like :func:`~mlatr.losses.pairs_loss` weights captions, so
        for equal-size pairs this is the plain mean. Diagnostics are averaged the same way.

        Raises:
            ValueError: no audio-text pair in ``pairs``.
        """
        audio_pairs = [p for p in pairs if p.audio_text]
        if not audio_pairs:
            raise MlatrError("SVRRegularizer.over_pairs: no audio-text pair")
        rows = sum(p.anchor.shape[0] for p in audio_pairs)
        term: Tensor | None = None
        diagnostics: dict[str, Tensor] = {}
        for p in audio_pairs:
            weight = p.anchor.shape[0] / rows
            t, d = self(p.anchor, p.target, temperature, bias)
            term = weight * t if term is None else term + weight * t
            for key, value in d.items():
                diagnostics[key] = diagnostics.get(key, 0.0) + weight * value
        return term, diagnostics

    def extra_repr(self) -> str:
        direction = "bi" if self.bidirectional else "uni"
        return (f"{direction}, base={self.base!r}, alpha={self.alpha}, "
                f"beta={self.beta}, scale={self.scale}")


def build_svr_regularizer(
    radius: str = "dynamic",
    direction: str = "bi",
    *,
    base: str = "infonce",
    batch_size: int | None = None,
    alpha: float = DEFAULT_ALPHA,
    beta: float | None = None,
    init_radius: float = DEFAULT_INIT_RADIUS,
    hidden: int = 64,
    separate_a2t_radius: bool = False,
    scale: float | None = None,
    dynamic_radius: type[DynamicRadius] = DynamicRadius,
    regularizer: type[SVRRegularizer] = SVRRegularizer,
) -> SVRRegularizer:
    """An :class:`SVRRegularizer` for one of SupCLAP's variants ("bi-DynamicSVR", "uni-StaticSVR", ...).

    Args:
        radius: ``"static"`` (:class:`~mlatr.losses.StaticRadius`) or ``"dynamic"``
            (:class:`~mlatr.losses.DynamicRadius`, needs ``batch_size``, the training batch size).
        direction: ``"uni"`` (text-to-audio only) or ``"bi"`` (both, the paper's best, Table 3).
        base: ``"infonce"`` or ``"siglip"``. alpha: SVR weight (default 1, Table 13).
        beta: constraint weight; ``None`` = 0.01 for dynamic (Appendix B is the DynamicSVR
            constraint; "wo/ constraints" in Table 3 is ``beta=0``) and 0 for static.
        init_radius: initial radius (see :data:`~mlatr.losses.radius.DEFAULT_INIT_RADIUS`).
        hidden: MLP width of the dynamic predictor.
        separate_a2t_radius: a second radius model for the audio-to-text direction.
        scale: see :class:`SVRRegularizer`.
        dynamic_radius, regularizer: the classes built (the paper's by default); a research variant of
            SVR passes its subclasses (the supclap experiment's earlier form of mlatr:
            :mod:`mlatr.lab.experiments.supclap_earlier`).

    Raises:
        MlatrError: unknown names, or ``"dynamic"`` without a batch size.
    """
    if radius not in RADIUS_KINDS:
        raise MlatrError(f"unknown SVR radius model {radius!r}; expected one of {', '.join(RADIUS_KINDS)}")
    if direction not in SVR_DIRECTIONS:
        raise MlatrError(f"unknown SVR direction {direction!r}; expected one of {', '.join(SVR_DIRECTIONS)}")
    if radius == "dynamic" and (batch_size is None or batch_size < 1):
        raise MlatrError("a dynamic SVR radius needs the training batch size (batch_size >= 1)")

    def make() -> nn.Module:
        if radius == "static":
            return StaticRadius(init_radius)
        return dynamic_radius(batch_size, hidden=hidden, init=init_radius)

    if beta is None:
        beta = DEFAULT_BETA if radius == "dynamic" else 0.0
    bidirectional = direction == "bi"
    return regularizer(
        make(),
        bidirectional=bidirectional,
        alpha=alpha,
        beta=beta,
        base=base,
        scale=scale,
        radius_model_a2t=make() if (bidirectional and separate_a2t_radius) else None,
    )
