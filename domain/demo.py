"""The demo: every domain module at work for a few seconds, then a summary of what happened.

Runs on embedded defaults (a SQLite file in a temporary directory, memory counters, a local
lock); ``--redis URL`` moves counters and locks to Redis. Finishes in well under 30 s.
SIGTERM or SIGINT (Ctrl-C) stops it early the clean way: the bus drains, the scheduler stops,
the counters are flushed, the summary is printed, the temporary directory is removed; the
exit status is then 128 + the signal's number, as a shell reports it.
"""

from __future__ import annotations

import argparse
import functools
import logging
import signal
import sys
import tempfile
import time
from collections import Counter as Tally
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import anyio
from anyio import CancelScope
from sqlalchemy import func, insert, select

from eventbus import FailureRecord
from eventbus.backends.sql import redact_url

from ._cli import InputError, check_database, check_redis_url, run_cli
from .app import App, Schedules
from .db import articles, short_links
from .events import ArticleViewed, OrderPaid, UserRegistered
from .exceptions import DomainError, MailDeliveryError
from .listeners import BOUNCING_DOMAIN

__all__ = ["main", "run_demo"]

ARTICLES = {1: "Why 302 and not 301", 2: "Counting views exactly once", 3: "Cron with seconds"}


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 66 - len(title)))


async def run_demo(
    db: str | Path, *, redis_url: str | None = None, seconds: float = 10.0, kept: bool = True
) -> signal.Signals | None:
    """Drive the app on *db* for *seconds* of scheduler time and print a summary.

    :param kept: *db* outlives the demo; else (a temporary file) no printed command names it

    :return: the signal (SIGTERM, SIGINT) that cut the run short, or ``None``
    :raises InputError: if *db* already holds articles (the demo inserts its own)
    """
    started = time.monotonic()
    stopped_by: list[signal.Signals] = []
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with App.embedded(
            db, redis_url=redis_url, schedules=Schedules.fast(), refill_watermark=20
        ) as app:
            await _refuse_used_database(app)
            shown = _FailureLines(app, kept=kept)
            app.bus.on_failure = shown
            async with anyio.create_task_group() as tg:
                tg.start_soon(_stop_on_signal, signals, tg.cancel_scope, stopped_by)
                await _scenario(app, seconds, shown)
                tg.cancel_scope.cancel()
            await app.views.flush()  # what the next flush job would do, before we read SQL
            await app.links.flush_clicks()
            await app.bus.failures.flush()
            await _summary(app)
    print(f"\ndemo finished in {time.monotonic() - started:.1f} s; database: {redact_url(str(db))}")
    return stopped_by[0] if stopped_by else None


async def _stop_on_signal(
    signals: AsyncIterator[int], scope: CancelScope, stopped_by: list[signal.Signals]
) -> None:
    """Cut the scenario short at the first signal; later ones wait for the clean stop."""
    async for signum in signals:
        stopped_by.append(signal.Signals(signum))
        print(
            f"\n{stopped_by[0].name}: stopping early: draining the bus, stopping the scheduler, "
            "flushing the counters"
        )
        scope.cancel()
        return


async def _refuse_used_database(app: App) -> None:
    async with app.engine.connect() as conn:
        used = await conn.scalar(select(func.count()).select_from(articles))
    if used:
        raise InputError(
            f"the database {app.engine.url.render_as_string()} already holds articles (an earlier "
            "run?); the demo needs an empty one: give a new --db"
        )


