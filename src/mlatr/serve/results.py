"""Search hits -> the JSON objects of the HTTP API.

A clip result is ``{"rank", "id", "score", "relevance", "caption", "caption_lang", "duration", "audio_url",
"same_audio", "evidence"}``
(``evidence``: what ranked the clip, :class:`mlatr.search.evidence.Evidence` with every field of
:class:`~mlatr.serve.schemas.Evidence`; ``same_audio``: a sound query's own audio, :attr:`Hit.same_audio`):
``caption`` is the clip's first caption in the query's language when the index holds one, else its
first English caption, else its first caption in any language (``caption_lang`` says which), ``None``
for a clip without captions. ``audio_url`` is the server path that streams the clip (``/audio/`` + the
id, percent-encoded whole, so ids with ``/``, ``?`` or ``#`` survive). Numbers that are not finite
(an index holding a NaN embedding) become ``None``: the API's JSON is strict (no ``NaN``).
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


def clip_result(snapshot, hit, lang: str | None, root: str = "") -> dict:
    """The API object of one :class:`~mlatr.search.results.Hit` (``lang``: the query's, for the caption)."""
    row = snapshot.rows[hit.id]
    caption, caption_lang = pick_caption(snapshot.index.captions[row], lang)
    return {"rank": hit.rank, "id": hit.id, "score": finite_or_none(hit.score),
            "relevance": finite_or_none(hit.relevance), "caption": caption,
            "caption_lang": caption_lang, "duration": finite_or_none(snapshot.duration(row)),
            "audio_url": audio_url(hit.id, root), "same_audio": hit.same_audio,
            "evidence": [{**EVIDENCE_DEFAULTS, **e.to_dict()} for e in hit.evidence]}


def caption_result(hit, root: str = "") -> dict:
    """The API object of one :class:`~mlatr.search.results.CaptionHit` (sound-to-caption search)."""
    return {"rank": hit.rank, "score": finite_or_none(hit.score), "text": hit.text, "lang": hit.lang, "id": hit.id,
            "audio_url": audio_url(hit.id, root)}
