"""``python -m scheduler``: preview cron expressions (``next``), list recorded runs
(``runs``) and run a job now (``trigger``).

Each subcommand is one ``_add_<name>(subparsers)`` function that registers its arguments
and a handler ``(args) -> exit code`` through ``set_defaults(handler=...)``; a new one is
added the same way in :func:`build_parser`.

Exit codes: 0 success, 1 the triggered run failed or was skipped, or something outside the
input failed (a database that cannot be reached), 2 bad usage or bad input (argparse's own
convention). Either way the error is one ``error: ...`` line on stderr, never a traceback, and a
password in ``--db`` is shown as ``***``. ``--db`` takes a URL or a SQLite path
(:func:`eventbus.backends.sql.database_url`); ``--app`` is read by
:func:`eventbus.cli.load_app`. Output piped into a reader that stops early ends quietly.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from eventbus.cli import AppLoadError, load_app, quiet_broken_pipe

from ._cron import CronExpression
from ._exceptions import CronSyntaxError
from ._loop import Scheduler
from ._records import RunRecord

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1  # trigger: the run failed or was skipped
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


class _InputError(Exception):
    """Bad input found after argparse: printed as one line, exit code 2."""


class _OperationalError(Exception):
    """Good input, but something it names failed (unreachable database): one line, exit 1."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
    parser = argparse.ArgumentParser(
        prog="python -m scheduler",
        description="Preview cron expressions, list recorded runs and run a job now.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_next(subparsers)
    _add_runs(subparsers)
    _add_trigger(subparsers)
    return parser


@quiet_broken_pipe
def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit code instead of exiting, so tests can call it."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except _InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except _OperationalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILED


# -- next ------------------------------------------------------------------------------------


def _add_next(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "next",
        help="print the next fire times of a cron expression",
        description="Print the next fire times of EXPR in its zone and in UTC.",
    )
    p.add_argument("expr", metavar="EXPR", help="5 or 6 fields, or an @preset; quote it")
    p.add_argument("--tz", default="UTC", metavar="ZONE", help="IANA zone (default: UTC)")
    p.add_argument("-n", type=_positive_int, default=5, metavar="N", help="how many (default: 5)")
    p.add_argument(
        "--after",
        metavar="ISO",
        help="start after this ISO 8601 time; without an offset it is read in --tz (default: now)",
    )
    p.set_defaults(handler=_run_next)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _run_next(args: argparse.Namespace) -> int:
    try:
        tz = ZoneInfo(args.tz)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # 'America' is a directory
        raise _InputError(
            f"unknown time zone {args.tz!r}; use an IANA name such as 'Europe/London'"
        ) from None
    try:
        cron = CronExpression(args.expr, tz)
    except CronSyntaxError as exc:
        raise _InputError(str(exc)) from None
    if args.after is None:
        after = datetime.now(UTC)
    else:
        try:
            after = datetime.fromisoformat(args.after)
        except ValueError:
            raise _InputError(f"--after {args.after!r} is not an ISO 8601 date-time") from None
        if after.tzinfo is None:
            after = after.replace(tzinfo=tz)
    try:
        times = cron.next_times(args.n, after=after)
    except OverflowError as exc:
        raise _InputError(str(exc)) from None
    width = len(times[0].isoformat()) if times else 25
    print(f"{tz.key:<{width}}  UTC")
    for t in times:
        print(f"{t.isoformat():<{width}}  {t.astimezone(UTC).isoformat().replace('+00:00', 'Z')}")
    return EXIT_OK


# -- runs ------------------------------------------------------------------------------------


def _add_runs(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list recorded runs, newest first",
        description="List runs from the run table, newest first.",
    )
    p.add_argument(
        "--db", required=True, metavar="URL|PATH", help="a database URL or a SQLite file path"
    )
    p.add_argument("--task", metavar="NAME", help="only this job")
    p.add_argument(
        "--status",
        choices=["running", "succeeded", "failed", "skipped", "abandoned"],
        help="only runs in this status",
    )
    p.add_argument("-n", "--limit", type=_positive_int, default=20, metavar="N")
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
            (r.error or "").splitlines()[0][:80] if r.error else "",
        )
        for r in records
    ]
    header = ("started_at", "task", "trigger", "status", "fence", "replica", "trace", "error")
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=True)]
    for row in (header, *rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


async def _query_runs(args: argparse.Namespace) -> list[RunRecord]:
    from sqlalchemy.exc import DBAPIError, InvalidRequestError

    from eventbus.backends.sql import database_url, redact_url

    from .backends.sql import SqlRunStore

    url = redact_url(args.db)
    try:  # the URL first (driver, dialect), then the file: connecting would create it
        store = SqlRunStore.from_url(database_url(args.db), create=False)
        database_url(store.engine.url, must_exist=True)
    except (ValueError, FileNotFoundError) as exc:  # names the URL, its password masked
        raise _InputError(f"--db {exc}") from None
    where = redact_url(store.engine.url)
    try:
        return await store.query(task_name=args.task, status=args.status, limit=args.limit)
    except DBAPIError as exc:
        raise _InputError(f"cannot read runs from {where!r}: {exc.orig}") from None
    except InvalidRequestError as exc:
        raise _InputError(_not_async(url, exc)) from None
    except (OSError, TimeoutError) as exc:
        raise _OperationalError(
            f"cannot reach the database at {where!r}: {type(exc).__name__}: {exc}"
        ) from None
    finally:
        await store.aclose()


def _not_async(url: str, exc: Exception) -> str:
    return (
        f"--db {url!r} does not name an async driver ({exc}); "
        "use e.g. 'sqlite+aiosqlite:///runs.db' or 'postgresql+asyncpg://host/db'"
    )


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

    try:
        sched = load_app(args.app, Scheduler)
    except AppLoadError as exc:
        raise _InputError(str(exc)) from None
    if args.name not in {j.name for j in sched.jobs()}:
        known = ", ".join(repr(j.name) for j in sched.jobs()) or "none"
        raise _InputError(f"no job named {args.name!r} in {args.app!r}; known jobs: {known}")

    async def trigger() -> RunRecord:
        try:
            return await sched.trigger(args.name)
        finally:
            await sched.runs.aclose()
            # This process ends here: dispose an engine the app handed to its store too.
            engine = getattr(sched.runs, "engine", None)
            if engine is not None and hasattr(engine, "dispose"):
                await engine.dispose()

    rec = anyio.run(trigger, backend="asyncio")
    detail = f": {rec.error}" if rec.error else ""
    print(f"{rec.task_name}: {rec.status} (run {rec.id}, trace {rec.trace_id}){detail}")
    return EXIT_OK if rec.status == "succeeded" else EXIT_FAILED
