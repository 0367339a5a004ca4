"""``eventbus.cli``: the one ``--app`` loader, the one-line error, and the broken-pipe guard
every CLI shares."""

from __future__ import annotations

import argparse
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from eventbus import EventBus, EventBusError
from eventbus.cli import (
    EXIT_BROKEN_PIPE,
    AppLoadError,
    describe_error,
    load_app,
    positive_int,
    quiet_broken_pipe,
)

ROOT = Path(__file__).resolve().parents[3]

APP = """
from eventbus import EventBus

bus = EventBus()

class Holder:
    bus = bus

def make():
    return bus

def broken():
    raise RuntimeError("no config file\\nsecond line")

async def make_async():
    return bus

def make_wrong():
    return 42

raise_on_import = False
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"loadapp_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(APP))
    (tmp_path / f"{name}_bad.py").write_text("raise KeyError('DATABASE_URL')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


@pytest.mark.parametrize("attr", ["bus", "make", "Holder.bus"])
def test_load_app_returns_the_instance_a_factory_or_a_dotted_path_names(
    app: str, attr: str
) -> None:
    loaded = load_app(f"{app}:{attr}", EventBus)
    assert loaded is sys.modules[app].bus


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param("nocolon", "'nocolon' must look like 'package.module:attribute'", id="form"),
        pytest.param("no_such_mod_xyz:b", "cannot import 'no_such_mod_xyz'", id="no-module"),
        pytest.param(
            "{app}_bad:bus",
            "importing '{app}_bad' raised KeyError: 'DATABASE_URL'",
            id="import-raises",
        ),
        pytest.param("{app}:nope", "'{app}' has no attribute 'nope'", id="no-attribute"),
        pytest.param(
            "{app}:broken",
            "is a callable that failed when called with no arguments (RuntimeError: no config "
            "file); name an EventBus or a factory returning one",
            id="factory-raises",
        ),
        pytest.param(
            "{app}:make_async", "is an async function; name an EventBus", id="async-factory"
        ),
        pytest.param("{app}:make_wrong", "is an int, not an EventBus", id="wrong-type"),
    ],
)
def test_every_bad_app_is_one_line_that_names_the_culprit(
    app: str, spec: str, message: str
) -> None:
    spec = spec.format(app=app)
    with pytest.raises(AppLoadError) as info:
        load_app(spec, EventBus, option="--bus")
    text = str(info.value)
    assert text.startswith(f"--bus {spec!r} ") and message.format(app=app) in text
    assert "\n" not in text
    assert isinstance(info.value, EventBusError) and isinstance(info.value, ValueError)
    assert info.value.spec == spec


@pytest.mark.parametrize(
    ("error", "line"),
    [
        pytest.param(ValueError("bad\nmore"), "ValueError: bad", id="first-line"),
        pytest.param(RuntimeError(), "RuntimeError", id="no-message"),
        pytest.param(OSError("  padded  "), "OSError: padded", id="stripped"),
    ],
)
def test_describe_error_is_the_type_and_the_first_line(error: BaseException, line: str) -> None:
    assert describe_error(error) == line


def test_describe_error_names_the_drivers_error_of_a_sqlalchemy_one() -> None:
    """SQLAlchemy's text adds the statement and every parameter of the batch."""
    import sqlite3

    import sqlalchemy as sa

    wrapped = sa.exc.OperationalError(
        "INSERT INTO t VALUES (?)", [("secret",)], sqlite3.OperationalError("database is locked")
    )
    assert describe_error(wrapped) == "OperationalError: database is locked"
    assert "secret" in str(wrapped)  # what the one line leaves out


def test_positive_int_takes_whole_numbers_from_one_and_names_anything_else() -> None:
    assert positive_int("1") == 1 and positive_int("250") == 250
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'0' must be at least 1$"):
        positive_int("0")
    with pytest.raises(argparse.ArgumentTypeError, match=r"^'2\.5' is not an integer$"):
        positive_int("2.5")


def test_quiet_broken_pipe_passes_the_status_and_other_errors_through() -> None:
    assert quiet_broken_pipe(lambda: 3)() == 3

    @quiet_broken_pipe
    def fails() -> int:
        raise ConnectionResetError("not a pipe")

    with pytest.raises(ConnectionResetError):
        fails()

    @quiet_broken_pipe
    def gone() -> int:
        raise BrokenPipeError

    assert gone() == EXIT_BROKEN_PIPE == 141


def all_help_texts(parser: argparse.ArgumentParser) -> list[str]:
    """The ``--help`` of *parser* and of every subcommand under it."""
    texts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                texts += all_help_texts(sub)
    return texts


def read_one_line_then_close(argv: list[str]) -> tuple[bytes, int, bytes]:
    """Run *argv* with its stdout piped to a reader that stops after one line (``| head -1``)."""
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    with proc:
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
    return first, proc.wait(timeout=60), err


def test_failures_list_into_head_exits_quietly(tmp_path: Path) -> None:
    """Regression test: ``failures list | head`` exited 1 blaming the database."""
    from tests.eventbus.cli.test_cli import make_record, write_records

    db = f"sqlite+aiosqlite:///{tmp_path / 'many.db'}"
    write_records(db, *(make_record(n % 90, id=f"r{n:06d}") for n in range(3_000)))
    first, status, err = read_one_line_then_close(
        [sys.executable, "-m", "eventbus", "failures", "list", "--db", db, "--limit", "3000"]
    )
    assert first.startswith(b"ID ")
    assert (status, err) == (EXIT_BROKEN_PIPE, b"")


def test_scheduler_next_into_head_exits_quietly() -> None:
    """Regression test: ``scheduler next ... | head`` printed a BrokenPipeError traceback."""
    first, status, err = read_one_line_then_close(
        [sys.executable, "-m", "scheduler", "next", "* * * * * *", "-n", "20000"]
    )
    assert first.startswith(b"UTC")
    assert (status, err) == (EXIT_BROKEN_PIPE, b"")
