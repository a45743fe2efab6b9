"""The HTTP API and the web page of ``mlatr serve`` (FastAPI).

=====================  ===========================================================================
``GET /``              the web page (``static/``: one HTML file, a script, a style sheet)
``GET /search``        ``q``, ``lang`` (ISO 639-3 or 639-1; may be left out when the model does not
                       read it, see :mod:`mlatr.search.query_language`), ``k`` -> ranked clips
``POST /search/audio`` multipart field ``file`` (a sound), ``k`` -> ranked clips and captions
``GET /audio/{id}``    the file of an indexed clip (``Range`` requests work); nothing else is served
``GET /health``        status, clip count, the languages a query may use, the limits
``POST /reload``       read the index file again (``mlatr index build --add`` on a served index)
``GET /openapi.json``  the OpenAPI schema
=====================  ===========================================================================

Every error is a JSON body ``{"error": message, "status": code}``: 400 (a query the model cannot take:
blank, unknown or unsupported language), 404 (no such clip or route), 413 (upload over the limit), 415
(upload that is not audio), 422 (a missing or out-of-range parameter), 500 (a bug or a failed reload:
the server keeps running), 503 (no index could be loaded). The searches themselves are
:mod:`mlatr.search`'s.
"""

# no "from __future__ import annotations": FastAPI reads the routes' annotations at run time, and some
# name the limits of create_app's closure

import os
import shutil
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

from fastapi import FastAPI, File, Query, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from mlatr import __version__
from mlatr.audio.io import audio_duration
from mlatr.errors import MlatrError
from mlatr.languages import ALIASES, LANGUAGE_NAMES, normalize
from mlatr.search.search import search_audio, search_text
from mlatr.serve.api_docs import register_api_docs
from mlatr.serve.live_index import IndexUnavailable, LiveIndex
from mlatr.serve.results import caption_result, clip_result
from mlatr.serve.routes_clips import register_clip_routes
from mlatr.serve.upload_limit import UploadLimit

STATIC = Path(__file__).resolve().parent / "static"

#: ISO 639-3 -> ISO 639-1, for the page (it preselects the browser's language).
ISO_639_1 = {three: two for two, three in ALIASES.items() if len(two) == 2}

#: Content types of the audio files the page may play (others are served as octet-stream).
AUDIO_TYPES = {".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".oga": "audio/ogg",
               ".opus": "audio/ogg", ".mp3": "audio/mpeg", ".m4a": "audio/mp4", ".aif": "audio/aiff",
               ".aiff": "audio/aiff", ".webm": "audio/webm"}


@dataclass(frozen=True)
class Limits:
    """What one request may ask for."""

    max_k: int = 100
    max_query_chars: int = 1000
    max_upload_bytes: int = 20 * 2**20


