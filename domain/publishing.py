"""Scheduled publishing: a pending row per article in ``schedule_records``, published when due.

A job at second 15 of every minute (``15 * * * * *``) calls :meth:`Publisher.publish_due`.
Each batch is one transaction that claims due rows with a conditional update (``WHERE status
= 'pending'``, plus ``FOR UPDATE SKIP LOCKED`` on PostgreSQL so that replicas take different
rows instead of waiting), publishes the articles and marks the rows done. Two replicas running
the job together therefore never publish the same article twice. ``article.published`` is
emitted after the commit: a crash between the commit and the emit loses the event but never
the publication (in-process events are lossy; the row says what happened).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus

from ._public import shown_as_domain
from .db import articles, schedule_records, upsert
from .events import ArticlePublished
from .exceptions import ArticleNotFoundError, ScheduleTimeError

__all__ = ["PUBLISH_CRON", "Publisher"]

#: When the publishing job runs: second 15 of every minute.
PUBLISH_CRON = "15 * * * * *"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Publisher:
    """Schedules article publications and publishes what is due; safe on several replicas.

    :param engine: SQL engine holding ``articles`` and ``schedule_records`` (not owned)
    :param bus: where ``article.published`` is emitted (``None``: nowhere)
    :param min_lead: how far ahead a publication must be scheduled
    :param batch: rows claimed per transaction
    :param clock: the current aware time (tests inject one)
    """

    type = "publish_article"

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        bus: EventBus | None = None,
        min_lead: timedelta = timedelta(seconds=1),
        batch: int = 100,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        if batch < 1:
            raise ValueError(f"batch={batch!r} must be >= 1")
        self.engine = engine
        self.bus = bus
        self.min_lead = min_lead
        self.batch = batch
        self.clock = clock

    def __repr__(self) -> str:
        return f"Publisher(min_lead={self.min_lead}, batch={self.batch})"

    async def schedule_publish(self, article_id: int, at: datetime) -> int:
        """Publish *article_id* at *at*; rescheduling updates the pending row.

        :return: the id of the pending ``schedule_records`` row
        :raises ValueError: if *at* is naive
        :raises ScheduleTimeError: if *at* is in the past or less than ``min_lead`` ahead
        :raises ArticleNotFoundError: if there is no such article
        """
        if at.tzinfo is None:
            raise ValueError(f"at={at!r} is naive; pass an aware datetime (tzinfo=UTC)")
        now = self.clock()
        if at < now + self.min_lead:
            raise ScheduleTimeError(at, now, self.min_lead)
        t = schedule_records
        stmt = upsert(
            self.engine,
            t,
            {
                "target_id": article_id,
                "type": self.type,
                "execution_time": at,
                "status": "pending",
                "created_at": now,
                "updated_at": now,
            },
            index_elements=["target_id", "type"],
            # Literal SQL, the partial index's own text: a bound parameter here makes
            # PostgreSQL's generic plan (from a statement's sixth run) miss the index.
            index_where=text("status = 'pending'"),
            update={"execution_time": at, "updated_at": now},
        ).returning(t.c.id)
        async with self.engine.begin() as conn:
            exists = await conn.scalar(select(articles.c.id).where(articles.c.id == article_id))
            if exists is None:
                raise ArticleNotFoundError(article_id)
            record_id = await conn.scalar(stmt)
        assert record_id is not None
        return int(record_id)

    async def cancel(self, article_id: int) -> bool:
        """Cancel the pending publication of *article_id*; ``False`` if there was none."""
        t = schedule_records
        async with self.engine.begin() as conn:
            result = await conn.execute(
                update(t)
                .where(t.c.target_id == article_id, t.c.type == self.type, t.c.status == "pending")
                .values(status="cancelled", updated_at=self.clock())
            )
        return bool(result.rowcount)

    async def pending(self) -> list[tuple[int, datetime]]:
        """``(article_id, execution_time)`` of every pending publication, soonest first."""
        t = schedule_records
        query = (
            select(t.c.target_id, t.c.execution_time)
            .where(t.c.status == "pending", t.c.type == self.type)
            .order_by(t.c.execution_time)
        )
        async with self.engine.connect() as conn:
            return [(int(r[0]), r[1]) for r in (await conn.execute(query)).all()]

    async def publish_due(self) -> list[int]:
        """Publish every due article, one transaction per batch (the cron job's body).

        :return: the ids of the articles this call published
        """
        published: list[int] = []
        while True:
            claimed, ids = await self._publish_batch(self.clock())
            published += ids
            if claimed < self.batch:
                return published

    async def _publish_batch(self, now: datetime) -> tuple[int, list[int]]:
        t = schedule_records
        due = (
            select(t.c.id)
            .where(t.c.status == "pending", t.c.type == self.type, t.c.execution_time <= now)
            .order_by(t.c.execution_time)
            .limit(self.batch)
        )
        if self.engine.dialect.name == "postgresql":
            due = due.with_for_update(skip_locked=True)
        async with self.engine.begin() as conn:
            # The claim: only rows still pending when this update runs are ours.
            claimed = await conn.execute(
                update(t)
                .where(t.c.id.in_(due.scalar_subquery()), t.c.status == "pending")
                .values(status="done", updated_at=now)
                .returning(t.c.target_id)
            )
            targets = [int(r[0]) for r in claimed.all()]
            ids: list[int] = []
            if targets:
                result = await conn.execute(
                    update(articles)
                    .where(articles.c.id.in_(targets), articles.c.status != "published")
                    .values(status="published", published_at=now)
                    .returning(articles.c.id)
                )
                ids = sorted(int(r[0]) for r in result.all())
        if self.bus is not None:
            for article_id in ids:
                self.bus.emit(ArticlePublished(article_id=article_id, published_at=now))
        return len(targets), ids


shown_as_domain(Publisher)
