"""``python -m eventbus failures list|show|retry|purge``: inspect and retry the failure table.

Every command takes ``--db URL`` (default: ``$EVENTBUS_DB``, else ``sqlite+aiosqlite:///
eventbus.db`` in the current directory, the same default as :class:`SqlFailureStore`) and
``--json``. ``retry`` imports the application's bus with ``--app module:attr``.

Exit codes: 0 success; 1 the database failed (unreachable, locked); 2 bad usage or bad input
(no such database file, no failure table, unknown id, a bad ``--app``). Errors are one line.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import logging
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ._bus import EventBus
from ._failures import FailureRecord, FailureStatus
from .backends.sql import SqlFailureStore, default_db_url

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], Awaitable[int]]


class _InputError(Exception):
    """Bad input found after argparse: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eventbus", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    failures = commands.add_parser("failures", help="inspect and retry recorded listener failures")
    sub = failures.add_subparsers(dest="action", required=True, metavar="ACTION")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--db", metavar="URL", help="SQLAlchemy async URL (default: $EVENTBUS_DB or ./eventbus.db)"
    )
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--event", metavar="NAME", help="only this event name")
    filters.add_argument("--listener", metavar="NAME", help="only this listener name")

    p = sub.add_parser("list", parents=[common, filters], help="a table of failures, newest first")
    p.add_argument("--status", choices=[s.value for s in FailureStatus], help="only this status")
    p.add_argument("--since", type=_when, metavar="WHEN", help="last failed at or after WHEN")
    p.add_argument("--limit", type=_positive_int, default=50, metavar="N", help="default: 50")
    p.set_defaults(handler=_list)

    p = sub.add_parser("show", parents=[common], help="one failure with payload and traceback")
    p.add_argument("id", metavar="ID", help="a failure id, or a unique prefix of one")
    p.set_defaults(handler=_show)

    p = sub.add_parser("retry", parents=[common, filters], help="re-run pending failures")
    p.add_argument("--app", required=True, metavar="MODULE:ATTR", help="the application's bus")
    p.add_argument("--limit", type=_positive_int, metavar="N", help="at most N rows")
    p.add_argument("--max-attempts", type=_positive_int, default=5, metavar="N", help="default: 5")
    p.set_defaults(handler=_retry)

    p = sub.add_parser("purge", parents=[common], help="delete failures")
    p.add_argument("--status", choices=[s.value for s in FailureStatus], help="only this status")
    p.add_argument("--before", type=_when, metavar="WHEN", help="last failed before WHEN")
    p.add_argument("--all", action="store_true", help="required to purge without a filter")
    p.set_defaults(handler=_purge)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it."""
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return anyio.run(handler, args, backend="asyncio")
    except _InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (sa_exc.SQLAlchemyError, OSError) as exc:
        print(f"error: database failed: {_one_line(exc)}", file=sys.stderr)
        return EXIT_ERROR


# -- commands ------------------------------------------------------------------------------------


async def _list(args: argparse.Namespace) -> int:
    async with await _open(args.db) as store:
        records = await store.query(
            status=None if args.status is None else FailureStatus(args.status),
            event=args.event,
            listener=args.listener,
            since=args.since,
            limit=args.limit,
        )
    if args.json:
        _print_json([_as_dict(r) for r in records])
        return EXIT_OK
    if not records:
        print("no failures match")
        return EXIT_OK
    header = ("ID", "STATUS", "TRIES", "LAST FAILED (UTC)", "EVENT", "LISTENER", "ERROR")
    rows = [
        (
            r.id[:12],
            r.status.value,
            str(r.attempts),
            r.last_failed_at.strftime("%Y-%m-%d %H:%M:%S"),
            r.event_name,
            r.listener,
            _clip(f"{r.error_type}: {r.message}", 60),
        )
        for r in records
    ]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    more = " (--limit reached)" if len(records) == args.limit else ""
    print(f"{len(records)} failure{'s' if len(records) != 1 else ''}{more}")
    return EXIT_OK


async def _show(args: argparse.Namespace) -> int:
    async with await _open(args.db) as store:
        rec = await _find(store, args.id)
    if args.json:
        _print_json(_as_dict(rec))
        return EXIT_OK
    at = "%Y-%m-%d %H:%M:%S.%f UTC"
    print(f"id:            {rec.id}")
    print(f"event:         {rec.event_name}  (event id {rec.event_id})")
    print(f"listener:      {rec.listener}")
    print(f"status:        {rec.status.value}  (attempts: {rec.attempts})")
    print(f"first failed:  {rec.first_failed_at.strftime(at)}")
    print(f"last failed:   {rec.last_failed_at.strftime(at)}")
    if rec.resolved_at is not None:
        print(f"resolved:      {rec.resolved_at.strftime(at)}")
    if rec.note:
        print(f"note:          {rec.note}")
    print(f"error:         {rec.error_type}: {rec.message}")
    if rec.payload_ok:
        print("payload:")
        print(_indent(json.dumps(json.loads(rec.payload), indent=2, sort_keys=True)))
    else:
        print("payload (not JSON-encodable, kept as repr; cannot be retried):")
        print(_indent(rec.payload))
    print("traceback:")
    print(_indent(rec.traceback.rstrip("\n")))
    return EXIT_OK


async def _retry(args: argparse.Namespace) -> int:
    bus = _load_app(args.app)
    if args.db is not None:
        bus.failures = SqlFailureStore(args.db, create_table=False)
    elif not isinstance(bus.failures, SqlFailureStore):
        raise _InputError(
            f"the bus from --app {args.app!r} keeps failures in {type(bus.failures).__name__}, "
            "not in SQL; pass --db URL"
        )
    store = bus.failures
    assert isinstance(store, SqlFailureStore)
    await _check_table(store)
    logging.getLogger("eventbus.retry").setLevel(logging.ERROR)  # the report below says it all
    async with bus:
        report = await bus.retry_failures(
            event=args.event,
            listener=args.listener,
            limit=args.limit,
            max_attempts=args.max_attempts,
        )
    if args.json:
        counts = {k: getattr(report, k) for k in ("resolved", "failed", "dead", "skipped")}
        _print_json({**counts, "items": [dataclasses.asdict(i) for i in report.items]})
        return EXIT_OK
    for item in report.items:
        reason = f"  {item.reason}" if item.reason else ""
        print(f"{item.failure_id[:12]}  {item.result:<8}  {item.listener}{reason}")
    print(report)
    return EXIT_OK


async def _purge(args: argparse.Namespace) -> int:
    if args.status is None and args.before is None and not args.all:
        raise _InputError("purge needs --status, --before, or --all to delete every failure")
    async with await _open(args.db) as store:
        n = await store.purge(
            status=None if args.status is None else FailureStatus(args.status),
            before=args.before,
        )
    if args.json:
        _print_json({"purged": n})
    else:
        print(f"purged {n} failure{'s' if n != 1 else ''}")
    return EXIT_OK


# -- helpers -------------------------------------------------------------------------------------


async def _open(url: str | None) -> SqlFailureStore:
    """A store on an existing database and table; never creates either."""
    url = url or default_db_url()
    try:
        sa.make_url(url)
    except sa_exc.ArgumentError:
        raise _InputError(f"--db {url!r} is not a database URL") from None
    try:
        store = SqlFailureStore(url, create_table=False)
    except ValueError as exc:
        raise _InputError(f"--db {exc}") from None
    try:
        await _check_table(store)
    except BaseException:
        await store.aclose()
        raise
    return store


async def _check_table(store: SqlFailureStore) -> None:
    """An existing SQLite file (connecting would create it) with the failure table in it."""
    url = store.engine.url
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        path = anyio.Path(url.database or "")
        if not await path.is_file():
            raise _InputError(
                f"no database file at {str(path)!r} "
                f"(from {url.render_as_string(hide_password=True)!r})"
            )
    name = store.table.name
    async with store.engine.connect() as conn:
        present = await conn.run_sync(lambda c: sa.inspect(c).has_table(name))
    if not present:
        raise _InputError(
            f"no table {name!r} in {url.render_as_string(hide_password=True)!r}; the "
            "application creates it when it starts (or call "
            "eventbus.backends.sql.create_tables(engine))"
        )


async def _find(store: SqlFailureStore, key: str) -> FailureRecord:
    rec = await store.get(key)
    if rec is not None:
        return rec
    pattern = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    stmt = sa.select(store.table.c.id).where(store.table.c.id.like(pattern, escape="\\")).limit(2)
    async with store.engine.connect() as conn:
        ids = list((await conn.execute(stmt)).scalars())
    if len(ids) > 1:
        raise _InputError(f"id prefix {key!r} matches several failures; give more characters")
    rec = await store.get(ids[0]) if ids else None
    if rec is None:
        raise _InputError(f"no failure with id {key!r}; 'failures list' shows the ids")
    return rec


def _load_app(spec: str) -> EventBus:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise _InputError(f"--app {spec!r} must look like 'package.module:bus'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise _InputError(f"--app {spec!r}: cannot import {module_name!r} ({exc})") from None
    except Exception as exc:
        raise _InputError(f"--app {spec!r}: importing {module_name!r} raised {exc!r}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _InputError(
                f"--app {spec!r}: {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(obj, EventBus) and callable(obj):
        obj = obj()  # a factory
    if not isinstance(obj, EventBus):
        raise _InputError(f"--app {spec!r} is a {type(obj).__name__}, not an EventBus")
    return obj


_RELATIVE = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def _when(text: str) -> datetime:
    """ISO 8601 (naive means UTC) or an age such as ``30m``, ``12h``, ``7d`` before now."""
    m = _RELATIVE.match(text)
    if m:
        return datetime.now(UTC) - timedelta(**{_UNITS[m[2]]: int(m[1])})
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an ISO 8601 time nor an age like 30m, 12h, 7d"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _as_dict(rec: FailureRecord) -> dict[str, Any]:
    out = dataclasses.asdict(rec)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
    out["status"] = rec.status.value
    return out


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def _one_line(exc: BaseException) -> str:
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc).strip().splitlines()
    return f"{type(orig or exc).__name__}: {text[0] if text else ''}"


def _clip(text: str, width: int) -> str:
    text = text.splitlines()[0] if text else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
