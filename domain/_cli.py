"""Command-line plumbing of ``python -m domain`` and ``python -m domain.web`` (whose entry is
:func:`domain.web.main`).

Errors a user can fix are one ``error: ...`` line on stderr, never a traceback, with the exit
codes of the ``eventbus`` and ``scheduler`` CLIs: 1 when a server or file named by good input
fails (Redis unreachable, a database that cannot be opened), 2 for bad input (argparse's own
convention). A URL is echoed with its password masked (:func:`eventbus.backends.sql.redact_url`).
``--db`` is a SQLAlchemy URL or a SQLite file path, read by the rule every package shares
(:func:`eventbus.backends.sql.database_url`).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import exc as sa_exc

from eventbus.backends.sql import database_url, make_engine, redact_url
from eventbus.cli import InputError, describe_error

from .exceptions import AdminTokenError

__all__ = [
    "EXIT_FAILED",
    "EXIT_USAGE",
    "InputError",
    "check_reachable",
    "check_redis_url",
    "check_database",
    "port",
    "run_cli",
]

logger = logging.getLogger("domain.web")

EXIT_FAILED = 1
EXIT_USAGE = 2
_UNUSABLE_DB = (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, sa_exc.InvalidRequestError)


def check_redis_url(url: str) -> None:
    """:raises InputError: if *url* is not a ``redis://``, ``rediss://`` or ``unix://`` URL"""
    from redis.connection import parse_url

    try:
        parse_url(url)  # type: ignore[no-untyped-call]
    except ValueError as exc:
        raise InputError(f"--redis {redact_url(url)!r} is not a Redis URL: {exc}") from None


def check_database(db: str | Path) -> None:
    """Check ``--db`` before anything connects: a URL that parses, a known dialect with an
    async driver that is installed, and for a SQLite file, a directory that exists.

    Checked first: aiosqlite reports a failed open from its worker thread after the event loop
    may have closed, as a traceback of its own.

    :raises InputError: for a value that is not a database URL or path, a sync or missing
        driver, or a SQLite file in a directory that does not exist
    :raises sqlalchemy.exc.NoSuchModuleError: for an unknown dialect (:func:`run_cli` makes
        it one line)
    """
    try:
        url = database_url(db)
        url.get_dialect()  # an unknown dialect: SQLAlchemy's own error, one line in run_cli
        make_engine(url)  # builds, connects nothing: a sync or missing driver is refused here
    except ValueError as exc:  # the message names the URL, its password masked
        raise InputError(f"--db {exc}") from None
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
        folder = Path(url.database or "").parent
        if not folder.is_dir():
            raise InputError(
                f"--db {redact_url(str(db))!r}: the directory {str(folder)!r} does not exist; "
                "create it first"
            )


async def check_reachable(db: str | Path, redis_url: str | None) -> None:
    """Open the database and ping Redis, so that a bad ``--db`` or ``--redis`` fails in one
    line before a server starts (an error in an ASGI lifespan is printed as a traceback)."""
    from eventbus.backends.redis import make_redis_client

    engine = make_engine(db)
    try:
        async with engine.connect():
            pass
    finally:
        await engine.dispose()
    if redis_url is not None:
        client = make_redis_client(redis_url)
        try:
            await client.ping()
        finally:
            await client.aclose()


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port (0 to 65535)")
    return value


def run_cli(body: Callable[[], int], *, db: str | Path | None, redis_url: str | None) -> int:
    """Run *body*; the errors a user can fix become one ``error:`` line and an exit code.

    *db* and *redis_url* (as given) name what failed, with their passwords masked.
    """
    from redis.exceptions import RedisError

    try:
        try:
            return body()
        except BaseExceptionGroup as group:  # one error from a task group: report it alone
            raise _sole_leaf(group) from None
    except (InputError, AdminTokenError) as exc:
        return _fail(str(exc), EXIT_USAGE)
    except RedisError as exc:
        where = "Redis" if redis_url is None else f"Redis at {redact_url(redis_url)}"
        return _fail(f"{where} failed: {describe_error(exc)}", EXIT_FAILED)
    except _UNUSABLE_DB as exc:
        return _fail(f"--db {_masked_db(db)!r} cannot be used: {describe_error(exc)}", EXIT_USAGE)
    except (sa_exc.SQLAlchemyError, OSError) as exc:
        name = "" if db is None else f" {_shown_db(db)}"
        return _fail(f"the database{name} failed: {describe_error(exc)}", EXIT_FAILED)
    except KeyboardInterrupt:  # before the demo's own handler is in place: quietly
        return 128 + 2


def _sole_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def _masked_db(db: str | Path | None) -> str:
    return "" if db is None else redact_url(str(db))


def _shown_db(db: str | Path) -> str:
    """The database *db* names, as a URL with its password masked."""
    try:
        return redact_url(database_url(db))
    except ValueError:  # not a database: shown as given, masked
        return redact_url(str(db))


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"error: {message}\n")
    return code
