"""The web application's HTTP conventions, shared by its public and admin routes: errors as
JSON (``{"error": <code>, "detail": <message>}``, the router's own 404 and 405 included),
request bodies as bounded JSON objects, and the running :class:`~domain.App` of a request.

Split from :mod:`domain.web` (which builds the application); needs the ``web`` extra.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from .app import App

__all__ = ["MAX_BODY", "BadRequest", "Handler", "error", "http_error", "json_object", "running_app"]

MAX_BODY = 16 * 1024
logger = logging.getLogger("domain.web")
Handler = Callable[[Request], Awaitable[Response]]


def error(
    status: int, code: str, detail: str, *, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def running_app(request: Request) -> App:
    """The :class:`~domain.App` the lifespan runs (``app.state.domain``)."""
    app: App = request.app.state.domain
    return app


async def http_error(request: Request, exc: Exception) -> Response:
    """The router's 404 and 405 (and any other ``HTTPException``) as JSON errors too."""
    assert isinstance(exc, HTTPException)
    method, path = request.method, request.url.path
    if exc.status_code == 404:
        return error(404, "not_found", f"no route for {method} {path}")
    if exc.status_code == 405:
        allow = (exc.headers or {}).get("Allow", "")
        allowed = sorted(m for m in allow.split(", ") if m and m != "HEAD")
        detail = f"{method} is not allowed on {path}; use {' or '.join(allowed)}"
        return error(405, "method_not_allowed", detail, headers=exc.headers)
    return error(exc.status_code, "http_error", exc.detail, headers=exc.headers)


class BadRequest(Exception):
    """A request the client must change: a 400 unless *status* says otherwise."""

    def __init__(self, detail: str, *, status: int = 400, code: str = "bad_request") -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code

    def response(self) -> JSONResponse:
        return error(self.status, self.code, self.detail)


async def json_object(request: Request) -> dict[str, Any]:
    """The request's body, a JSON object of at most :data:`MAX_BODY` bytes.

    :raises BadRequest: for a larger body (a 413, read no further than the limit), a body
        that is not JSON, or JSON that is not an object
    """
    chunks, size = [], 0
    try:
        async for chunk in request.stream():  # stop at the limit, not after the whole body
            size += len(chunk)
            if size > MAX_BODY:
                raise BadRequest(
                    f"the body is over {MAX_BODY} bytes; send a smaller JSON object",
                    status=413,
                    code="payload_too_large",
                )
            chunks.append(chunk)
    except ClientDisconnect:  # nobody reads the answer; uvicorn would log a traceback
        logger.info(
            "the client hung up while sending the body of %s %s", request.method, request.url.path
        )
        raise BadRequest("the client hung up before the end of the body") from None
    body = b"".join(chunks)
    try:
        data = json.loads(body or b"null")
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data
