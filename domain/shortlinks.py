"""Short links: pooled random codes, custom aliases, safe targets, and counted 302 redirects.

**Why 302 and not 301.** A 301 is cached by browsers and proxies for good: the next visits
never reach us, so clicks are not counted, the target cannot be changed, and an expired link
keeps working from the cache. A 302 is asked again on every visit.

**Why expiry is a field and not a deletion.** ``expires_at`` is compared when the code is
resolved, so a link stops at the exact second, with no job to run late or fail. The row stays:
its code is never handed out again (a deleted code could return to the pool and an old,
shared link would then lead to someone else's target), and its clicks remain for reports.

Codes come from a pool that a locked daily job refills to a watermark with insert-or-ignore
on a unique index; :meth:`ShortLinks.create` claims one with a conditional update, and falls
back to generating and inserting a code directly (with a warning) when the pool is empty.
"""

from __future__ import annotations

import dataclasses
import logging
import secrets
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import exc, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import EventBus

from ._public import shown_as_domain
from ._shortlink_rules import (
    DEFAULT_RESERVED,
    MAX_URL_LENGTH,
    could_be_code,
    new_code,
    validate_alias,
    validate_url,
)
from .abc import CounterStore
from .counters import Counter, FlushReport
from .db import insert_ignore, short_links, shortlink_pool
from .events import ShortlinkCreated, ShortlinkVisited
from .exceptions import AliasTakenError, CodeSpaceExhaustedError

__all__ = ["Resolution", "ShortLink", "ShortLinks"]

logger = logging.getLogger("domain.shortlinks")


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclasses.dataclass(frozen=True, slots=True)
class ShortLink:
    """A created link; ``source`` says where its code came from: pool, fallback or alias."""

    code: str
    url: str
    source: str
    created_at: datetime
    expires_at: datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    """The answer to a visit: a target for a 302, or why there is none (a 404)."""

    code: str
    url: str | None
    reason: str | None = None  # "unknown" or "expired" when url is None

    @property
    def found(self) -> bool:
        return self.url is not None

    @property
    def status(self) -> int:
        return 302 if self.url is not None else 404


def _link_row(
    code: str, url: str, expires_at: datetime | None, now: datetime, *, alias: bool
) -> dict[str, Any]:
    return {
        "code": code,
        "url": url,
        "is_alias": int(alias),
        "created_at": now,
        "expires_at": expires_at,
    }


