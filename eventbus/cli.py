"""Plumbing for command-line tools: load the object ``--app`` names, say what went wrong in
one line, end quietly when the reader of the output goes away (``... | head``), name the
program as it was run, and ``--version``.

``python -m eventbus``, ``python -m scheduler`` and ``python -m domain`` use these, and an
application's own command-line tool can too. Importing this module loads neither SQLAlchemy
nor redis.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from ._exceptions import EventBusError
from ._failures import describe_error
from ._public import show_as_module

__all__ = [
    "AppLoadError",
    "EXIT_BROKEN_PIPE",
    "InputError",
    "add_version_option",
    "describe_error",
    "load_app",
    "positive_int",
    "prog_name",
    "quiet_broken_pipe",
]

T = TypeVar("T")
P = ParamSpec("P")

#: What a command returns when its reader went away: 128 + SIGPIPE, as a shell reports a
#: program that SIGPIPE ended (141 on Linux).
EXIT_BROKEN_PIPE = 128 + int(getattr(signal, "SIGPIPE", 13))


class AppLoadError(EventBusError, ValueError):
    """``--app`` names nothing usable; the message says what and why, on one line."""

    def __init__(self, option: str, spec: str, problem: str) -> None:
        self.spec = spec
        super().__init__(f"{option} {spec!r} {problem}")


class InputError(EventBusError, ValueError):
    """Bad input found after argparse (a missing database file, an unknown id): a command
    prints it as one ``error:`` line and exits with status 2. The commands of ``eventbus``,
    ``scheduler`` and ``domain`` raise this one."""


def load_app(spec: str, kind: type[T], *, option: str = "--app") -> T:
    """The *kind* instance that ``package.module:attribute`` names (the attribute may be
    dotted, ``module:app.bus``); a callable that is not a *kind* is called with no arguments,
    as a factory, and must return one.

    :raises AppLoadError: for a malformed spec, a module that cannot be imported or raises
        while importing, a missing attribute, a factory that raises, or an object of another
        type; the message is one line and names the culprit
    """
    module_name, sep, attr = spec.partition(":")
    wanted = _a(kind.__name__)
    if not sep or not module_name or not attr:
        raise AppLoadError(option, spec, "must look like 'package.module:attribute'")
    try:
        obj: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppLoadError(
            option, spec, f"cannot be loaded: cannot import {module_name!r} ({_line(exc)})"
        ) from None
    except Exception as exc:  # the module itself raised while being imported
        problem = f"cannot be loaded: importing {module_name!r} raised {describe_error(exc)}"
        raise AppLoadError(option, spec, problem) from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise AppLoadError(
                option, spec, f"cannot be loaded: {module_name!r} has no attribute {attr!r}"
            ) from None
    if not isinstance(obj, kind) and callable(obj):
        try:
            obj = obj()
        except Exception as exc:
            raise AppLoadError(
                option,
                spec,
                f"is a callable that failed when called with no arguments ({describe_error(exc)}); "
                f"name {wanted} or a factory returning one",
            ) from None
        if inspect.isawaitable(obj):
            if inspect.iscoroutine(obj):
                obj.close()  # never awaited, and never warned about
            raise AppLoadError(
                option, spec, f"is an async function; name {wanted} or a plain factory"
            )
    if not isinstance(obj, kind):
        raise AppLoadError(option, spec, f"is {_a(type(obj).__name__)}, not {wanted}")
    return obj


def positive_int(text: str) -> int:
    """An argparse ``type=``: a whole number, 1 or more (``--limit``, ``-n``).

    :raises argparse.ArgumentTypeError: naming *text*, for anything else
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def quiet_broken_pipe(main: Callable[P, int]) -> Callable[P, int]:
    """Wrap a command's ``main`` so that output piped into a reader that stops early
    (``| head``) ends the command quietly: no message, exit status :data:`EXIT_BROKEN_PIPE`.

    Only a ``BrokenPipeError`` that reaches ``main``'s caller counts: a command reports the
    ones its own connections raise (a database, Redis) itself.
    """

    @functools.wraps(main)
    def run(*args: P.args, **kwargs: P.kwargs) -> int:
        try:
            status = main(*args, **kwargs)
            sys.stdout.flush()  # a pipe gone while Python wrote its buffer: here, not at exit
            return status
        except BrokenPipeError:
            _discard_stdout()
            return EXIT_BROKEN_PIPE

    return run


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush at exit finds nothing
    to complain about ("Exception ignored ... BrokenPipeError", exit status 120)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # replaced by a test, or closed
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, fd)
    finally:
        os.close(devnull)


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def prog_name(module: str, script: str) -> str:
    """The program's name for its usage line: *script* when run as that installed command
    (``eventbus-scheduler``), else ``python -m module``."""
    return script if Path(sys.argv[0]).name == script else f"python -m {module}"


class _VersionAction(argparse.Action):
    """``--version``: reads the version only when asked (importlib.metadata is slow to load)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from ._version import version

        sys.stdout.write(f"{parser.prog} {version()}\n")
        parser.exit()


def add_version_option(parser: argparse.ArgumentParser) -> None:
    """Add ``--version``: prints the program's name and the version of eventbus (the
    distribution, which ships ``scheduler`` too), and exits 0."""
    parser.add_argument(
        "--version", action=_VersionAction, help="print the version of eventbus and exit"
    )


# Written beside the failure records it also serves (the backends' log lines use it).
show_as_module(__name__, describe_error, within="eventbus")
