"""``/docs``: the API's own interactive page (Swagger UI 5, which reads FastAPI's OpenAPI 3.1 schema), its
assets served from the ``fastapi-offline`` wheel so that it works offline (FastAPI's default page loads
Swagger UI from a CDN, which a server on a closed network, or a browser test, cannot reach)."""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.staticfiles import StaticFiles

ASSETS = Path(fastapi_offline.__file__).resolve().parent / "static"


def register_api_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` over ``app``'s ``/openapi.json``, its assets under ``/docs-assets``."""
    app.mount("/docs-assets", StaticFiles(directory=ASSETS), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs():
        return get_swagger_ui_html(openapi_url="openapi.json", title=f"{app.title}: API",
                                   swagger_js_url="docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="docs-assets/swagger-ui.css", swagger_favicon_url="data:,")
