"""Pairing schemes (ATRI): which captions of a batch are encoded, and which embedding sets are contrasted.

A training batch row holds, for one clip, the captions of one source caption ``j`` in every language
(``row[k]`` translates ``row[0]``; ``None`` where a translation is missing). A scheme owns both
decisions a multilingual objective makes about such a batch:

- :meth:`Scheme.select` -- which captions are *encoded*: the flat list of texts and an index ``[N, S]``
  that places them back in ``S`` slots per clip, so the text encoder runs once per step on exactly the
  texts the scheme needs (what makes ML-CLAP and CACL cheaper than KCL, ATRI Table 4);
- :meth:`Scheme.pairs` -- which sets are *contrasted*: a list of :class:`~mlatr.losses.Pair` built from
  the batch's audio ``[N, ...]`` and the slotted texts ``[N, S, ...]``. Any base loss scores the pairs
  (InfoNCE, SigLIP: :func:`~mlatr.losses.pairs_loss`), SVR regularises the audio-text ones and a matching
  head scores them on frames, because a side may be a tensor ``[N, d]`` or an
  :class:`~mlatr.models.outputs.EncoderOutput` (pooled vectors, frames, masks).

The three schemes:

- :class:`MLCLAPScheme` (ATRI §3.1 eq. 4-5; Yan et al. 2024): one language ``q_i`` drawn uniformly per
  clip among those present, redrawn every step. ``S = 1``; one pair ``audio-text``.
- :class:`KCLScheme` (ATRI §4.1 eq. 9-11): all K languages. ``S = K``; one pair ``audio-text[k]`` per
  language among the clips that have a language-``k`` caption.
- :class:`CACLScheme` (ATRI §4.2 eq. 12-13): English plus one language drawn uniformly among the other
  languages present. ``S = 2``; pairs ``audio-eng``, ``audio-other`` and ``eng-other``.

Each scheme also declares what it needs of the data and the objective (class attributes of
:class:`Scheme`): ``anchor_language``, a language every training clip needs a caption in and that must come
first in ``data.languages`` (CACL: ``eng``), and ``text_text_pairs``, whether :meth:`Scheme.pairs` yields
text-text pairs (CACL's ``eng-other``; the matching heads' terms refuse them). A new scheme is one
:class:`Scheme` subclass decorated with :func:`register_scheme`; nothing else in mlatr names a scheme.

Randomness comes only from the ``torch.Generator`` passed to :meth:`Scheme.select` (through
:func:`draw_languages`, the one language-draw rule of mlatr).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from mlatr.errors import MlatrError
from mlatr.losses._common import TEXT_TEXT, Pair, _pooled, check_pair, take_rows, take_slot


@dataclass
class Selection:
    """Texts a scheme chose for one batch.

    Attributes:
        texts: the captions to encode, flat.
        langs: their language codes.
        index: ``[N, S]`` long, position in ``texts`` of clip i's caption in slot s, or -1 if absent.
        slot_langs: ``[N][S]`` language of each slot (``None`` where absent).
    """

    texts: list[str]
    langs: list[str]
    index: Tensor
    slot_langs: list[list[str | None]]

    @property
    def mask(self) -> Tensor:
        """``[N, S]`` bool, True where a caption fills the slot."""
        return self.index >= 0

    def gather(self, encoded):
        """Place per-text rows ``[len(texts), ...]`` into ``[N, S, ...]`` (zeros / False where a slot is
        empty); an :class:`~mlatr.models.outputs.EncoderOutput` field by field."""
        if not isinstance(encoded, Tensor):
            return encoded.map(self.gather)
        n, s = self.index.shape
        out = encoded.new_zeros(n, s, *encoded.shape[1:])  # [N, S, ...]
        filled = self.mask.to(encoded.device)
        out[filled] = encoded[self.index.to(encoded.device)[filled]]
        return out


def draw_languages(text_mask: Tensor, generator: torch.Generator | None = None,
                   exclude: int | None = None) -> Tensor:
    """For each clip, one language index drawn uniformly among those it has a caption in.

    This is ATRI's ``q_i <-R- {1..K}`` (§3.1 eq. 4, ML-CLAP) or, with ``exclude=0`` (the English
    column), ``q_i <-R- {2..K}`` of CACL (§4.2). Clip by clip, in order, one
    ``torch.randint(len(candidates), generator=generator)`` picks among the clip's candidate columns
    (ascending), so the same generator state gives the same languages whatever the device.

    Args:
        text_mask: ``[N, K]`` bool, True where clip ``i`` has a caption in language ``k``.
        generator: the ``torch.Generator`` the draw comes from. Without one, every clip must have at most
            one candidate (randomness is never implicit).
        exclude: a language column never to draw (e.g. 0 = English for CACL's other language).

    Returns:
        ``[N]`` long tensor on ``text_mask``'s device; ``-1`` for a clip with no candidate language.

    Example:
        >>> import torch
        >>> mask = torch.tensor([[True, False, True], [False, True, False]])
        >>> draw_languages(mask, exclude=0).tolist()
        [2, 1]
    """
    if text_mask.dim() != 2 or text_mask.dtype != torch.bool:
        raise MlatrError(f"text_mask must be a [N, K] bool tensor, got {text_mask.dtype} {tuple(text_mask.shape)}")
    candidates = text_mask.detach().cpu().clone()
    if exclude is not None:
        candidates[:, exclude] = False
    chosen = torch.full((candidates.shape[0],), -1, dtype=torch.long)
    for i, row in enumerate(candidates.tolist()):
        options = [k for k, present in enumerate(row) if present]
        if not options:
            continue
        if generator is None:
            if len(options) > 1:
                raise MlatrError("drawing languages needs an explicit torch.Generator (some clip has several)")
            chosen[i] = options[0]
            continue
        chosen[i] = options[int(torch.randint(len(options), (1,), generator=generator))]
    return chosen.to(text_mask.device)


def _row_mask(rows: Sequence[Sequence[str | None]]) -> Tensor:
    return torch.tensor([[t is not None for t in row] for row in rows], dtype=torch.bool).reshape(len(rows), -1)


def _build(columns: list[list[tuple[str, str] | None]], slots: int) -> Selection:
    texts: list[str] = []
    langs: list[str] = []
    index = torch.full((len(columns), slots), -1, dtype=torch.long)
    slot_langs: list[list[str | None]] = []
    for i, row in enumerate(columns):
        slot_langs.append([])
        for k, item in enumerate(row):
            if item is None:
                slot_langs[i].append(None)
                continue
            text, lang = item
            index[i, k] = len(texts)
            texts.append(text)
            langs.append(lang)
            slot_langs[i].append(lang)
    return Selection(texts, langs, index, slot_langs)


class Scheme:
    """Base class: :meth:`select` (which captions are encoded) and :meth:`pairs` (which sets are contrasted),
    and what the scheme needs (see the module docstring)."""

    #: Registry name (``objective.scheme``).
    name: ClassVar[str] = "base"
    #: The paper's name for the scheme, in messages and tables.
    label: ClassVar[str] = "base"
    #: A language every training clip needs a caption in, first in ``data.languages`` (None: any caption).
    anchor_language: ClassVar[str | None] = None
    #: Whether :meth:`pairs` yields text-text pairs besides the audio-text ones.
    text_text_pairs: ClassVar[bool] = False

    def check_languages(self, languages: Sequence[str]) -> None:
        """Raise :class:`MlatrError` unless ``languages`` (``data.languages``) suit the scheme."""
        if self.anchor_language is not None and (not languages or languages[0] != self.anchor_language):
            raise MlatrError(f"config: {self.label} anchors on {self.anchor_language}: data.languages must start "
                             f"with {self.anchor_language}")

    def select(self, rows: Sequence[Sequence[str | None]], languages: Sequence[str],
               generator: torch.Generator) -> Selection:
        raise NotImplementedError

    def pairs(self, audio, text, mask: Tensor) -> list[Pair]:
        """The pairs of one batch: ``audio [N, ...]``, ``text [N, S, ...]`` (``Selection.gather``),
        ``mask [N, S]`` bool. Sides are tensors or :class:`~mlatr.models.outputs.EncoderOutput` s."""
        raise NotImplementedError

    def encoded_columns(self, present: Sequence[bool]) -> list[tuple[float, tuple[int, ...]]]:
        """What :meth:`select` encodes of one row, as a distribution: ``(probability, language columns)`` for
        a row whose captions exist where ``present`` is True. The planner derives a step's padded caption
        length from it (:mod:`mlatr.lab.planning.caption_lengths`); tests check it against :meth:`select`."""
        raise NotImplementedError(f"scheme {self.name!r} does not say which captions it encodes (encoded_columns)")


#: Registered schemes by name, in the order the CLI and the docs list them.
SCHEMES: dict[str, type[Scheme]] = {}


def register_scheme(cls: type[Scheme]) -> type[Scheme]:
    """Class decorator: make ``cls`` the scheme ``objective.scheme = cls.name`` selects."""
    SCHEMES[cls.name] = cls
    return cls


@register_scheme
class MLCLAPScheme(Scheme):
    """One random language per clip, then one audio-text pair (the ML-CLAP baseline).

    ML-CLAP's multilingual objective (ATRI §3.1 eq. 4-5): for each clip ``i`` a language ``q_i`` is drawn
    uniformly among those it has a caption in (:func:`draw_languages`, before encoding: only the drawn
    captions are encoded), and the base loss scores the pairs ``(a_i, t_{i q_i})`` (InfoNCE: the CLIP loss).

    References:
        Yan et al., "Bridging Language Gaps in Audio-Text Retrieval" (ML-CLAP), Interspeech 2024.
        Yin et al., "ATRI", ACL 2025, §3.1 eq. 4-5.
    """

    name = "mlclap"
    label = "ML-CLAP"

    def select(self, rows, languages, generator):
        mask = _row_mask(rows)
        empty = (~mask.any(dim=1)).nonzero().flatten().tolist()
        if empty:
            raise MlatrError(f"batch row {empty[0]} has no caption in any language")
        chosen = draw_languages(mask, generator)
        return _build([[(row[k], languages[k])] for row, k in zip(rows, chosen.tolist(), strict=True)], 1)

    def encoded_columns(self, present):
        columns = [k for k, p in enumerate(present) if p]  # draw_languages: uniform among the present ones
        return [(1.0 / len(columns), (k,)) for k in columns]

    def pairs(self, audio, text, mask):
        return [Pair(audio, take_slot(text, 0), "audio-text")]


@register_scheme
class KCLScheme(Scheme):
    """All K languages of each clip (1-to-K contrastive learning): one pair per language (:func:`kcl_pairs`,
    ATRI §4.1 eq. 9-11)."""

    name = "kcl"
    label = "KCL"

    def select(self, rows, languages, generator):
        cols = [[(t, languages[k]) if t is not None else None for k, t in enumerate(row)] for row in rows]
        return _build(cols, len(languages))

    def encoded_columns(self, present):
        return [(1.0, tuple(k for k, p in enumerate(present) if p))]

    def pairs(self, audio, text, mask):
        return kcl_pairs(audio, text, mask)


@register_scheme
class CACLScheme(Scheme):
    """English plus one other random language (audio-English co-anchor contrastive learning): the three
    pairs of :func:`cacl_pairs` (ATRI §4.2 eq. 12-13)."""

    name = "cacl"
    label = "CACL"
    anchor_language = "eng"
    text_text_pairs = True

    def select(self, rows, languages, generator):
        self.check_languages(languages)
        mask = _row_mask(rows)
        no_english = (~mask[:, 0]).nonzero().flatten().tolist()
        if no_english:
            raise MlatrError(f"batch row {no_english[0]} has no English caption (CACL anchors on English)")
        other = draw_languages(mask, generator, exclude=0)
        cols = [[(row[0], "eng"), (row[k], languages[k]) if k >= 0 else None]
                for row, k in zip(rows, other.tolist(), strict=True)]
        return _build(cols, 2)

    def encoded_columns(self, present):
        others = [k for k, p in enumerate(present) if p and k > 0]  # draw_languages(exclude=0)
        return [(1.0 / len(others), (0, k)) for k in others] if others else [(1.0, (0,))]

    def pairs(self, audio, text, mask):
        # Clips whose caption has no translation contribute to the audio-English pair only.
        return cacl_pairs(audio, take_slot(text, 0), take_slot(text, 1), other_mask=mask[:, 1])


def build_scheme(name: str) -> Scheme:
    """The registered scheme named ``name`` (``mlclap``, ``kcl``, ``cacl``, ...)."""
    if name not in SCHEMES:
        raise MlatrError(f"config: objective.scheme must be one of {', '.join(SCHEMES)}, got {name!r}")
    return SCHEMES[name]()


def check_multilingual(audio, text, text_mask: Tensor | None) -> None:
    """Raise ``ValueError`` unless ``audio [N, ...]``, ``text [N, K, ...]``, ``text_mask [N, K]`` bool agree."""
    a, t = _pooled(audio), _pooled(text)
    if a.dim() != 2 or t.dim() != 3:
        raise MlatrError(f"expected audio [N, d] and text [N, K, d], got {tuple(a.shape)} and {tuple(t.shape)}")
    if t.shape[0] != a.shape[0] or t.shape[2] != a.shape[1]:
        raise MlatrError(f"audio {tuple(a.shape)} and text {tuple(t.shape)} disagree on N or d")
    if text_mask is not None and (text_mask.dtype != torch.bool or tuple(text_mask.shape) != tuple(t.shape[:2])):
        raise MlatrError(f"text_mask must be a bool tensor of shape {tuple(t.shape[:2])}, "
                         f"got {text_mask.dtype} {tuple(text_mask.shape)}")


def kcl_pairs(audio, text, text_mask: Tensor | None = None) -> list[Pair]:
    """The pairs of 1-to-K contrastive learning: one (audio, language-k captions) pair per language.

    Pair ``k`` holds the clips that have a caption in language ``k`` (all clips without a mask) and
    those captions, so language ``k``'s negatives are other clips' language-``k`` captions only, as
    in the denominators of ATRI eq. 10-11. Languages with no caption in the batch give no pair.
    Scored by InfoNCE (:func:`~mlatr.losses.pairs_loss`) this is ATRI eq. 9,
    ``L_kcl = 1/(2NK) (L^{a2t}_kcl + L^{t2a}_kcl)`` with ``L^{a2t}_kcl = -sum_k sum_i log exp(s(a_i, t_ik)/tau)
    / sum_j exp(s(a_i, t_jk)/tau)`` (eq. 10) and ``L^{t2a}_kcl`` the same from each caption to the clips
    (eq. 11); under a mask each language's InfoNCE runs among its clips and the sum is divided by ``2 x``
    the valid captions. Scored by SigLIP: the caption-weighted mean of the per-language SigLIP losses.

    Args:
        audio: ``[N, d]``; text: ``[N, K, d]`` (``text[i, k]`` is clip ``i``'s caption in language
            ``k``), tensors or EncoderOutputs; text_mask: ``[N, K]`` bool, True where the caption exists
            (None = all exist).

    Returns:
        List of :class:`~mlatr.losses.Pair` named ``"audio-text[k]"``.

    Example:
        >>> import torch
        >>> from mlatr.losses import pair_loss, pairs_loss
        >>> same = torch.eye(3).unsqueeze(1).expand(3, 2, 3)   # every caption equals its clip
        >>> loss = pairs_loss(kcl_pairs(torch.eye(3), same), pair_loss("infonce", 1.0))  # ATRI eq. 9
        >>> round(float(loss), 4)   # log(1 + 2/e)
        0.5514

    References:
        Yin et al., "ATRI: Mitigating Multilingual Audio Text Retrieval Inconsistencies by Reducing
        Data Distribution Errors", ACL 2025, §4.1, eq. 9-11.
    """
    check_multilingual(audio, text, text_mask)
    if text_mask is not None:
        text_mask = text_mask.to(_pooled(text).device)
    pairs = []
    for k in range(_pooled(text).shape[1]):
        if text_mask is None:
            pairs.append(Pair(audio, take_slot(text, k), f"audio-text[{k}]"))
            continue
        rows = text_mask[:, k].nonzero().squeeze(1)
        if rows.numel():
            pairs.append(Pair(take_rows(audio, rows), take_rows(take_slot(text, k), rows), f"audio-text[{k}]"))
    return pairs


def cacl_pairs(audio, eng, other, other_mask: Tensor | None = None) -> list[Pair]:
    """The three pairs of CACL: (audio, English), (audio, other language), (English, other language).

    Scored by InfoNCE (:func:`~mlatr.losses.pairs_loss`) this is ATRI eq. 12,
    ``L_cacl = 1/(6N) (L^{ae} + L^{at} + L^{et})``, each ``L^{uv}`` (eq. 13) an InfoNCE summed over both
    directions, so English acts as a second anchor for the other language; under ``other_mask`` the last two
    run among the clips that have another language and the sum is divided by ``2N + 4 n_other``. Scored by
    SigLIP: the mean of the three SigLIP losses.

    Args:
        audio, eng, other: ``[N, d]`` (tensors or EncoderOutputs); row ``i`` of each is clip ``i``'s audio,
            its English caption ``t_i1`` and its caption ``t_iq_i`` in the language drawn for it (ATRI §4.2;
            :func:`draw_languages` with ``exclude=`` the English column).
        other_mask: ``[N]`` bool, False for clips with no caption in any other language (their
            ``other`` row is ignored); None = all present.

    Returns:
        ``[Pair(audio, eng, "audio-eng"), Pair(audio, other, "audio-other"), Pair(eng, other, "eng-other")]``;
        the last two hold only the rows where ``other_mask`` is True and are omitted when none is.

    Example:
        >>> import torch
        >>> from mlatr.losses import pair_loss, pairs_loss
        >>> round(float(pairs_loss(cacl_pairs(torch.eye(3), torch.eye(3), torch.eye(3)), pair_loss("infonce", 1.0))), 4)
        0.5514

    References:
        Yin et al., "ATRI", ACL 2025, §4.2, eq. 12-13. SupCLAP Table 8 (CACL with SigLIP / SVR).
    """
    for name, side in (("eng", eng), ("other", other)):
        check_pair(_pooled(audio), _pooled(side), f"cacl audio, {name}")
    pairs = [Pair(audio, eng, "audio-eng")]
    n = _pooled(audio).shape[0]
    if other_mask is not None:
        if other_mask.dtype != torch.bool or tuple(other_mask.shape) != (n,):
            raise MlatrError(f"other_mask must be a bool tensor of shape ({n},), "
                             f"got {other_mask.dtype} {tuple(other_mask.shape)}")
        rows = other_mask.to(_pooled(audio).device).nonzero().squeeze(1)
        if rows.numel() == 0:
            return pairs
        if rows.numel() < n:
            audio, eng, other = (take_rows(x, rows) for x in (audio, eng, other))
    return pairs + [Pair(audio, other, "audio-other"), Pair(eng, other, "eng-other", TEXT_TEXT)]
