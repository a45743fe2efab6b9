"""``GET /search`` (text in a language) and ``POST /search/audio`` (a sound): ranked clips as JSON."""

# no "from __future__ import annotations": FastAPI reads the routes' annotations at run time, and some
# name the limits of add_search_routes's closure

import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Literal

from fastapi import FastAPI, File, Query, Request, UploadFile
from fastapi.responses import JSONResponse

from mlatr.audio.io import audio_duration
from mlatr.errors import MlatrError
from mlatr.search.filters import MAX_FILTER_CHARS, parse_filter
from mlatr.search.fusion import RANKS
from mlatr.search.query import text_query
from mlatr.search.query_translation import TRANSLATE
from mlatr.serve.api_errors import ApiError, hide_paths, short
from mlatr.serve.batching import TextBatcher
from mlatr.serve.live_index import LiveIndex
from mlatr.serve.request_limits import Limits
from mlatr.serve.results import caption_result, clip_result
from mlatr.serve.schemas import ERRORS, WHERE, AudioSearchResponse, TextSearchResponse


def add_search_routes(app: FastAPI, live: LiveIndex, limits: Limits, batcher: TextBatcher) -> None:
    """Add the two searches over ``live`` to ``app``."""

    @app.get("/search", response_model=TextSearchResponse, responses=ERRORS)
    async def search(request: Request,
               q: Annotated[str, Query(max_length=limits.max_query_chars, description="text query")],
               lang: Annotated[str | None, Query(max_length=16, description="language of q (ISO 639-3 or "
                                                 "639-1); may be left out when the model does not read it "
                                                 "(GET /health: language_required)")] = None,
               k: Annotated[int, Query(ge=1, le=limits.max_k, description="number of results")] = 10,
               rank: Annotated[Literal[RANKS],
                               Query(description="hybrid: sound + captions + keywords; audio; captions")] = "hybrid",
               min_relevance: Annotated[float | None, Query(ge=0.0, le=1.0, description="the probability that the "
                                                            "library holds a relevant clip below which the answer "
                                                            "says nothing_relevant (default: the fitted "
                                                            "threshold)")] = None,
               where: Annotated[str | None, Query(max_length=MAX_FILTER_CHARS, description=WHERE)] = None,
               include_silent: Annotated[bool, Query(description="silent clips may be returned (left out by "
                                                                 "default)")] = False,
               translate: Annotated[Literal[TRANSLATE], Query(description="auto: a query in a language other than "
                                                              "the captions' is also read through its translation "
                                                              "into theirs where a translator (Apertium) is "
                                                              "installed; off: never")] = "auto"):
        t0 = time.perf_counter()
        snap = live.current()
        try:  # the one check of the query (a blank lang: left out)
            query = text_query(q, lang if lang and lang.strip() else None, k, rank, snap.languages,
                               min_relevance=min_relevance, where=where, include_silent=include_silent,
                               translate=translate)
        except MlatrError as exc:
            raise ApiError(400, str(exc)) from None
        hits = await batcher.search_async(snap, query)  # embedded and searched with concurrent queries
        root = request.scope.get("root_path", "")
        results = [clip_result(snap, h, query.lang, root) for h in hits]
        # built to TextSearchResponse field by field: sent as it is, not validated against it again
        return JSONResponse({"query": q, "lang": query.lang, "k": k, "rank": rank,
                             "took_ms": (time.perf_counter() - t0) * 1e3, **hits.answer(),
                             "translated_query": hits.translated_query, "results": results})

    @app.post("/search/audio", response_model=AudioSearchResponse, responses=ERRORS)
    def search_by_sound(request: Request,
                        file: Annotated[UploadFile, File(description="a sound file (WAV, FLAC, OGG, MP3, ...)")],
                        k: Annotated[int, Query(ge=1, le=limits.max_k, description="number of results")] = 10,
                        min_relevance: Annotated[float | None, Query(ge=0.0, le=1.0)] = None,
                        where: Annotated[str | None, Query(max_length=MAX_FILTER_CHARS, description=WHERE)] = None):
        t0 = time.perf_counter()
        snap = live.current()
        try:
            allowed = snap.index.allowed(parse_filter(where))
        except MlatrError as exc:  # the filter's error, or one of the index's facets naming its file
            raise ApiError(400, hide_paths(str(exc))) from None
        name = file.filename or "upload"
        with tempfile.NamedTemporaryFile(prefix="mlatr-upload-", suffix=Path(name).suffix[:8]) as tmp:
            shutil.copyfileobj(file.file, tmp)
            tmp.flush()
            if tmp.tell() == 0:
                raise ApiError(400, f"the uploaded file {short(name)} is empty")
            if audio_duration(tmp.name) is None:
                raise ApiError(415, f"{short(name)} is not a sound file this server can read "
                                    "(WAV, FLAC, OGG/Vorbis/Opus, MP3, AIFF)")
            try:
                wave = snap.index.query_waveform(tmp.name)  # decoded (bounded) outside the model lock
                with live.lock:  # the encoder alone: ranking and the same-audio check read files, not the model
                    vec = snap.index.embed_sound(wave)
                clips = snap.index.search_encoded_audio(wave, vec, k, min_relevance, allowed)
            except MlatrError as exc:
                raise ApiError(400, hide_paths(str(exc).replace(tmp.name, short(name)))) from None
        root = request.scope.get("root_path", "")
        return {"filename": name, "k": k, **clips.answer(),
                "results": [clip_result(snap, h, None, root) for h in clips],
                "captions": [caption_result(h, root) for h in clips.caption_hits],
                "took_ms": (time.perf_counter() - t0) * 1e3}
