"""The web application's admin routes (``/admin/...``): the failure table and running a job
now, behind a bearer token. :func:`domain.web.create_app` adds them only when an admin token
is configured.

Split from :mod:`domain.web`; needs the ``web`` extra.
"""

from __future__ import annotations

import secrets
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from eventbus import FailureRecord, FailureStatus
from scheduler import JobLookupError, RunRecord

from ._web_http import Handler, error, running_app

__all__ = ["MAX_FAILURES", "admin_routes", "list_failures", "run_task"]

MAX_FAILURES = 500


def admin_routes(token: str) -> list[Route]:
    """``GET /admin/failures`` and ``POST /admin/tasks/{name}/run``, each requiring *token*."""
    return [
        Route("/admin/failures", _admin(token, list_failures), methods=["GET"]),
        Route("/admin/tasks/{name}/run", _admin(token, run_task), methods=["POST"]),
    ]


def _admin(token: str, handler: Handler) -> Handler:
    """Require ``Authorization: Bearer <token>``, compared in constant time."""
    expected = token.encode()

    async def endpoint(request: Request) -> Response:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.encode(), expected):
            return error(
                401,
                "unauthorized",
                "send 'Authorization: Bearer <admin token>'",
                headers={"WWW-Authenticate": 'Bearer realm="admin"'},
            )
        return await handler(request)

    endpoint.__name__ = handler.__name__
    return endpoint


async def list_failures(request: Request) -> Response:
    params = request.query_params
    statuses = [s.value for s in FailureStatus]
    status, limit = params.get("status"), params.get("limit", "50")
    if status is not None and status not in statuses:
        shown = ", ".join(map(repr, statuses))
        return error(400, "bad_request", f"'status' must be one of {shown}, not {status!r}")
    digits = limit.isascii() and limit.isdigit() and len(limit) < 5  # int() of 5k digits raises
    if not (digits and 1 <= int(limit) <= MAX_FAILURES):
        detail = f"'limit' must be an integer from 1 to {MAX_FAILURES}, not {limit!r}"
        return error(400, "bad_request", detail)
    store = running_app(request).bus.failures
    await store.flush()  # what the bus recorded so far is listed
    records = await store.query(
        status=None if status is None else FailureStatus(status),
        event=params.get("event"),
        listener=params.get("listener"),
        limit=int(limit),
    )
    return JSONResponse({"failures": [_failure_json(r) for r in records]})


def _failure_json(r: FailureRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "event_id": r.event_id,
        "event_name": r.event_name,
        "listener": r.listener,
        "error_type": r.error_type,
        "message": r.message,
        "attempts": r.attempts,
        "status": str(r.status),
        "payload": r.payload,
        "first_failed_at": r.first_failed_at.isoformat(),
        "last_failed_at": r.last_failed_at.isoformat(),
    }


async def run_task(request: Request) -> Response:
    name = request.path_params["name"]
    try:
        run = await running_app(request).scheduler.trigger(name)
    except JobLookupError as exc:
        return error(404, "unknown_task", str(exc))
    return JSONResponse(_run_json(run))


def _run_json(run: RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "task_name": run.task_name,
        "trigger": run.trigger,
        "status": run.status,
        "started_at": run.started_at.isoformat(),
        "finished_at": None if run.finished_at is None else run.finished_at.isoformat(),
        "error": run.error,
        "trace_id": run.trace_id,
    }
