"""An ASGI application on top of the domain modules: what embedding looks like for real.

Needs the ``web`` extra (Starlette, uvicorn). The lifespan runs :meth:`App.embedded` (bus,
view window, scheduler, domain services) and, on shutdown, drains it: background listeners get
the bus's grace period, runs in progress the scheduler's, and pending counts are flushed.

=================================  ===========================================================
``POST /links``                    create a short link: ``{"url", "alias"?, "expires_in"?}``
``GET /{code}``                    302 to the target (the visit is counted through
                                   ``shortlink.visited``); 404 for unknown or expired codes
``GET /articles/{id}``             the article; records a view (viewer: a hash of the
                                   ``viewer`` cookie, else the client address) through
                                   ``article.viewed``
``POST /orders/{id}/pay``          emits ``order.paid`` from ``{"user_id", "amount"}`` (a
                                   positive decimal string, at most 2 places, below 10**12)
``GET /healthz``                   200 while the bus and the scheduler run, with statistics
                                   (bus, scheduler, and counters: losses of Redis data)
``GET /admin/failures``            the failure table (``status``, ``event``, ``listener``,
                                   ``limit``); bearer token
``POST /admin/tasks/{name}/run``   run a scheduled job now (same lock, run record); bearer token
``/ops/...``                       the operator console (HTML; see :mod:`domain.console`),
                                   when a console token is configured
=================================  ===========================================================

The admin routes exist only when an admin token is configured; without one they are 404. A
token is stripped of surrounding whitespace and must keep at least 16 characters
(:class:`~domain.AdminTokenError` otherwise). Ids beyond the signed 64-bit range are refused
(404 for an article, 400 for an order) before they reach SQL.
Errors are JSON: ``{"error": <code>, "detail": <message>}``, the router's own 404 and 405
included; a body over 16 KiB is a 413 (:mod:`domain._web_http`). The admin routes live in
:mod:`domain._web_admin`.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from sqlalchemy import select
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from eventbus.cli import InputError

from ._cli import check_database, check_reachable, check_redis_url, port, run_cli
from ._web_admin import admin_routes
from ._web_http import BadRequest, Handler, error, http_error, json_object, running_app
from .app import App
from .db import articles
from .events import ArticleViewed, OrderPaid
from .exceptions import (
    AdminTokenError,
    AliasTakenError,
    CodeSpaceExhaustedError,
    InvalidAliasError,
    InvalidUrlError,
    ReservedAliasError,
)
from .listeners import MAX_AMOUNT

__all__ = ["WebConfig", "create_app", "main"]

logger = logging.getLogger("domain.web")

MAX_ID = 2**63 - 1  # SQL BIGINT; a larger id raises OverflowError in the driver
MIN_ADMIN_TOKEN = 16
CENT = Decimal("0.01")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WebConfig:
    """What the web application needs; :meth:`from_env` reads it from the environment.

    :param db: the SQLite file of :meth:`App.embedded`
    :param redis_url: counters and locks in Redis (several replicas); ``None``: in process
    :param admin_token: bearer token of the ``/admin`` routes, stripped of surrounding
        whitespace; ``None`` or empty: no admin routes
    :raises AdminTokenError: for a token that is blank once stripped or shorter than 16
        characters
    :param viewer_cookie: the cookie that identifies a viewer for view counting
    :param public_url: base of the ``short_url`` in responses (default: the request's base URL)
    :param refill_on_start: top the code pool up at startup (the refill job runs daily)
    :param app_options: passed to :meth:`App.embedded` (``schedules``, ``refill_watermark``...)
    :param console_token: the login token of the operator console at ``/ops`` (at least 16
        characters); ``None`` or empty: no console
    :param console_read_only: the console shows everything and allows no action
    :param on_start: awaited with the running :class:`App` before the first request (the demo
        seeds its data this way)
    :param allow_intranet_links: short links may lead to loopback, link-local and private
        addresses (for an intranet's own shortener); refused by default
    :param trusted_proxies: the reverse proxies (addresses or networks, comma-separated, as
        uvicorn's ``--forwarded-allow-ips``) whose ``X-Forwarded-For`` and
        ``X-Forwarded-Proto`` ``python -m domain.web`` believes; ``None``: nobody's, not even
        a peer on loopback (the client address counts views and login attempts, and is
        written in the console's action log)
    """

    db: str | Path = "eventbus-web.db"
    redis_url: str | None = None
    admin_token: str | None = dataclasses.field(default=None, repr=False)
    viewer_cookie: str = "viewer"
    public_url: str | None = None
    refill_on_start: bool = True
    app_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    console_token: str | None = dataclasses.field(default=None, repr=False)
    console_read_only: bool = False
    on_start: Callable[[App], Awaitable[None]] | None = None
    trusted_proxies: str | None = None
    allow_intranet_links: bool = False

    def __post_init__(self) -> None:
        if self.console_token is not None and self.console_token.strip() == "":
            object.__setattr__(self, "console_token", None)
        token = self.admin_token
        if token is None or token == "":
            object.__setattr__(self, "admin_token", None)
            return
        stripped = token.strip()
        if not stripped:
            raise AdminTokenError("blank", MIN_ADMIN_TOKEN)
        if len(stripped) < MIN_ADMIN_TOKEN:
            raise AdminTokenError(f"{len(stripped)} characters long", MIN_ADMIN_TOKEN)
        object.__setattr__(self, "admin_token", stripped)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ, **overrides: Any) -> WebConfig:
        """``EVENTBUS_WEB_DB``, ``EVENTBUS_REDIS_URL``, ``EVENTBUS_ADMIN_TOKEN``,
        ``EVENTBUS_PUBLIC_URL``, ``EVENTBUS_CONSOLE_TOKEN``, ``EVENTBUS_CONSOLE_READ_ONLY``
        (``1``: read-only), ``EVENTBUS_TRUSTED_PROXIES``, ``EVENTBUS_ALLOW_INTRANET_LINKS``
        (``1``: allowed); keyword arguments win over the environment."""
        values: dict[str, Any] = {
            "db": environ.get("EVENTBUS_WEB_DB", "eventbus-web.db"),
            "redis_url": environ.get("EVENTBUS_REDIS_URL") or None,
            "admin_token": environ.get("EVENTBUS_ADMIN_TOKEN") or None,
            "public_url": environ.get("EVENTBUS_PUBLIC_URL") or None,
            "console_token": environ.get("EVENTBUS_CONSOLE_TOKEN") or None,
            "console_read_only": environ.get("EVENTBUS_CONSOLE_READ_ONLY", "") == "1",
            "trusted_proxies": environ.get("EVENTBUS_TRUSTED_PROXIES") or None,
            "allow_intranet_links": environ.get("EVENTBUS_ALLOW_INTRANET_LINKS", "") == "1",
        }
        values.update(overrides)
        return cls(**values)

    @property
    def admin_enabled(self) -> bool:
        return bool(self.admin_token)


def create_app(config: WebConfig | None = None) -> Starlette:
    """Build the ASGI application; the domain app starts with its lifespan, not here.

    The running :class:`~domain.App` is ``app.state.domain`` while the lifespan is active.
    """
    cfg = config if config is not None else WebConfig.from_env()

    @asynccontextmanager
    async def lifespan(web: Starlette) -> AsyncIterator[None]:
        options = {"allow_intranet_links": cfg.allow_intranet_links, **cfg.app_options}
        async with App.embedded(cfg.db, redis_url=cfg.redis_url, **options) as app:
            if cfg.refill_on_start and await app.links.idle_codes() == 0:
                await app.scheduler.trigger("refill_pool")
            web.state.domain = app
            if cfg.on_start is not None:
                await cfg.on_start(app)
            logger.info("serving on %r (admin routes %s)", app, _on_off(cfg.admin_enabled))
            try:
                yield
            finally:
                del web.state.domain
                logger.info("shutting down: draining the bus and the scheduler")

    routes: list[BaseRoute] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/links", _with(cfg, create_link), methods=["POST"]),
        Route("/articles/{article_id:int}", _with(cfg, view_article), methods=["GET"]),
        Route("/orders/{order_id:int}/pay", pay_order, methods=["POST"]),
    ]
    if cfg.admin_enabled:
        assert cfg.admin_token is not None
        routes += admin_routes(cfg.admin_token)
    if cfg.console_token is not None:
        from .console import ConsoleMount

        console = ConsoleMount(
            public_url=cfg.public_url, secret=cfg.console_token, read_only=cfg.console_read_only
        )
        routes.append(Mount("/ops", console))
    routes.append(Route("/{code}", follow_link, methods=["GET"]))
    web = Starlette(
        routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error}
    )
    web.state.config = cfg
    return web


def _on_off(flag: bool) -> str:
    return "on" if flag else "off"


def _with(cfg: WebConfig, handler: Callable[[Request, WebConfig], Awaitable[Response]]) -> Handler:
    async def endpoint(request: Request) -> Response:
        return await handler(request, cfg)

    endpoint.__name__ = handler.__name__
    return endpoint


# -- public routes -------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    app: App | None = getattr(request.app.state, "domain", None)
    if app is None or not app.bus.running:
        return error(503, "not_running", "the application is starting or stopping")
    clicks = app.links.clicks
    return JSONResponse(
        {
            "status": "ok",
            "bus": dataclasses.asdict(app.bus.statistics()),
            "scheduler": dataclasses.asdict(app.scheduler.statistics()),
            "counters": {
                "views": dataclasses.asdict(app.views.statistics()),
                "clicks": None if clicks is None else dataclasses.asdict(clicks.statistics()),
            },
        }
    )


async def create_link(request: Request, cfg: WebConfig) -> Response:
    try:
        body = await json_object(request)
        url, alias, expires_in = body.get("url"), body.get("alias"), body.get("expires_in")
        if not isinstance(url, str):
            raise BadRequest("'url' is required and must be a string")
        if alias is not None and not isinstance(alias, str):
            raise BadRequest("'alias' must be a string when given")
        expires_at = None
        if expires_in is not None:
            if isinstance(expires_in, bool) or not isinstance(expires_in, int | float):
                raise BadRequest("'expires_in' must be a number of seconds")
            if not 0 < expires_in <= 10 * 365 * 86400:
                raise BadRequest("'expires_in' must be between 1 second and 10 years")
            expires_at = datetime.now(UTC) + timedelta(seconds=expires_in)
    except BadRequest as exc:
        return exc.response()
    try:
        link = await running_app(request).links.create(url, alias=alias, expires_at=expires_at)
    except InvalidUrlError as exc:
        return error(400, "invalid_url", str(exc))
    except ReservedAliasError as exc:
        return error(400, "reserved_alias", str(exc))
    except InvalidAliasError as exc:
        return error(400, "invalid_alias", str(exc))
    except AliasTakenError as exc:
        return error(409, "alias_taken", str(exc))
    except CodeSpaceExhaustedError as exc:
        logger.error("%s", exc)
        return error(503, "no_code_available", "no short code is available; retry shortly")
    base = cfg.public_url or str(request.base_url)
    short_url = f"{base.rstrip('/')}/{link.code}"
    return JSONResponse(
        {
            "code": link.code,
            "url": link.url,
            "short_url": short_url,
            "source": link.source,
            "expires_at": None if link.expires_at is None else link.expires_at.isoformat(),
        },
        status_code=201,
        headers={"Location": short_url},
    )


async def follow_link(request: Request) -> Response:
    found = await running_app(request).links.resolve(request.path_params["code"])
    if found.url is None:
        return error(404, "not_found", f"no short link {found.code!r} ({found.reason})")
    # 302, never 301: a cached redirect would not be counted and could outlive its expiry.
    return RedirectResponse(found.url, status_code=302, headers={"Cache-Control": "no-store"})


def _viewer_key(request: Request, cfg: WebConfig) -> str:
    """A fixed-length key: the cookie is client-chosen, so it is hashed, never used as is.

    Unhashed, a cookie could hold a tab (refused by the counter, one failure record per
    request) or kilobytes (one Redis key of that size per view).
    """
    cookie = request.cookies.get(cfg.viewer_cookie)
    if cookie:
        return "c:" + hashlib.sha256(cookie.encode("utf-8", "replace")).hexdigest()[:32]
    return f"ip:{request.client.host}" if request.client is not None else "ip:unknown"


async def view_article(request: Request, cfg: WebConfig) -> Response:
    app = running_app(request)
    article_id: int = request.path_params["article_id"]
    if article_id > MAX_ID:
        return error(404, "not_found", f"no article with id {article_id}")
    async with app.engine.connect() as conn:
        row = (await conn.execute(select(articles).where(articles.c.id == article_id))).first()
    if row is None:
        return error(404, "not_found", f"no article with id {article_id}")
    app.bus.emit(ArticleViewed(article_id=article_id, viewer_key=_viewer_key(request, cfg)))
    return JSONResponse(
        {
            "id": row.id,
            "title": row.title,
            "status": row.status,
            "view_count": row.view_count,  # flushed views only: the counter job adds the rest
            "published_at": None if row.published_at is None else row.published_at.isoformat(),
        }
    )


async def pay_order(request: Request) -> Response:
    order_id: int = request.path_params["order_id"]
    try:
        if order_id > MAX_ID:
            raise BadRequest(f"order id {order_id} is out of range; ids are below 2**63")
        body = await json_object(request)
        user_id, amount = body.get("user_id"), body.get("amount")
        if isinstance(user_id, bool) or not isinstance(user_id, int):
            raise BadRequest("'user_id' is required and must be an integer")
        if not -MAX_ID - 1 <= user_id <= MAX_ID:
            raise BadRequest(f"'user_id' {user_id} is out of the signed 64-bit range")
        value = _amount(amount)
    except BadRequest as exc:
        return exc.response()
    # emit() runs sync listeners now and queues async ones; a failing listener is captured
    # and recorded, never turned into an error for the payer.
    running_app(request).bus.emit(OrderPaid(order_id=order_id, user_id=user_id, amount=value))
    return JSONResponse({"order_id": order_id, "event": "order.paid"}, status_code=202)


def _amount(amount: object) -> Decimal:
    """A positive, finite amount below :data:`~domain.listeners.MAX_AMOUNT`, in cents at most.

    Checked before any arithmetic: ``Decimal("1e9999999")`` parses in no time, but ``int()``
    or ``quantize()`` of it would block the event loop.
    """
    forms = 'a decimal string such as "19.90", or an integer'
    if amount is None:
        raise BadRequest(f"'amount' is required: {forms}")
    if isinstance(amount, float):
        raise BadRequest(
            f"'amount' {amount!r} is a JSON number with a fraction, which is not exact; "
            f"send {forms}"
        )
    if isinstance(amount, bool) or not isinstance(amount, str | int):
        raise BadRequest(f"'amount' must be {forms}, not {_json_type(amount)}")
    try:
        value = Decimal(amount)
    except InvalidOperation:
        raise BadRequest(f"'amount' {amount!r} is not a decimal number") from None
    if not (value.is_finite() and 0 < value < MAX_AMOUNT):
        raise BadRequest(f"'amount' {amount!r} must be positive and below {MAX_AMOUNT:,}")
    cents = value.quantize(CENT)
    if cents != value:
        raise BadRequest(f"'amount' {amount!r} has more than 2 decimal places")
    return cents


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type, with its article, for error messages."""
    names: dict[type, str] = {dict: "an object", list: "a list"}
    return names.get(type(value), f"a {type(value).__name__}")


# -- serving -------------------------------------------------------------------------------------


def main(argv: list[str] | None = None, *, overrides: dict[str, Any] | None = None) -> int:
    """``python -m domain.web``: serve the application with uvicorn (loopback by default).

    The configuration, the database and Redis are checked first, so that their errors are
    one line (an error in the lifespan, under uvicorn, is a traceback). *overrides* go to
    :meth:`WebConfig.from_env` (the web demo sets its console token and seed this way).
    """
    parser = argparse.ArgumentParser(
        prog="python -m domain.web",
        description="Serve the domain web application with uvicorn; EVENTBUS_ADMIN_TOKEN "
        "enables the /admin routes.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="interface (default: loopback)")
    parser.add_argument("--port", type=port, default=8000, help="TCP port (default: 8000)")
    parser.add_argument(
        "--db", metavar="PATH|URL", help="SQLite file or SQLAlchemy URL (default: $EVENTBUS_WEB_DB)"
    )
    parser.add_argument("--redis", metavar="URL", help="counters and locks in Redis at URL")
    args = parser.parse_args(argv)
    db = args.db or os.environ.get("EVENTBUS_WEB_DB")  # what WebConfig.from_env reads: named
    redis_url = args.redis or os.environ.get("EVENTBUS_REDIS_URL") or None  # in an error
    serving = functools.partial(_serve, args, dict(overrides or {}))
    return run_cli(serving, db=db, redis_url=redis_url)


def _serve(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    import anyio
    import uvicorn

    from eventbus.console import LoginSecretError

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s"
    )
    if args.db is not None:
        overrides["db"] = args.db
    if args.redis is not None:
        overrides["redis_url"] = args.redis
    config = WebConfig.from_env(**overrides)
    check_database(config.db)
    if config.redis_url is not None:
        check_redis_url(config.redis_url)
    anyio.run(check_reachable, config.db, config.redis_url, backend="asyncio")
    if not config.admin_enabled:
        logger.warning("EVENTBUS_ADMIN_TOKEN is not set: the /admin routes are disabled")
    try:
        web = create_app(config)
    except LoginSecretError as exc:
        raise InputError(f"EVENTBUS_CONSOLE_TOKEN: {exc}") from None
    if config.console_token is None:
        logger.warning("EVENTBUS_CONSOLE_TOKEN is not set: the /ops console is disabled")
    else:
        logger.info("the operator console is at http://%s:%d/ops", args.host, args.port)
    uvicorn.run(web, **_server_options(config, host=args.host, port=args.port))
    return 0


def _server_options(config: WebConfig, *, host: str, port: int) -> dict[str, Any]:
    """The options of ``uvicorn.run``: forwarded headers believed only from the configured
    proxies.

    uvicorn's defaults (``proxy_headers=True``, ``forwarded_allow_ips="127.0.0.1"``) rewrite
    the client address from the ``X-Forwarded-For`` of any peer on loopback: any local
    process, or a client of a same-host proxy that passes the header on, would choose the
    address that the login throttle counts and the action log records.
    """
    trusted = config.trusted_proxies
    options: dict[str, Any] = {"host": host, "port": port, "log_level": "info"}
    options["proxy_headers"] = trusted is not None
    if trusted is not None:
        options["forwarded_allow_ips"] = trusted
    return options


if __name__ == "__main__":
    raise SystemExit(main())
