"""``GET /`` (the web page) and ``GET /audio/{id}`` (the file of an indexed clip, ``Range`` requests work)."""

from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse

from mlatr.serve.api_errors import ApiError, short
from mlatr.serve.clip_files import ClipRoots, confined_file
from mlatr.serve.live_index import LiveIndex
from mlatr.serve.schemas import ERRORS

STATIC = Path(__file__).resolve().parent / "static"

#: Content types of the audio files the page may play (others are served as octet-stream).
AUDIO_TYPES = {".wav": "audio/wav", ".flac": "audio/flac", ".ogg": "audio/ogg", ".oga": "audio/ogg",
               ".opus": "audio/ogg", ".mp3": "audio/mpeg", ".m4a": "audio/mp4", ".aif": "audio/aiff",
               ".aiff": "audio/aiff", ".webm": "audio/webm"}


def add_clip_routes(app: FastAPI, live: LiveIndex, allow_roots: Sequence[str] = ()) -> None:
    """Add the page and the clips' audio files of ``live`` to ``app``: a clip's file is served only when
    it is a regular file inside the library roots (:mod:`mlatr.serve.clip_files`; ``allow_roots``, when given,
    are the roots)."""
    clip_roots = ClipRoots(allow_roots)

    @app.get("/", include_in_schema=False)
    def page():
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/audio/{clip_id:path}", responses={200: {"content": {"audio/*": {}}}, **ERRORS},
             response_class=FileResponse)
    def audio(clip_id: str):
        """The audio file of the indexed clip ``clip_id`` (ids are looked up, never joined to a path)."""
        snap = live.current()
        row = snap.rows.get(clip_id)
        if row is None:
            raise ApiError(404, f"no clip {short(clip_id)} in the index")
        path = confined_file(snap.index.paths[row], clip_roots.roots(snap.index.paths))
        if path is None:  # the same answer for gone, not a regular file, or outside the library
            raise ApiError(404, f"the audio file of clip {short(clip_id)} is not on the server")
        return FileResponse(path, media_type=AUDIO_TYPES.get(path.suffix.lower(), "application/octet-stream"))
