"""Search hits -> the JSON objects of the HTTP API.

A clip result is ``{"rank", "id", "path", "score", "relevance", "caption", "caption_lang", "duration",
"audio_url", "same_audio", "evidence", "start", "end", "format", "sample_rate", "channels"}`` (the last
three: the file's facets, :data:`CARD_FACETS`, ``None`` where the index has none; ``path``: the file's absolute
path on the server's machine, what the page's "copy path" copies and its exported picks list)
(``evidence``: what ranked the clip, :class:`mlatr.search.evidence.Evidence` with every field of
:class:`~mlatr.serve.schemas.Evidence`; ``same_audio``: a sound query's own audio, :attr:`Hit.same_audio`):
``caption`` is the clip's first caption in the query's language when the index holds one, else its
first English caption, else its first caption in any language (``caption_lang`` says which), ``None``
for a clip without captions. ``audio_url`` is the server path that streams the clip (``/audio/`` + the
id, percent-encoded whole, so ids with ``/``, ``?`` or ``#`` survive). Numbers that are not finite
(an index holding a NaN embedding) become ``None``: the API's JSON is strict (no ``NaN``). ``start`` /
``end``: where a long clip indexed as segments matched (:attr:`~mlatr.search.results.Hit.segment`, seconds;
``None`` otherwise): the page plays from ``start``.
"""

from __future__ import annotations

from urllib.parse import quote

from mlatr.languages import PIVOT
from mlatr.search.results import finite_or_none
from mlatr.serve.schemas import Evidence

#: The optional fields of an evidence object, as the schema fills them in: ``GET /search`` answers JSON built
#: here without passing it through the schema again, so every object carries every field.
EVIDENCE_DEFAULTS = {name: f.default for name, f in Evidence.model_fields.items() if not f.is_required()}


def pick_caption(captions: dict[str, list[str | None]], lang: str | None) -> tuple[str | None, str | None]:
    """``(caption, its language)``: first of ``lang``, else of English, else of any language."""
    order = [lang] if lang else []
    order += [PIVOT] + [code for code in captions if code not in (lang, PIVOT)]
    for code in order:
        for text in captions.get(code) or []:
            if text:
                return text, code
    return None, None


def audio_url(clip_id: str, root: str = "") -> str:
    """Server path of a clip's audio (``root``: the path the application is mounted under, if any)."""
    return f"{root}/audio/" + quote(clip_id, safe="")


#: The facets a result carries for its card (:mod:`mlatr.data.file_metadata`) and their types; None where not
#: recorded, or recorded as another type (a manifest's facets are anyone's JSON).
CARD_FACETS = {"format": str, "sample_rate": int, "channels": int}


def card_facet(facets: dict, name: str):
    """``facets[name]`` when it has its :data:`CARD_FACETS` type (a bool is no number), else None."""
    value = facets.get(name)
    return value if isinstance(value, CARD_FACETS[name]) and not isinstance(value, bool) else None


def clip_result(snapshot, hit, lang: str | None, root: str = "") -> dict:
    """The API object of one :class:`~mlatr.search.results.Hit` (``lang``: the query's, for the caption)."""
    row = snapshot.rows[hit.id]
    caption, caption_lang = pick_caption(snapshot.index.captions[row], lang)
    facets = snapshot.index.clip_columns["facets"][row]
    facets = facets if isinstance(facets, dict) else {}
    return {"rank": hit.rank, "id": hit.id, "path": hit.path, "score": finite_or_none(hit.score),
            "relevance": finite_or_none(hit.relevance), "caption": caption,
            "caption_lang": caption_lang, "duration": finite_or_none(snapshot.duration(row)),
            "audio_url": audio_url(hit.id, root), "same_audio": hit.same_audio,
            "evidence": [{**EVIDENCE_DEFAULTS, **e.to_dict()} for e in hit.evidence],
            "start": hit.segment[0] if hit.segment else None, "end": hit.segment[1] if hit.segment else None,
            **{name: card_facet(facets, name) for name in CARD_FACETS}}


def caption_result(hit, root: str = "") -> dict:
    """The API object of one :class:`~mlatr.search.results.CaptionHit` (sound-to-caption search)."""
    return {"rank": hit.rank, "score": finite_or_none(hit.score), "text": hit.text, "lang": hit.lang, "id": hit.id,
            "audio_url": audio_url(hit.id, root)}
