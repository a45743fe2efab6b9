"""``/docs``: the API's own interactive page (Swagger UI 5, which reads FastAPI's OpenAPI 3.1 schema), its
assets served from the ``fastapi-offline`` wheel so that it works offline (FastAPI's default page loads
Swagger UI from a CDN, which a server on a closed network, or a browser test, cannot reach)."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"


def register_api_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` over ``app``'s ``/openapi.json``, its assets under ``/docs-assets``."""
    app.mount("/docs-assets", StaticFiles(directory=ASSETS), name="docs-assets")

    page = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{app.title}: API</title>"
            "<link rel='stylesheet' href='docs-assets/swagger-ui.css'></head><body><div id='swagger-ui'></div>"
            "<script src='docs-assets/swagger-ui-bundle.js'></script><script src='static/api-docs.js'></script>"
            "</body></html>")  # no inline script: the server's CSP allows this origin's files only

    @app.get("/docs", include_in_schema=False)
    def docs():
        return HTMLResponse(page)
