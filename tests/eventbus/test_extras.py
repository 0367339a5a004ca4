"""``eventbus.extras``: an optional module imported without its extra fails with one line.

Here every extra is installed, so a missing library is made missing for one interpreter by
``sys.modules[name] = None`` (Python's own way to block an import: ``find_spec`` then finds
nothing and ``import`` raises ``ModuleNotFoundError``). ``make test`` also runs the same
imports in a venv with no extras at all (``tests/runtime_deps.py``).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from eventbus import EventBusError
from eventbus.extras import EXTRAS, MissingExtraError, explain_missing, missing_extra

ROOT = Path(__file__).resolve().parents[2]


def import_without(blocked: tuple[str, ...], statement: str) -> subprocess.CompletedProcess[str]:
    """Run *statement* in a fresh interpreter in which the *blocked* modules are missing."""
    block = "".join(f"sys.modules[{name!r}] = None\n" for name in blocked)
    return subprocess.run(
        [sys.executable, "-c", f"import sys\n{block}{statement}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def expected(what: str, extras: str, missing: str) -> str:
    names = " and ".join(repr(e) for e in extras.split(","))
    plural = "s" if "," in extras else ""
    verb = "are" if "," in missing else "is"
    return (
        f"eventbus.extras.MissingExtraError: {what} needs the {names} extra{plural} "
        f"({missing} {verb} not installed): pip install 'eventbus[{extras}]'"
    )


GUARDED = [
    pytest.param("eventbus.backends.sql", ("sqlalchemy",), "sql", id="eventbus-sql"),
    pytest.param("eventbus.backends.redis", ("redis",), "redis", id="eventbus-redis"),
    pytest.param("eventbus.durable", ("redis",), "redis,sql", id="durable"),
    pytest.param("eventbus.console", ("jinja2",), "web", id="console"),
    pytest.param("eventbus.interop.pyee", ("pyee",), "pyee", id="pyee"),
    pytest.param("eventbus.interop.opentelemetry", ("opentelemetry",), "otel", id="otel"),
    pytest.param("scheduler.backends.sql", ("aiosqlite",), "sql", id="scheduler-sql"),
    pytest.param("scheduler.backends.redis", ("redis",), "redis", id="scheduler-redis"),
    pytest.param("scheduler.console", ("starlette",), "web", id="scheduler-console"),
]


@pytest.mark.parametrize(("module", "blocked", "extras"), GUARDED)
def test_an_optional_module_without_its_extra_fails_with_one_line(
    module: str, blocked: tuple[str, ...], extras: str
) -> None:
    done = import_without(blocked, f"import {module}")
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == expected(module, extras, blocked[0])
    assert "During handling" not in done.stderr and "direct cause" not in done.stderr


@pytest.mark.parametrize(
    ("name", "backend", "blocked", "extra"),
    [
        pytest.param("RedisLock", "redis", "redis", "redis", id="RedisLock"),
        pytest.param("SqlRunStore", "sql", "sqlalchemy", "sql", id="SqlRunStore"),
        pytest.param("SqlJobStore", "sql", "sqlalchemy", "sql", id="SqlJobStore"),
    ],
)
def test_a_lazy_scheduler_name_without_its_extra_fails_with_the_same_line(
    name: str, backend: str, blocked: str, extra: str
) -> None:
    done = import_without((blocked,), f"from scheduler import {name}")
    assert done.returncode == 1
    line = expected(f"scheduler.backends.{backend}", extra, blocked)
    assert done.stderr.splitlines()[-1] == line


def test_the_guard_lets_the_module_import_when_the_extra_is_there() -> None:
    assert [extra for extra in EXTRAS if missing_extra("x", extra) is not None] == []
    done = import_without((), "import eventbus.durable, scheduler.console; print('ok')")
    assert (done.returncode, done.stdout) == (0, "ok\n")


def test_the_pytest_plugin_needs_no_extra() -> None:
    """pytest loads it in every test session of every project that installed eventbus (its
    entry point), extras or not; the no-extras venv has no pytest to try it with."""
    libraries = tuple(sorted({m.split(".")[0] for names in EXTRAS.values() for m in names}))
    done = import_without(libraries, "import eventbus.pytest_plugin, eventbus.testing")
    assert (done.returncode, done.stderr) == (0, "")


def test_the_error_is_an_import_error_of_the_bus_naming_what_needed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(EXTRAS, "fake", ("no_such_module_for_eventbus", "anyio"))
    error = missing_extra("eventbus.fake", "fake")
    assert isinstance(error, MissingExtraError)
    assert isinstance(error, ImportError) and isinstance(error, EventBusError)
    assert (error.name, error.extras, error.missing) == (
        "eventbus.fake",
        ("fake",),
        ("no_such_module_for_eventbus",),
    )
    assert str(error) == (
        "eventbus.fake needs the 'fake' extra (no_such_module_for_eventbus is not installed): "
        "pip install 'eventbus[fake]'"
    )


def test_an_unknown_extra_is_a_key_error() -> None:
    with pytest.raises(KeyError, match="nope"):
        missing_extra("x", "nope")


def test_a_late_import_is_told_as_the_extra_that_brings_it() -> None:
    exc = ModuleNotFoundError("No module named 'redis.asyncio'", name="redis.asyncio")
    told = explain_missing(exc, "python -m eventbus streams")
    assert str(told) == (
        "python -m eventbus streams needs the 'redis' extra (redis is not installed): "
        "pip install 'eventbus[redis]'"
    )
    guard = MissingExtraError("eventbus.durable", ["redis", "sql"], ["redis"])
    assert explain_missing(guard, "ignored") is guard


@pytest.mark.parametrize(
    "exc",
    [
        pytest.param(ModuleNotFoundError("No module named 'nope'", name="nope"), id="not-ours"),
        pytest.param(ImportError("cannot import name 'x' from 'anyio'"), id="not-a-missing-module"),
        pytest.param(ModuleNotFoundError("no name"), id="no-name"),
    ],
)
def test_other_import_errors_are_not_told_as_an_extra(exc: ImportError) -> None:
    assert explain_missing(exc, "cmd") is None


def pyproject_extras() -> dict[str, list[str]]:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    extras: dict[str, list[str]] = tomllib.loads(text)["project"]["optional-dependencies"]
    return extras


def requirement_name(requirement: str) -> str:
    """``redis[hiredis]>=5.0`` -> ``redis``; ``foo ; extra == 'x'`` -> ``foo``."""
    for stop in "[<>=!~; ":
        requirement = requirement.split(stop)[0]
    return requirement.lower().replace("_", "-")


def distributions_of(extra: str) -> set[str]:
    """The distributions *extra* installs: its requirements and theirs, one level down (the
    SQLAlchemy ``asyncio`` extra's greenlet), through ``eventbus[...]`` references."""
    found: set[str] = set()
    for requirement in pyproject_extras()[extra]:
        name = requirement_name(requirement)
        if name == "eventbus":
            inner = requirement.split("[")[1].split("]")[0]
            for other in inner.split(","):
                found |= distributions_of(other)
            continue
        found.add(name)
        found |= {requirement_name(r) for r in metadata.requires(name) or []}
    return found


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_module_the_guard_looks_for_comes_with_its_extra(extra: str) -> None:
    installs = distributions_of(extra)
    provided = metadata.packages_distributions()
    for module in EXTRAS[extra]:
        owners = {d.lower().replace("_", "-") for d in provided[module.split(".")[0]]}
        assert owners & installs, (module, owners, sorted(installs))


def test_every_extra_of_a_library_is_known_to_the_guard() -> None:
    declared = set(pyproject_extras()) - {"all", "dev", "bench", "docs"}
    assert declared == set(EXTRAS)
    assert pyproject_extras()["all"] == [f"eventbus[{','.join(EXTRAS)}]"]


@pytest.mark.parametrize(
    ("argv", "blocked", "line"),
    [
        pytest.param(
            "eventbus failures list --db x.db",
            "sqlalchemy",
            "error: python -m eventbus failures needs the 'sql' extra (sqlalchemy is not "
            "installed): pip install 'eventbus[sql]'",
            id="failures",
        ),
        pytest.param(
            "eventbus streams status",
            "redis",
            "error: python -m eventbus streams needs the 'redis' extra (redis is not "
            "installed): pip install 'eventbus[redis]'",
            id="streams",
        ),
        pytest.param(
            "scheduler jobs --db x.db",
            "sqlalchemy",
            "error: python -m scheduler jobs needs the 'sql' extra (sqlalchemy is not "
            "installed): pip install 'eventbus[sql]'",
            id="scheduler-jobs",
        ),
    ],
)
def test_a_command_without_its_extra_prints_one_line_and_exits_2(
    argv: str, blocked: str, line: str
) -> None:
    package, *args = argv.split()
    done = import_without(
        (blocked,),
        f"from {package}._cli import main\nsys.argv[0] = '__main__.py'\n"
        f"raise SystemExit(main({args!r}))",
    )
    assert (done.returncode, done.stdout, done.stderr) == (2, "", line + "\n")
