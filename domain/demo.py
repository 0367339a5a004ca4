"""The demo: every domain module at work for a few seconds, then a summary of what happened.

Runs on embedded defaults (a SQLite file in a temporary directory, memory counters, a local
lock); ``--redis URL`` moves counters and locks to Redis. Finishes in well under 30 s.
"""

from __future__ import annotations

import argparse
import functools
import logging
import tempfile
import time
from collections import Counter as Tally
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import anyio
from sqlalchemy import insert, select

from .app import App, Schedules
from .db import articles, short_links
from .events import ArticleViewed, OrderPaid, UserRegistered
from .exceptions import DomainError
from .listeners import BOUNCING_DOMAIN

__all__ = ["main", "run_demo"]

ARTICLES = {1: "Why 302 and not 301", 2: "Counting views exactly once", 3: "Cron with seconds"}


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


async def run_demo(db: Path, *, redis_url: str | None = None, seconds: float = 10.0) -> None:
    """Drive the app on *db* for *seconds* of scheduler time and print a summary."""
    started = time.monotonic()
    async with App.embedded(
        db, redis_url=redis_url, schedules=Schedules.fast(), refill_watermark=20
    ) as app:
        async with app.engine.begin() as conn:
            await conn.execute(
                insert(articles), [{"id": i, "title": t} for i, t in ARTICLES.items()]
            )
        _section("events")
        for uid, email in enumerate(
            ["ada@example.com", f"bob@{BOUNCING_DOMAIN}", "cy@example.com"]
        ):
            app.bus.emit(UserRegistered(user_id=uid + 1, email=email))
        for oid, (uid, amount) in enumerate([(1, "19.90"), (2, "5.00"), (1, "42.00")]):
            app.bus.emit(OrderPaid(order_id=100 + oid, user_id=uid, amount=Decimal(amount)))
        print("registered 3 users (one address bounces on purpose), paid 3 orders")

        _section("short links")
        first = await app.links.create("https://example.com/before-refill")
        print(f"pool empty -> fallback code {first.code} ({first.source})")
        added = await app.links.refill()
        print(f"refilled the pool with {added} codes")
        links = [
            first,
            await app.links.create("https://example.com/docs", alias="docs"),
            await app.links.create(
                "https://example.com/flash-sale", expires_at=datetime.now(UTC) + timedelta(days=1)
            ),
        ]
        for link in links[1:]:
            print(f"created {link.code} -> {link.url} ({link.source})")
        for bad_url, alias in [("javascript:alert(1)", None), ("https://example.com", "admin")]:
            try:
                await app.links.create(bad_url, alias=alias)
            except DomainError as exc:
                print(f"refused: {exc}")
        for n, link in enumerate(links):
            for _ in range(n + 2):
                await app.links.resolve(link.code)
        miss = await app.links.resolve("nope00")
        print(f"resolve('nope00') -> {miss.status} ({miss.reason})")

        _section("views and publishing")
        for article_id, viewers in [(1, 5), (2, 3), (3, 1)]:
            for v in range(viewers):
                for _ in range(2):  # the second view of the same viewer does not count
                    app.bus.emit(ArticleViewed(article_id=article_id, viewer_key=f"viewer-{v}"))
        print("9 viewers viewed articles 1-3 twice each (counted once per 10 minutes)")
        at = datetime.now(UTC) + timedelta(seconds=max(1.5, min(3.0, seconds / 3)))
        await app.publisher.schedule_publish(3, at)
        print(f"article 3 scheduled for {at:%H:%M:%S} UTC; running the scheduler {seconds:g} s")
        await anyio.sleep(seconds)

        await app.views.flush()  # what the next flush job would do, before we read SQL
        await app.links.flush_clicks()
        await app.bus.failures.flush()
        await _summary(app)
    print(f"\ndemo finished in {time.monotonic() - started:.1f} s; database: {db}")


async def _summary(app: App) -> None:
    _section("summary")
    async with app.engine.connect() as conn:
        rows = (await conn.execute(select(articles).order_by(articles.c.id))).all()
    print(f"{'article':<32} {'views (SQL)':>11}  status")
    for r in rows:
        print(f"{r.title:<32} {r.view_count:>11}  {r.status}")
    print(f"\n{'short link':<12} {'clicks (SQL)':>12}  target")
    async with app.engine.connect() as conn:
        query = select(short_links.c.code, short_links.c.clicks, short_links.c.url)
        for code, clicks, url in (await conn.execute(query.order_by(short_links.c.code))).all():
            print(f"{code:<12} {clicks:>12}  {url}")
    lst = app.listeners
    print(f"\nreward points: {lst.points}; audit rows: {len(lst.audit)}; welcomed: {lst.welcomed}")
    print("\nfailure table:")
    for rec in await app.bus.failures.query(limit=None):
        print(f"  {rec.event_name:<16} {rec.listener:<16} {rec.error_type}: {rec.message}")
    runs = await app.scheduler.runs.query(limit=None)
    print(f"\nrun table ({len(runs)} rows):")
    for task, n in sorted(Tally((r.task_name, r.status) for r in runs).items()):
        print(f"  {task[0]:<14} {task[1]:<10} {n:>3}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m domain", description=__doc__)
    parser.add_argument("--db", type=Path, help="SQLite file (default: in a temporary directory)")
    parser.add_argument("--redis", metavar="URL", help="counters and locks in Redis at URL")
    parser.add_argument("--seconds", type=float, default=10.0, help="scheduler run time")
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO lines")
    parser.add_argument(
        "--web", action="store_true", help="serve domain.web on 127.0.0.1 instead of the script"
    )
    args = parser.parse_args(argv)
    if args.web:
        from .web import main as serve

        forwarded = [] if args.db is None else ["--db", str(args.db)]
        if args.redis is not None:
            forwarded += ["--redis", args.redis]
        return serve(forwarded)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
    )
    demo = functools.partial(run_demo, redis_url=args.redis, seconds=args.seconds)
    if args.db is not None:
        anyio.run(demo, args.db, backend="asyncio")
        return 0
    with tempfile.TemporaryDirectory(prefix="eventbus-demo-") as tmp:
        anyio.run(demo, Path(tmp) / "demo.db", backend="asyncio")
    print("(a temporary database, now removed: pass --db PATH to keep it)")
    return 0
