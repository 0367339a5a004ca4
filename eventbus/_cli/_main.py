"""``python -m eventbus failures list|show|retry|purge``: inspect and retry the failure table;
``python -m eventbus streams ...``: operate durable events (:mod:`eventbus._cli._streams`);
``python -m eventbus doctor``: the version, the extras, a ``scheduler`` name clash
(:mod:`eventbus._cli._doctor`). Installed as the ``eventbus`` command too.

Every command takes ``--db`` (a URL, or the path of a SQLite file: see
:func:`eventbus.backends.sql.database_url`; default ``$EVENTBUS_DB``, else ``eventbus.db`` in
the current directory, the same default as :class:`SqlFailureStore`) and ``--json``. ``retry``
loads the application's bus with ``--app module:attr`` (:func:`eventbus.cli.load_app`).

Exit codes: 0 success; 1 a retried failure failed again, or the database failed (unreachable,
locked); 2 bad usage or bad input (no such database file, no failure table, unknown id, a bad
``--app``). Errors are one line, and a password in ``--db`` is shown as ``***``. Output piped
into a reader that stops early (``| head``) ends the command quietly (status 141).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Any

import anyio

from .._chain import causation_chain
from .._core._bus import EventBus
from .._failures import FailureRecord, FailureStatus
from ..cli import (
    AppLoadError,
    InputError,
    add_version_option,
    describe_error,
    load_app,
    positive_int,
    prog_name,
    quiet_broken_pipe,
)
from ..extras import explain_missing
from ._common import DB_HELP, check_table, find_failure, open_store, store_for, when
from ._doctor import add_doctor_parser, doctor
from ._streams import add_streams_parser

_NO_SQL: ImportError | None = None
try:  # the failure table needs the 'sql' extra; --help, --version and doctor do not
    from sqlalchemy import exc as sa_exc

    from ..backends.sql import SqlFailureStore, database_url, default_db_url, redact_url
except ImportError as exc:
    _NO_SQL = exc

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_ERROR = 1  # the database failed, or a retried failure failed again
EXIT_USAGE = 2

DESCRIPTION = (
    "Inspect, retry and purge the failure table of an eventbus application; operate the "
    "Redis streams of its durable events."
)
Handler = Callable[[argparse.Namespace], Awaitable[int]]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog_name("eventbus", "eventbus"), description=DESCRIPTION
    )
    add_version_option(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    failures = commands.add_parser(
        "failures",
        help="inspect and retry recorded listener failures",
        description="Inspect, retry and purge recorded listener failures.",
    )
    sub = failures.add_subparsers(dest="action", required=True, metavar="ACTION")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", metavar="URL|PATH", help=DB_HELP)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    filters = argparse.ArgumentParser(add_help=False)
    filters.add_argument("--event", metavar="NAME", help="only this event name")
    filters.add_argument("--listener", metavar="NAME", help="only this listener name")
    filters.add_argument(
        "--correlation",
        metavar="ID",
        help="only failures of this correlation id (one chain of events; 'show' prints it)",
    )

    p = sub.add_parser("list", parents=[common, filters], help="a table of failures, newest first")
    p.add_argument("--status", choices=[s.value for s in FailureStatus], help="only this status")
    p.add_argument("--since", type=when, metavar="WHEN", help="last failed at or after WHEN")
    p.add_argument("--limit", type=positive_int, default=50, metavar="N", help="default: 50")
    p.set_defaults(handler=_list)

    p = sub.add_parser("show", parents=[common], help="one failure with payload and traceback")
    p.add_argument("id", metavar="ID", help="a failure id, or a unique prefix of one")
    p.set_defaults(handler=_show)

    p = sub.add_parser("retry", parents=[common, filters], help="re-run pending failures")
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="the application's EventBus, or a function returning one (e.g. 'myapp.events:bus')",
    )
    p.add_argument("--limit", type=positive_int, metavar="N", help="at most N rows")
    p.add_argument("--max-attempts", type=positive_int, default=5, metavar="N", help="default: 5")
    p.set_defaults(handler=_retry)

    p = sub.add_parser("purge", parents=[common], help="delete failures")
    p.add_argument("--status", choices=[s.value for s in FailureStatus], help="only this status")
    p.add_argument("--before", type=when, metavar="WHEN", help="last failed before WHEN")
    p.add_argument("--all", action="store_true", help="required to purge without a filter")
    p.set_defaults(handler=_purge)
    add_streams_parser(commands, db_help=DB_HELP, when=when)
    add_doctor_parser(commands)
    return parser


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor()
    handler: Handler = args.handler
    try:
        if _NO_SQL is not None:
            raise _NO_SQL
        return anyio.run(handler, args, backend="asyncio")
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ImportError as exc:  # an optional library: one line naming the extra
        if (missing := explain_missing(exc, f"{parser.prog} {args.command}")) is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # our reader went away (| head): quiet_broken_pipe ends quietly
    except (sa_exc.SQLAlchemyError, OSError) as exc:
        print(f"error: database{_named_db(args)} failed: {describe_error(exc)}", file=sys.stderr)
        return EXIT_ERROR


def _named_db(args: argparse.Namespace) -> str:
    """`` 'URL'``, the database a ``failures`` command opened (password hidden), so that the
    error names it; empty when the command says no database (``retry --app`` uses the app's)."""
    if args.command != "failures" or (args.db is None and getattr(args, "app", None)):
        return ""
    try:
        return f" {redact_url(database_url(args.db or default_db_url()))!r}"
    except (ValueError, FileNotFoundError):
        return ""


# -- commands ------------------------------------------------------------------------------------


async def _list(args: argparse.Namespace) -> int:
    async with await open_store(args.db) as store:
        records = await store.query(
            status=None if args.status is None else FailureStatus(args.status),
            event=args.event,
            listener=args.listener,
            since=args.since,
            limit=args.limit,
            correlation=args.correlation,
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
    async with await open_store(args.db) as store:
        rec = await find_failure(store, args.id)
        links = await causation_chain(store, rec)
    chain = [(link.event_id or "…", link.event_name) for link in links]
    if args.json:
        _print_json(
            {**_as_dict(rec), "chain": [{"event_id": i, "event_name": n} for i, n in chain]}
        )
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
    if rec.correlation_id is not None:
        print(f"correlation:   {rec.correlation_id}  (failures list --correlation ID)")
        print("chain (first event first):")
        for event_id, name in chain:
            print(_indent(_chain_line(event_id, name, rec)))
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
    try:
        bus = load_app(args.app, EventBus)
    except AppLoadError as exc:
        raise InputError(str(exc)) from None
    if args.db is not None:
        bus.failures = store_for(args.db)
    elif not isinstance(bus.failures, SqlFailureStore):
        raise InputError(
            f"the bus from --app {args.app!r} keeps failures in {type(bus.failures).__name__}, "
            "not in SQL; pass --db URL"
        )
    store = bus.failures
    assert isinstance(store, SqlFailureStore)
    await check_table(store)
    logging.getLogger("eventbus.retry").setLevel(logging.ERROR)  # the report below says it all
    if bus.durable is not None:
        bus.durable.active = False  # redeliver dead durable rows; never consume as a replica
    async with bus:
        report = await bus.retry_failures(
            event=args.event,
            listener=args.listener,
            limit=args.limit,
            max_attempts=args.max_attempts,
            correlation=args.correlation,
        )
    status = EXIT_ERROR if report.failed or report.dead else EXIT_OK
    if args.json:
        counts = {
            k: getattr(report, k) for k in ("resolved", "failed", "dead", "skipped", "redelivered")
        }
        _print_json({**counts, "items": [dataclasses.asdict(i) for i in report.items]})
        return status
    for item in report.items:
        reason = f"  {item.reason}" if item.reason else ""
        print(f"{item.failure_id[:12]}  {item.result:<8}  {item.listener}{reason}")
    print(report)
    return status


async def _purge(args: argparse.Namespace) -> int:
    if args.status is None and args.before is None and not args.all:
        raise InputError("purge needs --status, --before, or --all to delete every failure")
    async with await open_store(args.db) as store:
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


def _chain_line(event_id: str, name: str | None, rec: FailureRecord) -> str:
    if event_id == "…":
        return "…  (not known: events between may have left no failure row)"
    what = name or "(no failure recorded for this event: name not known)"
    mark = "  <- this failure" if event_id == rec.event_id else ""
    return f"{event_id}  {what}{mark}"


def _as_dict(rec: FailureRecord) -> dict[str, Any]:
    out = dataclasses.asdict(rec)
    for key, value in out.items():
        if isinstance(value, datetime):
            out[key] = value.isoformat()
    out["status"] = rec.status.value
    return out


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2))


def _clip(text: str, width: int) -> str:
    text = text.splitlines()[0] if text else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())