class _FailureLines:
    """The bus's ``on_failure`` hook: every captured failure as one line, and the command that
    shows its traceback (in the failure table); :attr:`planned` is set by the planned one."""

    def __init__(self, app: App, *, kept: bool = True) -> None:
        self.db = app.engine.url.render_as_string(hide_password=True)
        self.kept = kept
        self.planned = anyio.Event()

    def __call__(self, rec: FailureRecord) -> None:
        planned = rec.error_type.endswith(MailDeliveryError.__name__)
        print(
            f"  listener {rec.listener!r} failed on {rec.event_name!r}"
            f"{' (as planned)' if planned else ''}: {rec.error_type}: {rec.message}"
        )
        if self.kept:
            print(
                "  traceback in the failure table: "
                f"python -m eventbus failures show {rec.id[:12]} --db {self.db}"
            )
        else:  # a command naming the temporary file would fail once the demo removes it
            print(
                "  traceback in the failure table of this run's temporary database; to read "
                "it afterwards: make demo DEMO_ARGS='--db demo.db', then "
                "python -m eventbus failures show ID --db demo.db"
            )
        if planned:
            self.planned.set()


def _not_the_planned_failure(record: logging.LogRecord) -> bool:
    """The bus logs a captured failure with its traceback; the demo shows its planned one
    itself, in one line (:class:`_FailureLines`). Any other failure is logged in full."""
    exc = record.exc_info[1] if record.exc_info else None
    from_the_bus = record.name == "eventbus" or record.name.startswith("eventbus.")
    return not (from_the_bus and isinstance(exc, MailDeliveryError))


async def _scenario(app: App, seconds: float, shown: _FailureLines) -> None:
    async with app.engine.begin() as conn:
        await conn.execute(insert(articles), [{"id": i, "title": t} for i, t in ARTICLES.items()])
    _section("events")
    for uid, email in enumerate(["ada@example.com", f"bob@{BOUNCING_DOMAIN}", "cy@example.com"]):
        app.bus.emit(UserRegistered(user_id=uid + 1, email=email))
    for oid, (uid, amount) in enumerate([(1, "19.90"), (2, "5.00"), (1, "42.00")]):
        app.bus.emit(OrderPaid(order_id=100 + oid, user_id=uid, amount=Decimal(amount)))
    print("registered 3 users (one address bounces on purpose), paid 3 orders")
    with anyio.move_on_after(5):  # shown here, not under the next heading
        await shown.planned.wait()

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
    """``python -m domain``; returns the exit status (errors are one line, see :mod:`._cli`)."""
    parser = argparse.ArgumentParser(prog="python -m domain", description=__doc__)
    parser.add_argument(
        "--db", metavar="PATH|URL", help="SQLite file or SQLAlchemy URL (default: a temporary file)"
    )
    parser.add_argument("--redis", metavar="URL", help="counters and locks in Redis at URL")
    parser.add_argument("--seconds", type=float, default=10.0, help="scheduler run time")
    parser.add_argument("-v", "--verbose", action="store_true", help="log INFO lines")
    parser.add_argument(
        "--web",
        action="store_true",
        help="serve domain.web and its console on 127.0.0.1 with demo data, instead of the script",
    )
    args = parser.parse_args(argv)
    if args.web:
        from .web_demo import serve_demo

        return serve_demo(args.db, args.redis)
    handler = logging.StreamHandler()
    handler.addFilter(_not_the_planned_failure)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        handlers=[handler],
    )
    return run_cli(functools.partial(_run, args), db=args.db, redis_url=args.redis)


def _run(args: argparse.Namespace) -> int:
    if args.db is not None:
        check_database(args.db)
    if args.redis is not None:
        check_redis_url(args.redis)
    demo = functools.partial(run_demo, redis_url=args.redis, seconds=args.seconds)
    if args.db is not None:
        stopped = anyio.run(demo, args.db, backend="asyncio")
    else:
        with tempfile.TemporaryDirectory(prefix="eventbus-demo-") as tmp:
            stopped = anyio.run(
                functools.partial(demo, kept=False), Path(tmp) / "demo.db", backend="asyncio"
            )
        print(
            "(a temporary database, now removed: --db PATH keeps it, as in "
            "make demo DEMO_ARGS='--db demo.db')"
        )
    sys.stdout.flush()
    return 0 if stopped is None else 128 + stopped
