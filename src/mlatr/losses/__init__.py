"""Functional losses for audio-text contrastive learning: tensors in, scalar tensor out.

Base losses (:mod:`clip`, :mod:`siglip`) score one aligned pair of embedding sets; pairing schemes
(:mod:`schemes`: ML-CLAP, KCL, CACL) decide which captions a multilingual batch encodes and which pairs it
yields; :func:`pairs_loss` joins any scheme with any base loss. Inputs are L2-normalised inside and logits
are ``cosine / temperature``; temperatures and biases may be floats or learnable scalar tensors.
"""

from mlatr.losses._common import Pair, PairSum, cosine_logits, diagonal_cross_entropy, l2_normalize
from mlatr.losses.clip import clip_loss, infonce_pair
from mlatr.losses.cmsc import cmsc_loss, cmsc_loss_terms, interc_loss, intrac_loss, jnt_loss
from mlatr.losses.pair_losses import BASE_LOSSES, PairLoss, pair_loss, pairs_loss
from mlatr.losses.radius import DynamicRadius, StaticRadius
from mlatr.losses.schemes import (
    SCHEMES,
    Scheme,
    Selection,
    build_scheme,
    cacl_pairs,
    draw_languages,
    kcl_pairs,
    register_scheme,
)
from mlatr.losses.siglip import siglip_loss, siglip_pair
from mlatr.losses.simple_reweight import SimpleReweight, reweighted_infonce_loss
from mlatr.losses.support_vectors import constraint_loss, positive_distances, support_vectors, svr_loss
from mlatr.losses.svr_regularizer import SVRRegularizer, build_svr_regularizer

__all__ = [
    "BASE_LOSSES", "DynamicRadius", "Pair", "PairLoss", "PairSum", "SCHEMES", "SVRRegularizer", "Scheme",
    "Selection", "SimpleReweight", "StaticRadius", "build_scheme", "build_svr_regularizer",
    "cacl_pairs", "clip_loss", "cmsc_loss", "cmsc_loss_terms", "constraint_loss", "cosine_logits",
    "diagonal_cross_entropy", "draw_languages", "infonce_pair", "interc_loss", "intrac_loss", "jnt_loss",
    "kcl_pairs", "l2_normalize", "pair_loss", "pairs_loss",
    "positive_distances", "register_scheme", "reweighted_infonce_loss", "siglip_loss", "siglip_pair",
    "support_vectors", "svr_loss",
]
