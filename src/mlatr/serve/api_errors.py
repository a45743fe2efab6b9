"""Every error of the HTTP API as one JSON body ``{"error": message, "status": code}``.

Routes raise :class:`ApiError`; :func:`add_error_handlers` turns it, FastAPI's own errors (404 / 405,
validation 422), :class:`~mlatr.serve.live_index.IndexUnavailable` (503), :class:`~mlatr.errors.MlatrError`
(400) and any other exception (500, no traceback in the body) into that body. A message made from an error of
the server's own files (a damaged index, a model file, a library file) names each file by its last two path
parts only (:func:`hide_paths`): where the server keeps its files is not the client's business.
"""

import re

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from mlatr.errors import MlatrError
from mlatr.serve.live_index import IndexUnavailable


class ApiError(Exception):
    """An error answered as ``{"error": message, "status": status}``."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def error_response(status: int, message: str) -> JSONResponse:
    """The JSON error body with its status code."""
    return JSONResponse({"error": message, "status": status}, status_code=status)


#: An absolute path in a message: a slash at the start or after a space, quote, bracket or ``=``, then anything
#: up to a space, quote, bracket, comma or colon (a URL's ``//`` is not one: its slash follows a colon).
_ABSOLUTE_PATH = re.compile(r"(?<![^\s'\"(\[=])/[^\s'\"()\[\],:]+")


def hide_paths(message: str) -> str:
    """``message`` with each absolute path cut to ``…/`` and its last two parts (``/srv/lib/sounds.idx/index.json``
    -> ``…/sounds.idx/index.json``): the file is still recognisable, the machine's layout is not shown."""
    def cut(m: re.Match) -> str:
        parts = m.group().rstrip("/").split("/")
        return m.group() if len(parts) <= 3 else "…/" + "/".join(parts[-2:])

    return _ABSOLUTE_PATH.sub(cut, message)


def short(text: str, n: int = 80) -> str:
    """``text`` quoted for a message, cut to ``n`` characters."""
    return repr(text if len(text) <= n else text[:n] + "...")


def add_error_handlers(app: FastAPI) -> None:
    """Answer every exception a route can raise with the JSON error body."""

    @app.exception_handler(ApiError)
    async def api_error(_request, exc: ApiError):
        return error_response(exc.status, exc.message)

    @app.exception_handler(HTTPException)
    async def http_error(request, exc: HTTPException):
        message = str(exc.detail)
        if exc.status_code in (404, 405):
            message = f"{message}: {request.method} {short(request.url.path)}"
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
        return error_response(503, hide_paths(str(exc)))

    @app.exception_handler(MlatrError)
    async def user_error(_request, exc: MlatrError):
        return error_response(400, hide_paths(str(exc)))

    @app.exception_handler(Exception)
    async def bug(_request, _exc: Exception):  # the traceback goes to the server's log (uvicorn), not the client
        return error_response(500, "internal error; the server's log has the details")