class ShortLinks:
    """The short-link service on one SQL engine; safe to run on several replicas.

    :param engine: SQL engine holding ``short_links`` and ``shortlink_pool`` (not owned)
    :param bus: where ``shortlink.created``/``shortlink.visited`` are emitted (``None``: nowhere)
    :param clicks: the store of the click counter (``None``: clicks are not counted)
    :param reserved: aliases refused (compared case-insensitively)
    :param watermark: idle codes the refill job tops the pool up to
    :param batch: codes inserted per refill statement
    :param fallback_attempts: codes tried when the pool is empty before giving up
    :param max_url_length: the longest target URL accepted
    :param allow_intranet: accept targets on loopback, link-local and private addresses
        (``localhost``, ``10.0.0.5``, ``[fe80::1]``): for a service only an intranet uses.
        Cloud metadata services, unspecified, multicast and reserved addresses and IPv6
        zone ids are refused even so (see :func:`~domain.validate_url`)
    :param code_factory: makes a random code (tests inject duplicates); codes are 1 to 64
        characters of ``[A-Za-z0-9_-]``, the only ones :meth:`resolve` looks up
    :param clock: the current aware time (tests inject one)
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        bus: EventBus | None = None,
        clicks: CounterStore | None = None,
        reserved: Collection[str] = DEFAULT_RESERVED,
        watermark: int = 1_000,
        batch: int = 500,
        fallback_attempts: int = 5,
        max_url_length: int = MAX_URL_LENGTH,
        allow_intranet: bool = False,
        code_factory: Callable[[], str] = new_code,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.engine = engine
        self.bus = bus
        self.reserved = frozenset(r.lower() for r in reserved)
        self.watermark = watermark
        self.batch = batch
        self.fallback_attempts = fallback_attempts
        self.max_url_length = max_url_length
        self.allow_intranet = allow_intranet
        self.code_factory = code_factory
        self.clock = clock
        self.clicks = (
            None
            if clicks is None
            else Counter(clicks, engine, name="clicks", column=short_links.c.clicks, bus=bus)
        )

    def __repr__(self) -> str:
        return f"ShortLinks(watermark={self.watermark}, reserved={len(self.reserved)} words)"

    # -- the pool -------------------------------------------------------------------------------

    async def idle_codes(self) -> int:
        async with self.engine.connect() as conn:
            query = select(func.count()).where(shortlink_pool.c.status == "idle")
            return int(await conn.scalar(query) or 0)

    async def refill(self, *, watermark: int | None = None, max_rounds: int = 20) -> int:
        """Top the pool up to *watermark* idle codes with insert-or-ignore (the daily job).

        Duplicates (of the pool, of an alias, or within a batch) are skipped by the unique
        index, never checked first: select-then-insert would race with another replica.

        :return: how many codes were added
        """
        target = self.watermark if watermark is None else watermark
        before = idle = await self.idle_codes()
        stmt = insert_ignore(self.engine, shortlink_pool)
        for _ in range(max_rounds):
            if idle >= target:
                break
            now = self.clock()
            # Sorted: each insert locks its index entry until the commit, so two replicas
            # inserting the same codes in different orders could each wait for the other
            # (PostgreSQL: "deadlock detected"); in one order, the second one just waits.
            codes = sorted({self.code_factory() for _ in range(min(self.batch, target - idle))})
            rows = [{"code": code, "status": "idle", "created_at": now} for code in codes]
            async with self.engine.begin() as conn:
                await conn.execute(stmt, rows)
            idle = await self.idle_codes()
        else:
            if idle < target:
                logger.warning(
                    "pool refill stopped at %d idle codes after %d rounds (target %d): "
                    "too many duplicate codes",
                    idle,
                    max_rounds,
                    target,
                )
        return idle - before

    # -- create ---------------------------------------------------------------------------------

    async def create(
        self, url: str, *, alias: str | None = None, expires_at: datetime | None = None
    ) -> ShortLink:
        """Create a short link to *url*: a pool code, a fallback code, or the given *alias*.

        :raises InvalidUrlError: if *url* is not an absolute http(s) URL with a host, or its
            host is an address a link must not lead to (see :func:`~domain.validate_url`)
        :raises InvalidAliasError: if *alias* has a wrong length or character
        :raises ReservedAliasError: if *alias* is reserved
        :raises AliasTakenError: if *alias* is already in use
        :raises CodeSpaceExhaustedError: if the pool is empty and the fallback found no code
        """
        validate_url(url, max_length=self.max_url_length, allow_intranet=self.allow_intranet)
        if expires_at is not None and expires_at.tzinfo is None:
            raise ValueError(f"expires_at={expires_at!r} is naive; pass an aware datetime")
        if alias is not None:
            validate_alias(alias, self.reserved)
            link = await self._insert_new(alias, url, expires_at, status="alias")
            if link is None:
                raise AliasTakenError(alias)
        else:
            link = await self._claim(url, expires_at) or await self._fallback(url, expires_at)
        if self.bus is not None:
            self.bus.emit(ShortlinkCreated(code=link.code, url=url, alias=alias is not None))
        return link

    async def _claim(
        self, url: str, expires_at: datetime | None, *, rounds: int = 5, candidates: int = 16
    ) -> ShortLink | None:
        rng = secrets.SystemRandom()
        for _ in range(rounds):
            async with self.engine.connect() as conn:
                query = (
                    select(shortlink_pool.c.code)
                    .where(shortlink_pool.c.status == "idle")
                    .limit(candidates)
                )
                codes = list((await conn.execute(query)).scalars())
            if not codes:
                return None
            rng.shuffle(codes)  # concurrent creators spread over the candidates
            for code in codes:
                now = self.clock()
                async with self.engine.begin() as conn:
                    claimed = await conn.execute(
                        update(shortlink_pool)
                        .where(shortlink_pool.c.code == code, shortlink_pool.c.status == "idle")
                        .values(status="claimed", claimed_at=now)
                    )
                    if claimed.rowcount != 1:
                        continue  # another creator won this code: try the next one
                    row = _link_row(code, url, expires_at, now, alias=False)
                    await conn.execute(insert(short_links).values(row))
                return ShortLink(code, url, "pool", now, expires_at)
        return None

    async def _fallback(self, url: str, expires_at: datetime | None) -> ShortLink:
        logger.warning(
            "short-link pool is empty: generating a code directly; "
            "run the refill job or raise its watermark (now %d)",
            self.watermark,
        )
        for _ in range(self.fallback_attempts):
            link = await self._insert_new(self.code_factory(), url, expires_at, status="claimed")
            if link is not None:
                return link
        raise CodeSpaceExhaustedError(self.fallback_attempts)

    async def _insert_new(
        self, code: str, url: str, expires_at: datetime | None, *, status: str
    ) -> ShortLink | None:
        """Insert a code in use and its link in one transaction; ``None`` if the code is taken."""
        now = self.clock()
        try:
            async with self.engine.begin() as conn:
                await conn.execute(
                    insert(shortlink_pool).values(
                        code=code, status=status, created_at=now, claimed_at=now
                    )
                )
                row = _link_row(code, url, expires_at, now, alias=status == "alias")
                await conn.execute(insert(short_links).values(row))
        except exc.IntegrityError:
            return None
        source = "alias" if status == "alias" else "fallback"
        return ShortLink(code, url, source, now, expires_at)

    # -- resolve --------------------------------------------------------------------------------

    async def resolve(self, code: str) -> Resolution:
        """The target of *code* for a 302, or a not-found result (unknown or expired code).

        A hit emits ``shortlink.visited`` (the click counter listens to it). A string that
        cannot be a code (wrong characters or length, a NUL, a lone surrogate) is unknown.
        """
        if not could_be_code(code):
            return Resolution(code, None, "unknown")
        async with self.engine.connect() as conn:
            query = select(short_links.c.url, short_links.c.expires_at).where(
                short_links.c.code == code
            )
            row = (await conn.execute(query)).first()
        if row is None:
            return Resolution(code, None, "unknown")
        if row.expires_at is not None and row.expires_at <= self.clock():
            return Resolution(code, None, "expired")
        if self.bus is not None:
            self.bus.emit(ShortlinkVisited(code=code, url=row.url))
        return Resolution(code, row.url)

    # -- clicks ---------------------------------------------------------------------------------

    def attach(self, bus: EventBus) -> None:
        """Count a click for every ``shortlink.visited`` on *bus* (``domain.shortlinks:click``)."""
        counter = self.clicks
        if counter is None:
            raise RuntimeError("this ShortLinks has no click store; pass clicks=CounterStore")

        async def click(event: ShortlinkVisited) -> None:
            await counter.hit(event.code)

        bus.on(ShortlinkVisited, click, name="domain.shortlinks:click")

    async def flush_clicks(self) -> FlushReport:
        """Apply pending clicks to ``short_links.clicks`` (the cron job's body)."""
        if self.clicks is None:
            return FlushReport()
        return await self.clicks.flush()

    async def clicks_of(self, *codes: str) -> dict[str, int]:
        """Flushed clicks in SQL per code (all codes when none are given)."""
        query = select(short_links.c.code, short_links.c.clicks)
        if codes:
            query = query.where(short_links.c.code.in_(codes))
        async with self.engine.connect() as conn:
            return {r.code: int(r.clicks) for r in (await conn.execute(query)).all()}


shown_as_domain(Resolution, ShortLink, ShortLinks)
