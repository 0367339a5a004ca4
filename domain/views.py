"""Article view counting: once per viewer per 10 minutes, pending in a store, flushed to SQL.

A view is counted when ``SET viewed NX EX 600`` succeeds for ``(article, viewer)``; fresh views
go into a pending hash sharded by ``article_id % buckets``, optionally pre-aggregated in process
for a short window. A locked cron job calls :meth:`ArticleViews.flush`, which applies the
pending counts to ``articles.view_count`` as deltas, exactly once (the protocol and its
guarantee are in :mod:`domain.counters`).
"""

from __future__ import annotations

from types import TracebackType
from typing import Self

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus

from ._public import shown_as_domain
from .abc import CounterStore
from .counters import Counter, CounterStatistics, FlushReport
from .db import articles
from .events import ArticleViewed

__all__ = ["ArticleViews"]


class ArticleViews:
    """Counts article views; the store decides the scope (memory: one process, Redis: all).

    :param store: the pending-count store
    :param engine: the SQL engine holding ``articles``
    :param dedupe_ttl: seconds during which a viewer counts once per article (default 600)
    :param window: in-process pre-aggregation window in seconds (``None``: off); needs
        ``async with views:``, and is sent to the store on exit
    """

    def __init__(
        self,
        store: CounterStore,
        engine: AsyncEngine,
        *,
        dedupe_ttl: float = 600.0,
        window: float | None = None,
        max_batch: int = 5_000,
    ) -> None:
        self.counter = Counter(
            store,
            engine,
            name="views",
            column=articles.c.view_count,
            dedupe_ttl=dedupe_ttl,
            window=window,
            max_batch=max_batch,
        )
        self.engine = engine

    def __repr__(self) -> str:
        return f"ArticleViews({self.counter!r})"

    async def view(self, article_id: int, viewer_key: str) -> None:
        """Count a view of *article_id* by *viewer_key* (an id, or a hash of IP and agent).

        :raises ValueError: if *viewer_key* is empty (it would count every view) or holds a
            tab or newline (hash it first)
        """
        _check_viewer(viewer_key)
        await self.counter.hit(article_id, viewer_key)

    def view_nowait(self, article_id: int, viewer_key: str) -> None:
        """Like :meth:`view` without yielding; needs ``window=`` and ``async with views:``."""
        _check_viewer(viewer_key)
        self.counter.hit_nowait(article_id, viewer_key)

    async def flush(self) -> FlushReport:
        """Apply the pending counts to ``articles.view_count`` (the cron job's body)."""
        return await self.counter.flush()

    def statistics(self) -> CounterStatistics:
        """Buffered and lost views, and losses of the store's data (Redis restarts)."""
        return self.counter.statistics()

    async def pending(self) -> dict[int, int]:
        """Counts not yet staged for SQL, by article id."""
        return {int(k): v for k, v in (await self.counter.store.pending("views")).items()}

    async def counts(self, *article_ids: int) -> dict[int, int]:
        """``view_count`` in SQL (flushed views only) of the given articles, or of all."""
        query = select(articles.c.id, articles.c.view_count)
        if article_ids:
            query = query.where(articles.c.id.in_(article_ids))
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return {int(r.id): int(r.view_count) for r in rows}

    def attach(self, bus: EventBus) -> None:
        """Count every ``article.viewed`` emitted on *bus* (listener ``domain.views:count``),
        and emit ``counts.lost`` there when the store loses views."""
        self.counter.bus = bus

        async def count(event: ArticleViewed) -> None:
            await self.view(event.article_id, event.viewer_key)

        bus.on(ArticleViewed, count, name="domain.views:count")

    async def __aenter__(self) -> Self:
        await self.counter.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self.counter.__aexit__(exc_type, exc_val, tb)

    async def aclose(self) -> None:
        """Leave ``async with``: the views buffered for the window go to the store."""
        await self.counter.aclose()


def _check_viewer(viewer_key: str) -> None:
    if not viewer_key or "\t" in viewer_key or "\n" in viewer_key:
        raise ValueError(
            f"viewer_key={viewer_key!r} must be a non-empty string without tabs or newlines; "
            "pass a user id or a hash of the client's address and agent"
        )


shown_as_domain(ArticleViews)
