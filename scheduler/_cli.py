"""``python -m scheduler``: inspect cron expressions (and, later, runs and jobs).

Each subcommand is one ``_add_<name>(subparsers)`` function that registers its arguments
and a handler ``(args) -> exit code`` through ``set_defaults(handler=...)``; add
``runs`` and ``trigger`` the same way in :func:`build_parser`.

Exit codes: 0 success, 2 bad usage or bad input (argparse's own convention).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ._cron import CronExpression
from ._exceptions import CronSyntaxError

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


class _InputError(Exception):
    """Bad input found after argparse: printed as one line, exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with one subparser per command."""
    parser = argparse.ArgumentParser(prog="python -m scheduler", description=__doc__.split("\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_next(subparsers)
    return parser


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
    except (ZoneInfoNotFoundError, ValueError):
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
