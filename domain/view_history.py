"""Article view counts over time: a sample per article whenever a flush moved its count.

The flush job applies deltas to ``articles.view_count`` and keeps no history; the console's
chart needs one. :meth:`ViewHistory.sample` runs after a flush and records the articles whose
count differs from their latest sample (one small query; a row only on change).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, insert, select
from sqlalchemy.ext.asyncio import AsyncEngine

from .db import article_view_history, articles

__all__ = ["ViewHistory"]


def _utcnow() -> datetime:
    return datetime.now(UTC)


class ViewHistory:
    """Samples of ``articles.view_count`` in ``article_view_history`` (engine not owned)."""

    def __init__(self, engine: AsyncEngine, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self.engine = engine
        self.clock = clock

    def __repr__(self) -> str:
        return "ViewHistory()"

    async def sample(self) -> int:
        """Record the articles whose count changed since their latest sample; return how many."""
        h = article_view_history
        latest = (
            select(h.c.article_id, func.max(h.c.id).label("last_id"))
            .group_by(h.c.article_id)
            .subquery()
        )
        last = (
            select(h.c.article_id, h.c.view_count)
            .join(latest, h.c.id == latest.c.last_id)
            .subquery()
        )
        query = (
            select(articles.c.id, articles.c.view_count)
            .outerjoin(last, last.c.article_id == articles.c.id)
            .where((last.c.view_count.is_(None)) | (last.c.view_count != articles.c.view_count))
        )
        now = self.clock()
        async with self.engine.begin() as conn:
            changed = (await conn.execute(query)).all()
            if changed:
                await conn.execute(
                    insert(h),
                    [{"article_id": r.id, "at": now, "view_count": r.view_count} for r in changed],
                )
        return len(changed)

    async def series(
        self, *, since: timedelta = timedelta(days=1), limit: int = 5_000
    ) -> dict[int, list[tuple[datetime, int]]]:
        """Samples per article id in the last *since*, oldest first (at most *limit* rows)."""
        h = article_view_history
        query = (
            select(h.c.article_id, h.c.at, h.c.view_count)
            .where(h.c.at >= self.clock() - since)
            .order_by(h.c.at.desc())
            .limit(limit)
        )
        async with self.engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        out: dict[int, list[tuple[datetime, int]]] = {}
        for r in reversed(rows):
            out.setdefault(int(r.article_id), []).append((r.at, int(r.view_count)))
        return out
