"""The HTTP API and the web page of ``mlatr serve`` (FastAPI).

=====================  ===========================================================================
``GET /``              the web page (``static/``: one HTML file, a script, a style sheet)
``GET /search``        ``q``, ``lang`` (ISO 639-3 or 639-1; may be left out when the model does not
                       read it, see :mod:`mlatr.search.query`), ``k`` -> ranked clips
``POST /search/audio`` multipart field ``file`` (a sound), ``k`` -> ranked clips and captions
``GET /audio/{id}``    the file of an indexed clip inside the library (``Range`` works); nothing else
``GET /health``        status, clip count, the languages a query may use, the limits
``POST /reload``       read the index file again (``mlatr index build --add`` on a served index)
``GET /openapi.json``  the OpenAPI schema
=====================  ===========================================================================

Every error is a JSON body ``{"error": message, "status": code}``: 400 (a query the model cannot take:
blank, unknown or unsupported language), 404 (no such clip or route), 413 (upload over the limit), 415
(upload that is not audio), 422 (a missing or out-of-range parameter), 500 (a bug or a failed reload:
the server keeps running), 503 (no index could be loaded). The searches themselves are
:mod:`mlatr.search`'s. The routes live by group in :mod:`~mlatr.serve.search_routes`,
:mod:`~mlatr.serve.clip_routes` and :mod:`~mlatr.serve.status_routes`; the JSON shapes in
:mod:`~mlatr.serve.schemas`, the error bodies in :mod:`~mlatr.serve.api_errors`.
"""

from collections.abc import Callable, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from mlatr.serve.api_docs import register_api_docs
from mlatr.serve.api_errors import add_error_handlers
from mlatr.serve.batching import TextBatcher
from mlatr.serve.clip_routes import STATIC, add_clip_routes
from mlatr.serve.exposure import LOOPBACK_HOSTS, ExposureGuard
from mlatr.serve.live_index import LiveIndex
from mlatr.serve.request_limits import Limits, UploadLimit
from mlatr.serve.search_routes import add_search_routes
from mlatr.serve.status_routes import add_status_routes
from mlatr.version import __version__

__all__ = ["Limits", "create_app"]


def create_app(live: LiveIndex, limits: Limits | None = None, watch_seconds: float = 0.0,
               allow_roots: Sequence[str] = (), allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
               token: str | None = None, worker: int | None = None,
               after_reload: Callable[[], None] | None = None) -> FastAPI:
    """The application over ``live`` (loaded or not: an unloaded index answers 503 until a reload works);
    ``watch_seconds > 0`` polls the index file while the application runs; ``limits`` default to
    :class:`Limits`'s; ``allow_roots``: the only directories whose files ``GET /audio`` serves (default: those
    of the clips the index recorded at start-up; :mod:`mlatr.serve.clip_files`); ``allowed_hosts`` (``*``:
    any) and ``token`` (``None``: no authentication) are :class:`~mlatr.serve.exposure.ExposureGuard`'s;
    ``worker`` and ``after_reload``: :func:`~mlatr.serve.status_routes.add_status_routes`'s (``--workers``)."""
    limits = limits or Limits()

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
    add_error_handlers(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    register_api_docs(app)
    add_clip_routes(app, live, limits, allow_roots)
    add_search_routes(app, live, limits, TextBatcher(live))
    add_status_routes(app, live, limits, worker, after_reload)
    app.add_middleware(ExposureGuard, allowed_hosts=allowed_hosts, token=token)  # the outermost: runs first
    return app
