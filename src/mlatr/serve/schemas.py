"""The JSON shapes of the HTTP API (pydantic models: they make the OpenAPI schema and check responses)."""

from typing import Literal

from pydantic import BaseModel


class Evidence(BaseModel):
    source: Literal["caption", "keyword", "sound"]  # what ranked the clip (mlatr.search.hybrid)
    score: float | None  # caption / sound: cosine; keyword: BM25
    rank: int  # the clip's rank in that source
    text: str | None = None  # the matched caption (caption, keyword)
    lang: str | None = None  # its language
    terms: list[str] | None = None  # the query's words found in it (keyword)
    origin: str | None = None  # where the library got the caption: bext, id3, ucs, name, folder, ... (null: unknown)
    translation: bool = False  # the query's translation into the captions' language matched it (caption, keyword)


class ClipResult(BaseModel):
    rank: int
    id: str
    path: str  # the file's absolute path on the server's machine (the page's copy path and picks export)
    score: float | None  # cosine similarity (hybrid text search: the fused score); null if not finite
    relevance: float | None = None  # calibrated probability that the clip answers the query (mlatr.search.relevance)
    caption: str | None
    caption_lang: str | None
    duration: float | None  # seconds, from the file's header; null if unreadable
    audio_url: str
    same_audio: bool = False  # a sound query: this clip's audio is the query's own (search.mark_same_audio)
    evidence: list[Evidence] = []
    start: float | None = None  # a long clip indexed as segments: where it matched, seconds (search.segments)
    end: float | None = None
    format: str | None = None  # the file's container (wav, flac, ogg, mp3, ...), from its facets; null: not recorded
    sample_rate: int | None = None  # Hz, from its facets
    channels: int | None = None  # from its facets


class CaptionResult(BaseModel):
    rank: int
    score: float | None
    text: str
    lang: str
    id: str
    audio_url: str


class TextSearchResponse(BaseModel):
    query: str
    lang: str | None
    k: int
    rank: str
    took_ms: float
    calibrated: bool  # false: the index's model has no calibration of its own; no relevance is given
    uncalibrated: str | None = None  # why, when not calibrated
    nothing_relevant: bool  # relevance is below min_relevance (the results are the closest ones all the same)
    min_relevance: float | None  # None when not calibrated
    relevance: float | None  # the probability that one of the hits answers (None: not calibrated, or no hit)
    translated_query: str | None = None  # the query translated into the captions' language (null: not translated)
    results: list[ClipResult]


class AudioSearchResponse(BaseModel):
    filename: str
    k: int
    took_ms: float
    calibrated: bool
    uncalibrated: str | None = None
    nothing_relevant: bool
    min_relevance: float | None
    relevance: float | None
    results: list[ClipResult]
    captions: list[CaptionResult]


class SimilarResponse(BaseModel):
    """``GET /clips/similar/{id}``: the clips nearest to clip ``id``'s sound (itself left out) and the captions
    nearest to it."""

    id: str
    k: int
    took_ms: float
    calibrated: bool
    uncalibrated: str | None = None
    nothing_relevant: bool
    min_relevance: float | None
    relevance: float | None
    results: list[ClipResult]
    captions: list[CaptionResult]


class Waveform(BaseModel):
    """``GET /clips/waveform/{id}``: the clip's length in seconds and the peaks of its thumbnail (0..1)."""

    id: str
    duration: float
    peaks: list[float]


class Language(BaseModel):
    code: str  # ISO 639-3
    name: str
    alias: str | None  # ISO 639-1 (a browser's language), where there is one


class Health(BaseModel):
    status: str
    index: str
    clips: int
    captions: int
    text_encoder: str | None
    languages: list[Language]
    #: the query languages read through an offline translation into ``caption_language`` (Apertium's pairs)
    translates: list[str] = []
    caption_language: str | None = None
    language_required: bool
    max_k: int
    max_query_chars: int
    max_upload_bytes: int
    loaded_at: float
    reloads: int
    reload_error: str | None
    #: which process of ``mlatr serve --workers N`` answered (0..N-1); None: a single process
    worker: int | None = None


class Reloaded(BaseModel):
    status: str
    clips: int
    before: int | None


class ErrorBody(BaseModel):
    error: str
    status: int


#: The ``where`` parameter of the searches, as /docs shows it.
WHERE = ("only clips whose facets pass this filter (mlatr.search.filters), e.g. duration<1.5s and channels=1, "
         "format in (wav, flac), library=wesnoth, keywords has door, not silent")

#: The ``responses=`` of a route: every error status answers an :class:`ErrorBody`.
ERRORS = {code: {"model": ErrorBody} for code in (400, 404, 413, 415, 422, 500, 503)}
