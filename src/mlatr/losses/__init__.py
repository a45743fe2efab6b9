"""Functional losses for audio-text contrastive learning: tensors in, scalar tensor out.

Base objectives (:mod:`clip`, :mod:`siglip`) score one aligned pair of embedding sets; pairing
schemes (:mod:`mlclap`, :mod:`kcl`, :mod:`cacl`) decide which pairs a multilingual batch yields;
:func:`pairs_loss` joins any scheme with any objective. Inputs are L2-normalised inside and logits are
``cosine / temperature``; temperatures and biases may be floats or learnable scalar tensors.
"""

from mlatr.losses._common import Pair, PairSum, cosine_logits, diagonal_cross_entropy, l2_normalize
from mlatr.losses.cacl import cacl_loss, cacl_pairs
from mlatr.losses.clip import clip_loss, infonce_pair
from mlatr.losses.cmsc import cmsc_loss, cmsc_loss_terms, interc_loss, intrac_loss, jnt_loss  # noqa: F401
from mlatr.losses.kcl import kcl_loss, kcl_pairs
from mlatr.losses.mlclap import draw_languages, mlclap_loss, mlclap_pairs
from mlatr.losses.objectives import BASE_OBJECTIVES, PairObjective, pair_objective, pairs_loss
from mlatr.losses.siglip import siglip_loss, siglip_pair

__all__ = [
    "BASE_OBJECTIVES",
    "Pair",
    "PairObjective",
    "PairSum",
    "cacl_loss",
    "cacl_pairs",
    "clip_loss",
    "cosine_logits",
    "diagonal_cross_entropy",
    "draw_languages",
    "infonce_pair",
    "kcl_loss",
    "kcl_pairs",
    "l2_normalize",
    "mlclap_loss",
    "mlclap_pairs",
    "pair_objective",
    "pairs_loss",
    "siglip_loss",
    "siglip_pair",
]

# SupCLAP support vector regularization (StaticSVR / DynamicSVR, uni / bi, constraint; Simple Reweight).
from mlatr.losses.radius import DynamicRadius, StaticRadius  # noqa: E402
from mlatr.losses.simple_reweight import SimpleReweight, reweighted_infonce_loss  # noqa: E402
from mlatr.losses.svr import constraint_loss, positive_distances, support_vectors, svr_loss  # noqa: E402
from mlatr.losses.svr_objective import SVRRegularizer, build_svr_regularizer  # noqa: E402

__all__ += [
    "DynamicRadius",
    "SVRRegularizer",
    "SimpleReweight",
    "StaticRadius",
    "build_svr_regularizer",
    "constraint_loss",
    "positive_distances",
    "reweighted_infonce_loss",
    "support_vectors",
    "svr_loss",
]
