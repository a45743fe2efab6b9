"""``GET /health`` (what is served, the limits) and ``POST /reload`` (read the index file again)."""

from collections.abc import Callable

from fastapi import FastAPI

from mlatr.errors import MlatrError
from mlatr.languages import ALIASES, LANGUAGE_NAMES
from mlatr.serve.api_errors import ApiError, hide_paths
from mlatr.serve.live_index import LiveIndex
from mlatr.serve.request_limits import Limits
from mlatr.serve.schemas import ERRORS, Health, Reloaded

#: ISO 639-3 -> ISO 639-1, for the page (it preselects the browser's language).
ISO_639_1 = {three: two for two, three in ALIASES.items() if len(two) == 2}


def add_status_routes(app: FastAPI, live: LiveIndex, limits: Limits, worker: int | None = None,
                      after_reload: Callable[[], None] | None = None) -> None:
    """Add the health report and the reload of ``live`` to ``app``; ``worker``: this process's number under
    ``mlatr serve --workers``, ``after_reload``: called after a reload by ``POST /reload`` worked (to have the
    other workers reload, :func:`mlatr.serve.workers.tell_siblings`)."""

    @app.get("/health", response_model=Health, responses=ERRORS)
    def health():
        snap = live.current()
        index = snap.index
        text_cfg = (index.meta.get("model_config") or {}).get("text_encoder") or {}
        choices = snap.languages.choices()
        return {"status": "ok", "index": live.path.name, "clips": len(index), "captions": len(index.caption_text),
                "text_encoder": text_cfg.get("name"),
                "languages": [{"code": c, "name": LANGUAGE_NAMES[c], "alias": ISO_639_1.get(c)}
                              for c in choices],
                "translates": index.translates(choices), "caption_language": index.caption_language(),
                "language_required": snap.languages.required, "max_k": limits.max_k,
                "max_query_chars": limits.max_query_chars, "max_upload_bytes": limits.max_upload_bytes,
                "loaded_at": snap.loaded_at, "reloads": live.reloads,
                "reload_error": None if live.error is None else hide_paths(live.error), "worker": worker}

    @app.post("/reload", response_model=Reloaded, responses=ERRORS)
    def reload():
        """Read the index file again; on failure the previous index stays in service."""
        before = live.snapshot
        try:
            snap = live.reload()
        except MlatrError as exc:
            if live.snapshot is None:
                raise ApiError(503, f"reload failed: {hide_paths(str(exc))}") from None
            raise ApiError(500, f"reload failed: {hide_paths(str(exc))}; still serving the previous index "
                                f"({len(live.snapshot.index)} clips)") from None
        if after_reload is not None:
            after_reload()
        return {"status": "ok", "clips": len(snap.index), "before": len(before.index) if before else None}
