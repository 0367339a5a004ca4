"""``python -m scheduler``: preview cron expressions (``next``), list recorded runs
(``runs``), run a job now (``trigger``), list jobs (``jobs``), and pause or resume a job of
the job table (``pause``, ``resume``; in ``_cli_jobs``).

Each subcommand is one ``_add_<name>(subparsers)`` function that registers its arguments
and a handler ``(args) -> exit code`` through ``set_defaults(handler=...)``; a new one is
added the same way in :func:`build_parser`.

Exit codes: 0 success, 1 the triggered run failed or was skipped, or something outside the
input failed (a database that cannot be reached), 2 bad usage or bad input (argparse's own
convention; an unknown job; an optional library not installed, named with its extra). Either
way the error is one ``error: ...`` line on stderr, never a traceback, and a password in
``--db`` is shown as ``***``. ``--db`` takes a URL or a SQLite path
(:func:`eventbus.backends.sql.database_url`); ``--app`` is read by
:func:`eventbus.cli.load_app`. Output piped into a reader that stops early ends quietly.
Installed as the ``eventbus-scheduler`` command too (not ``scheduler``: a generic word, and the
name of another distribution's package).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from eventbus.cli import add_version_option, positive_int, prog_name, quiet_broken_pipe
from eventbus.extras import explain_missing

from .._cron import CronExpression
from .._exceptions import CronSyntaxError
from .._records import RunRecord
from ._common import (
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    Handler,
    InputError,
    OperationalError,
    add_db,
    close_app,
    load_scheduler,
    open_database,
    reading,
)
from ._jobs import add_jobs, add_pause_resume

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog=prog_name("scheduler", "eventbus-scheduler"),
        description="Preview cron expressions, list jobs and recorded runs, run a job now, "
        "pause or resume a job of the job table.",
    )
    add_version_option(parser)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_next(subparsers)
    _add_runs(subparsers)
    _add_trigger(subparsers)
    add_jobs(subparsers)
    add_pause_resume(subparsers)
    return parser


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OperationalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ImportError as exc:  # an optional library: one line naming the extra
        if (missing := explain_missing(exc, f"{parser.prog} {args.command}")) is None:
            raise
        print(f"error: {missing}", file=sys.stderr)
        return EXIT_USAGE


# -- next ------------------------------------------------------------------------------------


def _add_next(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "next",
        help="print the next fire times of a cron expression",
        description="Print the next fire times of EXPR in its zone and in UTC.",
    )
    p.add_argument("expr", metavar="EXPR", help="5 or 6 fields, or an @preset; quote it")
    p.add_argument("--tz", default="UTC", metavar="ZONE", help="IANA zone (default: UTC)")
    p.add_argument("-n", type=positive_int, default=5, metavar="N", help="how many (default: 5)")
    p.add_argument(
        "--after",
        metavar="ISO",
        help="start after this ISO 8601 time; without an offset it is read in --tz (default: now)",
    )
    p.set_defaults(handler=_run_next)


def _run_next(args: argparse.Namespace) -> int:
    try:
        tz = ZoneInfo(args.tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # 'America' is a directory
        raise InputError(
            f"unknown time zone {args.tz!r}; use an IANA name such as 'Europe/London'"
        ) from None
    try:
        cron = CronExpression(args.expr, tz)
    except CronSyntaxError as exc:
        raise InputError(str(exc)) from None
    if args.after is None:
        after = datetime.now(UTC)
    else:
        try:
            after = datetime.fromisoformat(args.after)
        except ValueError:
            raise InputError(f"--after {args.after!r} is not an ISO 8601 date-time") from None
        if after.tzinfo is None:
            after = after.replace(tzinfo=tz)
    try:
        times = cron.next_times(args.n, after=after)
    except OverflowError as exc:
        raise InputError(str(exc)) from None
    if tz.key == "UTC":  # the zone's column would repeat the UTC one
        print("UTC")
        for t in times:
            print(_utc_text(t))
        return EXIT_OK
    width = len(times[0].isoformat()) if times else 25
    print(f"{tz.key:<{width}}  UTC")
    for t in times:
        print(f"{t.isoformat():<{width}}  {_utc_text(t)}")
    return EXIT_OK


def _utc_text(t: datetime) -> str:
    return t.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- runs ------------------------------------------------------------------------------------


def _add_runs(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list recorded runs, newest first",
        description="List runs from the run table, newest first.",
    )
    add_db(p, required=True)
    p.add_argument("--task", metavar="NAME", help="only this job")
    p.add_argument(
        "--status",
        choices=["running", "succeeded", "failed", "skipped", "abandoned"],
        help="only runs in this status",
    )
    p.add_argument("-n", "--limit", type=positive_int, default=20, metavar="N")
    p.set_defaults(handler=_run_runs)


def _run_runs(args: argparse.Namespace) -> int:
    import anyio

    records = anyio.run(_query_runs, args, backend="asyncio")
    if not records:
        print("no runs match", file=sys.stderr)
        return EXIT_OK
    rows = [
        (
            r.started_at.isoformat(timespec="seconds").replace("+00:00", "Z"),
            r.task_name,
            r.trigger,
            r.status + (" LOCK-LOST" if r.lock_lost else ""),
            "" if r.fence is None else str(r.fence),
            r.replica,
            r.trace_id,
            _result(r),
            (r.error or "").splitlines()[0][:80] if r.error else "",
        )
        for r in records
    ]
    header = (
        "started_at",
        "task",
        "trigger",
        "status",
        "fence",
        "replica",
        "trace",
        "result",
        "error",
    )
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def _result(record: RunRecord) -> str:
    """The run's result as JSON (a repr in angle brackets, as stored), cut at 40 characters."""
    if record.result is None:
        return ""
    text = str(record.result) if record.result_repr else json.dumps(record.result)
    return text if len(text) <= 40 else text[:39] + "…"


async def _query_runs(args: argparse.Namespace) -> list[RunRecord]:
    from ..backends.sql import SqlRunStore

    engine = open_database(args.db)
    async with reading(engine, "runs"):
        store = SqlRunStore(engine, create=False)
        return await store.query(task_name=args.task, status=args.status, limit=args.limit)


# -- trigger ---------------------------------------------------------------------------------


def _add_trigger(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "trigger",
        help="run a job now, through its lock and run table",
        description="Run job NAME of the scheduler at --app now (trigger 'manual'). "
        "Exit code 0 if it succeeded, 1 if it failed or was skipped.",
    )
    p.add_argument("name", metavar="NAME", help="the job's name")
    p.add_argument(
        "--app",
        required=True,
        metavar="MODULE:ATTR",
        help="a Scheduler, or a function returning one (e.g. 'myapp.jobs:sched')",
    )
    p.set_defaults(handler=_run_trigger)


def _run_trigger(args: argparse.Namespace) -> int:
    import anyio

    sched = load_scheduler(args.app)
    if args.name not in {j.name for j in sched.jobs()}:
        known = ", ".join(repr(j.name) for j in sched.jobs()) or "none"
        raise InputError(f"no job named {args.name!r} in {args.app!r}; known jobs: {known}")

    async def trigger() -> RunRecord:
        try:
            return await sched.trigger(args.name)
        finally:
            await close_app(sched)

    rec = anyio.run(trigger, backend="asyncio")
    detail = f": {rec.error}" if rec.error else ""
    print(f"{rec.task_name}: {rec.status} (run {rec.id}, trace {rec.trace_id}){detail}")
    return EXIT_OK if rec.status == "succeeded" else EXIT_FAILED
