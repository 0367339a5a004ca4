"""What the commands of ``python -m scheduler`` share: exit codes, the two errors that are
printed as one line, ``--db`` and ``--app``, and reading a database with its errors told as
one line."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from eventbus.cli import AppLoadError, InputError, describe_error, load_app

from .._core._loop import Scheduler

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "Handler",
    "InputError",
    "OperationalError",
    "add_db",
    "close_app",
    "load_scheduler",
    "open_database",
    "reading",
]

EXIT_OK = 0
EXIT_FAILED = 1  # trigger: the run failed or was skipped; a database cannot be reached
EXIT_USAGE = 2

Handler = Callable[[argparse.Namespace], int]


class OperationalError(Exception):
    """Good input, but something it names failed (unreachable database): one line, exit 1."""


def add_db(
    p: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup, *, required: bool = False
) -> None:
    p.add_argument(
        "--db", required=required, metavar="URL|PATH", help="a database URL or a SQLite file path"
    )


def open_database(value: str) -> AsyncEngine:
    """An engine for ``--db`` (a URL or a SQLite path); a missing SQLite file is refused, not
    created (connecting would create an empty one)."""
    from eventbus.backends.sql import database_url, make_engine

    try:  # the URL first (driver, dialect), then the file
        engine = make_engine(database_url(value))
        database_url(engine.url, must_exist=True)
    except (ValueError, FileNotFoundError) as exc:  # names the URL, its password masked
        raise InputError(f"--db {exc}") from None
    return engine


@asynccontextmanager
async def reading(engine: AsyncEngine, what: str) -> AsyncIterator[None]:
    """Turn the database's errors into one line: ``cannot read WHAT from URL: reason`` (exit
    2) or ``cannot reach the database at URL`` (exit 1); the engine is disposed after."""
    from sqlalchemy.exc import DBAPIError

    from eventbus.backends.sql import redact_url

    where = redact_url(engine.url)
    try:
        yield
    except DBAPIError as exc:
        raise InputError(f"cannot read {what} from {where!r}: {exc.orig}") from None
    except (OSError, TimeoutError) as exc:
        raise OperationalError(
            f"cannot reach the database at {where!r}: {describe_error(exc)}"
        ) from None
    finally:
        await engine.dispose()


def load_scheduler(spec: str) -> Scheduler:
    """The Scheduler ``--app`` names (:func:`eventbus.cli.load_app`), or one error line."""
    try:
        return load_app(spec, Scheduler)
    except AppLoadError as exc:
        raise InputError(str(exc)) from None


async def close_app(sched: Scheduler) -> None:
    """This process ends here: close the app's run store, and an engine it was handed too."""
    await sched.runs.aclose()
    engine = getattr(sched.runs, "engine", None)
    if engine is not None and hasattr(engine, "dispose"):
        await engine.dispose()
