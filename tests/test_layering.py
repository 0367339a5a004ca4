"""Imports go one way, through public names: ``domain`` → ``scheduler`` → ``eventbus``.

Every import statement of the three packages is read with :mod:`ast` (those under
``TYPE_CHECKING`` and inside functions too), relative ones resolved, and held to three rules,
as trio holds its upper layers to the public API of ``trio._core``:

* a package imports only packages below it (``eventbus`` neither ``scheduler`` nor ``domain``,
  ``scheduler`` not ``domain``);
* it never imports another package's private module (a ``_x`` anywhere in the path);
* what it takes from another package's module is in that module's ``__all__`` (or is one of
  its public submodules).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RANK = {"eventbus": 0, "scheduler": 1, "domain": 2}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(source: str, module: str, *, is_package: bool) -> Iterator[tuple[int, str, list[str]]]:
    """``(line, imported module, names taken from it)`` of each import in *source*."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join([*base, target] if target else base)
            yield node.lineno, target, [a.name for a in node.names]


def _exports(module: str) -> set[str] | None:
    try:
        found = importlib.import_module(module)
    except ImportError:
        return None
    return set(getattr(found, "__all__", ()))


def violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """What *module*'s *source* imports against the rules above, one line each."""
    mine = module.split(".")[0]
    out = []
    for line, target, names in imports(source, module, is_package=is_package):
        theirs = target.split(".")[0]
        if theirs not in RANK or theirs == mine:
            continue
        where = f"{module}:{line} imports {target}"
        if RANK[theirs] > RANK[mine]:
            out.append(f"{where}: {mine} must not import {theirs} (it is above)")
        if any(part.startswith("_") for part in target.split(".")):
            out.append(f"{where}: a private module of {theirs}")
        exports = _exports(target)
        for name in names:
            if name.startswith("_"):
                out.append(f"{where}: the private name {name!r}")
            elif exports is not None and name not in exports and name != "*":
                if _exports(f"{target}.{name}") is None:  # not a submodule either
                    out.append(f"{where}: {name!r}, which is not in its __all__")
    return out


SOURCES = sorted(p for package in RANK for p in (ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_go_down_the_layers_through_public_names(path: Path) -> None:
    found = violations(path.read_text(), module_name(path), is_package=path.name == "__init__.py")
    assert found == []


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        pytest.param(
            "eventbus._core._bus",
            "from domain import App",
            "eventbus must not import domain",
            id="core-imports-domain",
        ),
        pytest.param(
            "scheduler._loop",
            "import domain.events",
            "scheduler must not import domain",
            id="scheduler-imports-domain",
        ),
        pytest.param(
            "domain.app",
            "from eventbus._core._bus import EventBus",
            "a private module of eventbus",
            id="private-module",
        ),
        pytest.param(
            "domain.app",
            "from eventbus.backends._sql_common import make_engine",
            "a private module of eventbus",
            id="private-submodule",
        ),
        pytest.param(
            "scheduler.abc",
            "from eventbus._failures import FailureRecord",
            "a private module",
            id="private-under-type-checking",
        ),
        pytest.param(
            "domain.app",
            "from eventbus import _exceptions",
            "the private name '_exceptions'",
            id="private-name",
        ),
        pytest.param(
            "domain.app",
            "from eventbus.backends.sql import SpillFile",
            "not in its __all__",
            id="not-exported",
        ),
        pytest.param(
            "domain.app",
            "def f():\n    from scheduler._loop import Scheduler",
            "a private module of scheduler",
            id="inside-a-function",
        ),
    ],
)
def test_the_check_finds_each_kind_of_violation(module: str, source: str, expected: str) -> None:
    [found] = violations(source, module)
    assert expected in found


@pytest.mark.parametrize(
    ("module", "source"),
    [
        pytest.param("domain.app", "from eventbus.backends.sql import make_engine", id="exported"),
        pytest.param("domain.app", "from eventbus import backends", id="public-submodule"),
        pytest.param("domain.app", "from ._cli import InputError", id="own-private-module"),
        pytest.param("domain.backends.memory", "from .. import abc", id="relative"),
        pytest.param("scheduler.abc", "from eventbus.abc import FailureStore", id="downward"),
    ],
)
def test_the_check_lets_public_downward_imports_through(module: str, source: str) -> None:
    assert violations(source, module) == []
