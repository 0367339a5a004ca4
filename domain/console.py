"""The domain's pages in the operator console: short links and articles, and the mount.

:func:`domain_pages` gives the pages of a running :class:`~domain.App`; :class:`ConsoleMount`
is what :mod:`domain.web` mounts at ``/ops``: it builds the console (the ``eventbus`` pages,
the ``scheduler`` pages, these) for the app its lifespan started, on the first request.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from eventbus.console import (
    Action,
    ActionError,
    Console,
    ConsolePage,
    Done,
    PageRequest,
    Panel,
    View,
    bus_pages,
    line_chart,
    parse_datetime,
    parse_int,
)
from eventbus.console.sql import SqlSessionRevocations
from scheduler.console import scheduler_pages

from .app import App
from .db import articles, short_links
from .exceptions import DomainError

__all__ = ["ArticlesPage", "ConsoleMount", "LinksPage", "domain_console", "domain_pages"]

_TEMPLATES = ("domain", "console_templates")
_MAX_LINKS = 200
_MAX_EXPIRY_DAYS = 3650


class LinksPage:
    """Short links: create one from a form; every link with its clicks (flushed + pending).

    :param public_url: base of the short URLs shown (default: the request's scheme and host)
    """

    slug = "links"
    title = "Short links"
    templates: tuple[str, str] | None = _TEMPLATES

    def __init__(self, app: App, *, public_url: str | None = None) -> None:
        self.app = app
        self.public_url = public_url

    def __repr__(self) -> str:
        return f"LinksPage(app={self.app!r})"

    def routes(self) -> Sequence[View | Action]:
        return [View("", self.index, "links.list"), Action("", self.create, "links.create")]

    async def panel(self, request: PageRequest) -> Panel:
        return Panel(
            title=self.title,
            href=request.url("/links"),
            rows=[("idle codes in the pool", await self.app.links.idle_codes())],
        )

    def _base(self, request: PageRequest) -> str:
        if self.public_url:
            return self.public_url.rstrip("/")
        url = request.request.url
        return f"{url.scheme}://{url.netloc}"

    async def index(self, request: PageRequest) -> Response:
        t = short_links
        query = select(t).order_by(t.c.created_at.desc(), t.c.code).limit(_MAX_LINKS)
        async with self.app.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        counter = self.app.links.clicks
        pending = await counter.store.pending("clicks") if counter is not None else {}
        now = datetime.now(UTC)
        links = [
            {
                "code": r.code,
                "url": r.url,
                "short_url": f"{self._base(request)}/{r.code}",
                "alias": bool(r.is_alias),
                "clicks": int(r.clicks),
                "pending": int(pending.get(r.code, 0)),
                "created_at": r.created_at,
                "expires_at": r.expires_at,
                "expired": r.expires_at is not None and r.expires_at <= now,
            }
            for r in rows
        ]
        return request.render("domain_links.html", links=links, max_links=_MAX_LINKS)

    async def create(self, request: PageRequest) -> Done:
        url = request.field("url", max_length=4096)
        alias = request.field("alias", max_length=100) or None
        errors: list[str] = []
        days = parse_int(request.field("expires_in_days"), "expires in days", 1, 3650, errors)
        if errors:
            raise ActionError(errors[0] + ".")
        if not url:
            raise ActionError("Give the URL the short link leads to (http or https).")
        expires_at = None if days is None else datetime.now(UTC) + timedelta(days=days)
        try:
            link = await self.app.links.create(url, alias=alias, expires_at=expires_at)
        except DomainError as exc:
            raise ActionError(f"Not created: {exc}") from None
        return Done(
            f"Created {self._base(request)}/{link.code} → {link.url} ({link.source}).",
            target=link.code,
            back=request.url("/links"),
        )


class ArticlesPage:
    """Articles: status, scheduled publication, view counts (flushed + pending) and a chart
    of the counts over time; schedule or cancel a publication."""

    slug = "articles"
    title = "Articles"
    templates: tuple[str, str] | None = _TEMPLATES

    def __init__(self, app: App) -> None:
        self.app = app

    def __repr__(self) -> str:
        return f"ArticlesPage(app={self.app!r})"

    def routes(self) -> Sequence[View | Action]:
        return [
            View("", self.index, "articles.list"),
            Action("/{article_id}/schedule", self.schedule, "articles.schedule"),
            Action("/{article_id}/cancel", self.cancel, "articles.cancel"),
        ]

    async def panel(self, request: PageRequest) -> Panel:
        pending = await self.app.publisher.pending()
        return Panel(
            title=self.title,
            href=request.url("/articles"),
            rows=[("scheduled publications", len(pending))],
        )

    async def index(self, request: PageRequest) -> Response:
        async with self.app.engine.connect() as conn:
            rows = (await conn.execute(select(articles).order_by(articles.c.id))).all()
        scheduled = dict(await self.app.publisher.pending())
        pending = await self.app.views.pending()
        series = await self.app.view_history.series()
        titles = {int(r.id): str(r.title) for r in rows}
        chart = line_chart(
            {f"#{aid} {titles.get(aid, '')}"[:40]: pts for aid, pts in series.items()},
            label="Views per article over the last 24 h (flushed counts)",
            end=datetime.now(UTC),
        )
        return request.render(
            "domain_articles.html",
            rows=rows,
            scheduled=scheduled,
            pending=pending,
            chart=chart if series else None,
            default_at=(datetime.now(UTC) + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M"),
        )

    def _article_id(self, request: PageRequest) -> int:
        errors: list[str] = []
        raw = str(request.path_params["article_id"])
        article_id = parse_int(raw, "article id", 1, 2**63 - 1, errors)
        if errors or article_id is None:
            raise ActionError(f"There is no article {raw[:30]!r}.", status=404)
        return article_id

    async def schedule(self, request: PageRequest) -> Done:
        article_id = self._article_id(request)
        errors: list[str] = []
        at = parse_datetime(request.field("at"), "publication time", errors)
        if errors:
            raise ActionError(errors[0] + ".")
        if at is None:
            raise ActionError("Give the publication time (UTC).")
        try:
            await self.app.publisher.schedule_publish(article_id, at)
        except DomainError as exc:
            raise ActionError(f"Not scheduled: {exc}") from None
        return Done(
            f"Article {article_id} will be published at {at:%Y-%m-%d %H:%M} UTC.",
            target=str(article_id),
            back=request.url("/articles"),
        )

    async def cancel(self, request: PageRequest) -> Done:
        article_id = self._article_id(request)
        if not await self.app.publisher.cancel(article_id):
            raise ActionError(f"Article {article_id} has no scheduled publication to cancel.")
        return Done(
            f"Cancelled the publication of article {article_id}.",
            target=str(article_id),
            back=request.url("/articles"),
        )


def domain_pages(app: App, *, public_url: str | None = None) -> list[ConsolePage]:
    """The domain's pages for *app*: short links, then articles."""
    return [LinksPage(app, public_url=public_url), ArticlesPage(app)]


def domain_console(app: App, *, public_url: str | None = None, **options: Any) -> Console:
    """A console with every page for *app*: failures, bus, jobs and runs, links, articles.

    *options* go to :class:`~eventbus.console.Console` (``secret=``, ``read_only=``...).
    """
    pages = [
        *bus_pages(app.bus),
        *scheduler_pages(app.scheduler),
        *domain_pages(app, public_url=public_url),
    ]
    return Console(pages, **options)


class ConsoleMount:
    """An ASGI app for ``Mount("/ops", ...)`` in :mod:`domain.web`: the console of the
    :class:`App` in ``app.state.domain``, built when a request first needs it (the app
    exists only while the lifespan runs), rebuilt if the lifespan starts another one."""

    def __init__(self, *, public_url: str | None = None, **options: Any) -> None:
        self.public_url = public_url
        self.options = options
        self._built: tuple[App, Console] | None = None
        Console((), **options)  # a bad secret or option fails here, not at the first request

    def __repr__(self) -> str:
        return f"ConsoleMount(read_only={self.options.get('read_only', False)})"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        app: App | None = getattr(scope["app"].state, "domain", None) if "app" in scope else None
        if app is None:
            response = Response(
                "The application is starting or stopping.",
                status_code=503,
                media_type="text/plain",
            )
            await response(scope, receive, send)
            return
        if self._built is None or self._built[0] is not app:
            # logouts in the app's database: every replica on it refuses a logged-out cookie
            options = {"revocations": SqlSessionRevocations(app.engine), **self.options}
            console = domain_console(app, public_url=self.public_url, **options)
            if self._built is not None:  # keep the action log across restarts of the app
                console.audit = self._built[1].audit
            self._built = (app, console)
        await self._built[1](scope, receive, send)