class ApiError(Exception):
    """An error answered as ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


# ---- response schemas (OpenAPI) --------------------------------------------------------------------
class Evidence(BaseModel):
    source: Literal["caption", "keyword", "sound"]  # what ranked the clip (mlatr.search.hybrid)
    score: float | None  # caption / sound: cosine; keyword: BM25
    rank: int  # the clip's rank in that source
    text: str | None = None  # the matched caption (caption, keyword)
    lang: str | None = None  # its language
    terms: list[str] | None = None  # the query's words found in it (keyword)


class ClipResult(BaseModel):
    rank: int
    id: str
    score: float | None  # cosine similarity (hybrid text search: the fused score); null if not finite
    caption: str | None
    caption_lang: str | None
    duration: float | None  # seconds, from the file's header; null if unreadable
    audio_url: str
    evidence: list[Evidence] = []


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
    results: list[ClipResult]


class AudioSearchResponse(BaseModel):
    filename: str
    k: int
    took_ms: float
    results: list[ClipResult]
    captions: list[CaptionResult]


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
    language_required: bool
    max_k: int
    max_query_chars: int
    max_upload_bytes: int
    loaded_at: float
    reloads: int
    reload_error: str | None


class Reloaded(BaseModel):
    status: str
    clips: int
    before: int | None


class ErrorBody(BaseModel):
    error: str
    status: int


ERRORS = {code: {"model": ErrorBody} for code in (400, 404, 413, 415, 422, 500, 503)}


def error_response(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message, "status": status}, status_code=status)


def _short(text: str, n: int = 80) -> str:
    return repr(text if len(text) <= n else text[:n] + "...")


def create_app(live: LiveIndex, limits: Limits = Limits(), watch_seconds: float = 0.0) -> FastAPI:
    """The application over ``live`` (loaded or not: an unloaded index answers 503 until a reload works);
    ``watch_seconds > 0`` polls the index file while the application runs."""

    @asynccontextmanager
    async def lifespan(_app):
        live.start_watch(watch_seconds)
        try:
            yield
        finally:
            live.stop_watch()

    app = FastAPI(title="mlatr sound search", version=__version__, lifespan=lifespan, docs_url=None,
                  redoc_url=None, description="Search an mlatr index by text in any language or by sound.")
    app.add_middleware(UploadLimit, limit=limits.max_upload_bytes, paths=("/search/audio",))
    _add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    register_api_docs(app)
    register_clip_routes(app, live, limits, ApiError, ERRORS)

    def query_language(snap, lang: str | None) -> str | None:
        if lang is None or not lang.strip():
            return None  # encode_query_text refuses it when the model reads the language
        try:
            code = normalize(lang)
        except ValueError as exc:
            raise ApiError(400, f"lang: {exc}") from None
        known = snap.languages.known
        if known is not None and code not in known:
            raise ApiError(400, f"lang: this index's text encoder does not take {code!r} "
                                f"(it takes {', '.join(known)})")
        return code

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/search", response_model=TextSearchResponse, responses=ERRORS)
    def search(request: Request,
               q: Annotated[str, Query(max_length=limits.max_query_chars, description="text query")],
               lang: Annotated[str | None, Query(max_length=16, description="language of q (ISO 639-3 or "
                                                 "639-1); may be left out when the model does not read it "
                                                 "(GET /health: language_required)")] = None,
               k: Annotated[int, Query(ge=1, le=limits.max_k, description="number of results")] = 10,
               rank: Annotated[Literal["audio", "captions", "hybrid"],
                               Query(description="hybrid: sound + captions + keywords; audio; captions")] = "hybrid"):
        t0 = time.perf_counter()
        snap = live.current()
        code = query_language(snap, lang)
        if not q.strip():
            raise ApiError(400, "q: the query is empty")
        with live.lock:
            hits = search_text(snap.index, q, code, k, rank)
            live.bound_text_cache(snap)
        root = request.scope.get("root_path", "")
        return {"query": q, "lang": code, "k": k, "rank": rank,
                "results": [clip_result(snap, h, code, root) for h in hits],
                "took_ms": (time.perf_counter() - t0) * 1e3}

    @app.post("/search/audio", response_model=AudioSearchResponse, responses=ERRORS)
    def search_by_sound(request: Request,
                        file: Annotated[UploadFile, File(description="a sound file (WAV, FLAC, OGG, MP3, ...)")],
                        k: Annotated[int, Query(ge=1, le=limits.max_k, description="number of results")] = 10):
        t0 = time.perf_counter()
        snap = live.current()
        name = file.filename or "upload"
        with tempfile.NamedTemporaryFile(prefix="mlatr-upload-", suffix=Path(name).suffix[:8]) as tmp:
            shutil.copyfileobj(file.file, tmp)
            tmp.flush()
            if tmp.tell() == 0:
                raise ApiError(400, f"the uploaded file {_short(name)} is empty")
            if audio_duration(tmp.name) is None:
                raise ApiError(415, f"{_short(name)} is not a sound file this server can read "
                                    "(WAV, FLAC, OGG/Vorbis/Opus, MP3, AIFF)")
            try:
                with live.lock:
                    clips, captions = search_audio(snap.index, tmp.name, k)
            except MlatrError as exc:
                raise ApiError(400, str(exc).replace(tmp.name, _short(name))) from None
        root = request.scope.get("root_path", "")
        return {"filename": name, "k": k, "results": [clip_result(snap, h, None, root) for h in clips],
                "captions": [caption_result(h, root) for h in captions], "took_ms": (time.perf_counter() - t0) * 1e3}

    @app.get("/audio/{clip_id:path}", responses={200: {"content": {"audio/*": {}}}, **ERRORS},
             response_class=FileResponse)
    def audio(clip_id: str):
        """The audio file of the indexed clip ``clip_id`` (ids are looked up, never joined to a path)."""
        snap = live.current()
        row = snap.rows.get(clip_id)
        if row is None:
            raise ApiError(404, f"no clip {_short(clip_id)} in the index")
        path = snap.index.paths[row]
        if not os.path.isfile(path):
            raise ApiError(404, f"the audio file of clip {_short(clip_id)} is no longer on the server")
        return FileResponse(path, media_type=AUDIO_TYPES.get(Path(path).suffix.lower(), "application/octet-stream"))

    @app.get("/health", response_model=Health, responses=ERRORS)
    def health():
        snap = live.current()
        index = snap.index
        text_cfg = (index.meta.get("model_config") or {}).get("text_encoder") or {}
        return {"status": "ok", "index": live.path.name, "clips": len(index), "captions": len(index.caption_text),
                "text_encoder": text_cfg.get("name"),
                "languages": [{"code": c, "name": LANGUAGE_NAMES[c], "alias": ISO_639_1.get(c)}
                              for c in snap.languages.choices()],
                "language_required": snap.languages.required, "max_k": limits.max_k,
                "max_query_chars": limits.max_query_chars, "max_upload_bytes": limits.max_upload_bytes,
                "loaded_at": snap.loaded_at, "reloads": live.reloads, "reload_error": live.error}

    @app.post("/reload", response_model=Reloaded, responses=ERRORS)
    def reload():
        """Read the index file again; on failure the previous index stays in service."""
        before = live.snapshot
        try:
            snap = live.reload()
        except MlatrError as exc:
            if live.snapshot is None:
                raise ApiError(503, f"reload failed: {exc}") from None
            raise ApiError(500, f"reload failed: {exc}; still serving the previous index "
                                f"({len(live.snapshot.index)} clips)") from None
        return {"status": "ok", "clips": len(snap.index), "before": len(before.index) if before else None}

    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(_request, exc: ApiError):
        return error_response(exc.status, exc.message)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc: HTTPException):
        message = str(exc.detail)
        if exc.status_code in (404, 405):
            message = f"{message}: {request.method} {_short(request.url.path)}"
        return error_response(exc.status_code, message)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request, exc: RequestValidationError):
        parts = []
        for err in exc.errors():
            where = ".".join(str(x) for x in err.get("loc", ())[1:]) or "request"
            parts.append(f"{where}: {err.get('msg', 'invalid')}")
        return error_response(422, "; ".join(parts))

    @app.exception_handler(IndexUnavailable)
    async def unavailable(_request, exc: IndexUnavailable):
        return error_response(503, str(exc))

    @app.exception_handler(MlatrError)
    async def user_error(_request, exc: MlatrError):
        return error_response(400, str(exc))

    @app.exception_handler(Exception)
    async def bug(_request, exc: Exception):
        return error_response(500, f"internal error ({type(exc).__name__}); the server's log has the details")
