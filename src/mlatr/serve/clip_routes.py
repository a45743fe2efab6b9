"""Routes about the indexed clips: the web page, a clip's audio file, its waveform and "more like this".

- ``GET /``: the web page;
- ``GET /audio/{id}``: the file of an indexed clip (``Range`` requests work), served only when it is a
  regular file inside the library roots (:mod:`mlatr.serve.clip_files`);
- ``GET /clips/waveform/{id}?bins=N``: ``{"id", "duration", "peaks": [N floats in 0..1]}``, the largest
  absolute sample of each of ``N`` equal slices of the clip, divided by the clip's largest (the result card's
  thumbnail; read at the index's sample rate, cached per file and modification time; only from a file
  ``GET /audio`` would serve);
- ``GET /clips/similar/{id}?k=K&where=FILTER``: sound-to-sound from the clip's stored embedding (itself left out)
  and the captions nearest to it, as ``POST /search/audio`` answers, among the clips ``where`` allows.

(No ``from __future__ import annotations`` here: FastAPI must read the routes' annotations, which refer to
the ``limits`` of :func:`add_clip_routes`, as objects.)
"""

import os
import time
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse

from mlatr.audio.integrity import peak_envelope
from mlatr.errors import MlatrError
from mlatr.search.filters import MAX_FILTER_CHARS
from mlatr.serve.api_errors import ApiError, hide_paths, short
from mlatr.serve.clip_files import ClipRoots, confined_file
from mlatr.serve.live_index import LiveIndex
from mlatr.serve.request_limits import Limits
from mlatr.serve.results import caption_result, clip_result
from mlatr.serve.schemas import ERRORS, WHERE, SimilarResponse, Waveform

STATIC = Path(__file__).resolve().parent / "static"

#: Content types of the audio files the page may play (others are served as octet-stream).
AUDIO_TYPES = {".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".oga": "audio/ogg",
               ".opus": "audio/ogg", ".mp3": "audio/mpeg", ".m4a": "audio/mp4", ".aif": "audio/aiff",
               ".aiff": "audio/aiff", ".webm": "audio/webm"}


@lru_cache(maxsize=512)
def waveform_peaks(path: str, mtime_ns: int, bins: int) -> tuple[float, tuple[float, ...]]:
    """``(duration in seconds, peaks)`` of the file at ``path`` (``mtime_ns``: part of the cache key), read block
    by block at the file's own rate: a library file of hours costs a pass, never its decoded length in memory."""
    seconds, peaks = peak_envelope(path, bins)
    top = peaks.max() if peaks.size and peaks.max() > 0 else 1.0
    return seconds, tuple(float(x) for x in peaks / top)


def add_clip_routes(app: FastAPI, live: LiveIndex, limits: Limits, allow_roots: Sequence[str] = ()) -> None:
    """Add the routes of the module docstring over ``live`` to ``app`` (``allow_roots``, when given, are the
    library roots a clip's file must lie in)."""
    clip_roots = ClipRoots(allow_roots)

    def clip_row(snap, clip_id: str) -> int:
        """The row of ``clip_id`` (ids are looked up, never joined to a path), or a 404."""
        row = snap.rows.get(clip_id)
        if row is None:
            raise ApiError(404, f"no clip {short(clip_id)} in the index")
        return row

    def clip_file(snap, clip_id: str) -> Path:
        """The clip's audio file when it may be served; the same 404 for gone, not a regular file, or outside
        the library."""
        path = confined_file(snap.index.paths[clip_row(snap, clip_id)], clip_roots.roots(snap.index.paths))
        if path is None:
            raise ApiError(404, f"the audio file of clip {short(clip_id)} is not on the server")
        return path

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/audio/{clip_id:path}", responses={200: {"content": {"audio/*": {}}}, **ERRORS},
             response_class=FileResponse)
    def audio(clip_id: str):
        """The audio file of the indexed clip ``clip_id``."""
        path = clip_file(live.current(), clip_id)
        return FileResponse(path, media_type=AUDIO_TYPES.get(path.suffix.lower(), "application/octet-stream"))

    @app.get("/clips/waveform/{clip_id:path}", response_model=Waveform, responses=ERRORS)
    def waveform(clip_id: str, bins: Annotated[int, Query(ge=8, le=1000, description="number of peaks")] = 120):
        snap = live.current()
        path = clip_file(snap, clip_id)
        duration, peaks = waveform_peaks(str(path), os.stat(path).st_mtime_ns, bins)
        return {"id": clip_id, "duration": duration, "peaks": list(peaks)}

    @app.get("/clips/similar/{clip_id:path}", response_model=SimilarResponse, responses=ERRORS)
    def similar(request: Request, clip_id: str,
                k: Annotated[int, Query(ge=1, le=limits.max_k, description="number of results")] = 10,
                where: Annotated[str | None, Query(max_length=MAX_FILTER_CHARS, description=WHERE)] = None):
        t0 = time.perf_counter()
        snap = live.current()
        row = clip_row(snap, clip_id)
        try:  # no model call (a stored vector): not under the model lock
            clips = snap.index.search_similar(row, k, where)
        except MlatrError as exc:  # the filter's error, or one of the index's facets naming its file
            raise ApiError(400, hide_paths(str(exc))) from None
        root = request.scope.get("root_path", "")
        return {"id": clip_id, "k": k, **clips.answer(), "results": [clip_result(snap, h, None, root) for h in clips],
                "captions": [caption_result(h, root) for h in clips.caption_hits],
                "took_ms": (time.perf_counter() - t0) * 1e3}
