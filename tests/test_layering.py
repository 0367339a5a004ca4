"""Imports go one way, through public names: ``domain`` → ``scheduler`` → ``eventbus``.

Every import statement of the three packages is read with :mod:`ast` (those under
``TYPE_CHECKING`` and inside functions too), relative ones resolved, and held to three rules,
as trio holds its upper layers to the public API of ``trio._core``:

* a package imports only packages below it (``eventbus`` neither ``scheduler`` nor ``domain``,
  ``scheduler`` not ``domain``);
* it never imports another package's private module (a ``_x`` anywhere in the path);
* what it takes from another package's module is in that module's ``__all__`` (or is one of
  its public submodules).

Inside the packages the layers go one way too (:data:`INNER`): the engine (``eventbus._core``)
knows nothing of the durable transport, the console, the interop modules or the CLI; the durable
transport nothing of the console or the CLI; the scheduler's engine nothing of its CLI or
console pages; and each package's model (:data:`MODEL`) nothing of its engine. And no module of
the three packages imports itself back through others: :func:`test_no_import_cycle` fails on any
cycle, imports under ``TYPE_CHECKING`` and inside functions included (a type-only cycle is a
knot a reader has to untie all the same, and one ``from`` moved out of ``TYPE_CHECKING`` makes
it real).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator, Mapping
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
            "scheduler._core._loop",
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
            "def f():\n    from scheduler._core._loop import Scheduler",
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


# -- the layers inside eventbus ------------------------------------------------------------------

#: the model of each package: what its engine works on, which knows nothing of the engine
MODEL = {
    "eventbus": [
        f"eventbus.{name}"
        for name in ("_events", "_exceptions", "_failures", "_codec", "_chain", "_patterns")
    ],
    "scheduler": [
        f"scheduler.{name}"
        for name in ("_jobs", "_triggers", "_cron", "_cron_fields", "_records", "_results")
    ]
    + ["scheduler._context", "scheduler._events", "scheduler._exceptions"],
}

#: a part -> the parts it must not import (a name covers its submodules)
INNER = {
    "eventbus._core": [
        "eventbus.durable",
        "eventbus.console",
        "eventbus.interop",
        "eventbus._cli",
        "eventbus.cli",
    ],
    "eventbus.durable": ["eventbus.console", "eventbus.interop", "eventbus._cli"],
    "eventbus.backends": ["eventbus.durable", "eventbus.console", "eventbus._cli", "eventbus.cli"],
    "scheduler._core": ["scheduler._cli", "scheduler.console"],
    **{
        model: ["eventbus._core", "eventbus.durable", "eventbus.console", "eventbus._cli"]
        for model in MODEL["eventbus"]
    },
    **{model: ["scheduler._core", "scheduler._cli"] for model in MODEL["scheduler"]},
}


def _within(module: str, part: str) -> bool:
    return module == part or module.startswith(f"{part}.")


def inner_violations(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """What *module* imports against :data:`INNER`, one line each."""
    out = []
    for part, banned in INNER.items():
        if not _within(module, part):
            continue
        for line, target, names in imports(source, module, is_package=is_package):
            for full in [target, *(f"{target}.{name}" for name in names)]:
                hit = next((b for b in banned if _within(full, b)), None)
                if hit is not None:
                    out.append(f"{module}:{line} imports {full}: {part} must not import {hit}")
                    break
    return out


INNER_SOURCES = sorted(
    p for package in ("eventbus", "scheduler") for p in (ROOT / package).rglob("*.py")
)


@pytest.mark.parametrize("path", INNER_SOURCES, ids=lambda p: module_name(p))
def test_each_layer_imports_nothing_above_it(path: Path) -> None:
    found = inner_violations(
        path.read_text(), module_name(path), is_package=path.name == "__init__.py"
    )
    assert found == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        pytest.param(
            "eventbus._core._bus", "from ..durable import RedisStreams", id="core-durable"
        ),
        pytest.param("eventbus._core._sink", "from ..cli import describe_error", id="core-cli"),
        pytest.param(
            "eventbus._core._bus",
            "if TYPE_CHECKING:\n    from ..console import ConsolePage",
            id="core-console-type-only",
        ),
        pytest.param("eventbus.durable._relay", "from .. import console", id="durable-console"),
    ],
)
def test_the_inner_check_finds_an_import_up(module: str, source: str) -> None:
    [found] = inner_violations(source, module)
    assert "must not import" in found


# -- no cycles -----------------------------------------------------------------------------------


def import_graph(sources: Mapping[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """Module -> the project's modules it imports (every import statement, as above): a
    ``from package import name`` counts as importing ``package.name`` when that is a module.
    A module's parent packages, which Python imports first, are not edges: their
    ``__init__`` imports are edges of their own."""
    graph: dict[str, set[str]] = {}
    for module, (source, is_package) in sources.items():
        edges = graph.setdefault(module, set())
        for _line, target, names in imports(source, module, is_package=is_package):
            found = [f"{target}.{n}" for n in names if f"{target}.{n}" in sources]
            if len(found) < len(names) or not names:
                found.append(target)
            for name in found:
                while name and name not in sources:
                    name = name.rpartition(".")[0]
                if name and name != module:
                    edges.add(name)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    sources = {module_name(p): (p.read_text(), p.name == "__init__.py") for p in SOURCES}
    assert cycles(import_graph(sources)) == []


def test_the_cycle_check_finds_a_type_only_cycle() -> None:
    sources = {
        "eventbus._core._a": ("from ._b import B", False),
        "eventbus._core._b": ("if TYPE_CHECKING:\n    from ._a import A", False),
        "eventbus._core._c": ("from . import _a", False),
        "eventbus._core": ("", True),
    }
    assert cycles(import_graph(sources)) == [["eventbus._core._a", "eventbus._core._b"]]
