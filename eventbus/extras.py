"""The optional parts and the extras that install them: a missing one is named in one line.

``pip install eventbus`` installs the core only (anyio, tzdata): the bus, the memory failure
store, the scheduler with its memory and local backends, and the CLIs' ``--help``. Each module
that needs more begins with a guard, placed before its first optional import::

    from ..extras import missing_extra

    if _missing := missing_extra(__name__, "sql"):
        raise _missing

so that importing it without the extra fails with one line that says what to install,
``eventbus.backends.sql needs the 'sql' extra (sqlalchemy is not installed): pip install
'eventbus[sql]'``, instead of a ``ModuleNotFoundError`` for a library the user never chose.
The guard looks the libraries up with :func:`importlib.util.find_spec` and imports nothing.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence

from ._exceptions import EventBusError

__all__ = ["EXTRAS", "MissingExtraError", "explain_missing", "missing_extra"]

#: extra -> the modules of its libraries that our code imports (or that SQLAlchemy's async
#: engine imports for us: greenlet, and aiosqlite for the default SQLite URLs)
EXTRAS: dict[str, tuple[str, ...]] = {
    "sql": ("sqlalchemy", "greenlet", "aiosqlite", "platformdirs"),
    "postgres": ("asyncpg",),
    "redis": ("redis",),
    "pyee": ("pyee",),
    "web": ("starlette", "jinja2", "itsdangerous"),
    "otel": ("opentelemetry.trace",),
}


class MissingExtraError(EventBusError, ImportError):
    """An optional part was used without the extra that installs its libraries."""

    def __init__(self, what: str, extras: Sequence[str], missing: Sequence[str]) -> None:
        self.what = what
        self.extras = tuple(extras)
        self.missing = tuple(missing)
        names = " and ".join(repr(e) for e in self.extras)
        plural = "s" if len(self.extras) > 1 else ""
        verb = "is" if len(self.missing) == 1 else "are"
        super().__init__(
            f"{what} needs the {names} extra{plural} ({', '.join(self.missing)} {verb} not "
            f"installed): pip install 'eventbus[{','.join(self.extras)}]'",
            name=what,
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent of a dotted name is missing
        return False


def missing_extra(what: str, *extras: str) -> MissingExtraError | None:
    """The error to raise when a library of one of *extras* is not installed, else ``None``.

    :param what: what needs them, usually the module's ``__name__`` (or a command's name)
    :raises KeyError: if an extra is not in :data:`EXTRAS`
    """
    missing = [m.split(".")[0] for extra in extras for m in EXTRAS[extra] if not _installed(m)]
    return MissingExtraError(what, extras, missing) if missing else None


def explain_missing(exc: ImportError, what: str) -> MissingExtraError | None:
    """*exc* told as the extra that is missing, if it is one: a :class:`MissingExtraError`
    already, or a ``ModuleNotFoundError`` for a library an extra installs; else ``None``.

    For a command-line tool whose code imports an optional library late (inside a command),
    so that it can print one line instead of a traceback.
    """
    if isinstance(exc, MissingExtraError):
        return exc
    if not isinstance(exc, ModuleNotFoundError) or exc.name is None:
        return None
    top = exc.name.split(".")[0]
    for extra, modules in EXTRAS.items():
        if any(m.split(".")[0] == top for m in modules):
            return missing_extra(what, extra) or MissingExtraError(what, [extra], [top])
    return None
