"""The public API of each package: ``__all__`` is sorted, complete, and shows public paths.

Like anyio's ``tests/test_all_attributes.py``: a name in ``__all__`` must exist, and a class or
function it exports reports a path users import from as its ``__module__`` (the package, or a
public module such as ``scheduler.backends.local``), never a private ``_module``. Like httpx's
``tests/test_exported_members.py``, the other way round too: a public name a public module
defines (or re-exports with ``import x as x``) is in its ``__all__``, or excluded below on
purpose.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import pkgutil
from types import ModuleType
from typing import ParamSpec, TypeVar

import pytest

PACKAGES = ["eventbus", "scheduler", "domain"]


def public_modules(package: str) -> list[str]:
    """The package and its public submodules (no ``_`` component, no ``__main__``)."""
    try:
        root = importlib.import_module(package)
    except Exception:  # reported by the tests themselves, which load() it again
        return [package]
    walk = pkgutil.walk_packages(root.__path__, prefix=f"{package}.", onerror=lambda _: None)
    public = [i.name for i in walk if not any(p.startswith("_") for p in i.name.split("."))]
    return sorted([package, *public])


MODULES = [name for package in PACKAGES for name in public_modules(package)]


def load(name: str) -> ModuleType:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # a package or extra that is not there yet
        pytest.skip(f"{name} does not import: {exc}")
    if not hasattr(module, "__all__"):
        pytest.skip(f"{name} has no __all__")
    return module


def exported(module: ModuleType) -> list[tuple[str, object]]:
    return [(name, getattr(module, name, None)) for name in module.__all__]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_sorted_without_duplicates(name: str) -> None:
    module = load(name)
    assert list(module.__all__) == sorted(set(module.__all__))


@pytest.mark.parametrize("name", MODULES)
def test_every_name_in_all_exists(name: str) -> None:
    module = load(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert missing == []


def test_eventbus_exports_report_the_package() -> None:
    """``eventbus`` rewrites every export, public backends included: ``eventbus.EventBus``."""
    module = load("eventbus")
    wrong = {
        attr: obj.__module__
        for attr, obj in exported(module)
        if (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__.startswith("eventbus.")
    }
    assert wrong == {}


@pytest.mark.parametrize("name", MODULES)
def test_exports_never_show_a_private_module(name: str) -> None:
    module = load(name)
    root = name.split(".")[0]
    private = {
        attr: obj.__module__
        for attr, obj in exported(module)
        if (inspect.isclass(obj) or inspect.isfunction(obj))
        and obj.__module__.split(".")[0] == root
        and any(part.startswith("_") for part in obj.__module__.split("."))
    }
    assert private == {}


def test_the_core_names_are_exported() -> None:
    import eventbus

    for name in ["Event", "EventBus", "EventRegistry", "ListenerErrors", "MemoryFailureStore"]:
        assert name in eventbus.__all__
    assert repr(eventbus.EventBus).endswith("'eventbus.EventBus'>")


#: Public names of public modules that are not in ``__all__``, on purpose, with the reason.
NOT_EXPORTED = {
    "eventbus.backends.sql": {
        "DEFAULT_TABLE": "the failure table's default name, for the CLI; users pass table=",
    },
    "eventbus.interop.pyee": {
        "CallShape": "a type alias spelled out in as_pyee's signature",
        "Converter": "a type alias spelled out in bridge_from_pyee's signature",
    },
    "eventbus.pytest_plugin": {
        "MARKER": "the marker's name, documented as eventbus_expect_failures",
        "SETTING": "the anyio_mode line a failing setup asks for",
    },
    "domain.durable_demo": dict.fromkeys(
        ("OrderPaid", "billing", "make_bus", "operator", "points", "run", "say", "shop"),
        "the durable demo script's own parts, run by make demo-durable",
    ),
    "domain.demo": {"ARTICLES": "the demo's sample articles"},
    "domain.web": dict.fromkeys(
        (
            "CENT",
            "MAX_ID",
            "MIN_ADMIN_TOKEN",
            "create_link",
            "follow_link",
            "healthz",
            "pay_order",
            "view_article",
        ),
        "reached through create_app(), never imported",
    ),
}


def defined_names(module: ModuleType) -> list[str]:
    """Names the module's own top-level statements bind: definitions, assignments, and
    re-exports written ``from x import y as y`` (the form that says "this is exported")."""
    names = []
    for node in ast.parse(inspect.getsource(module)).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.ImportFrom):
            names += [a.name for a in node.names if a.asname == a.name]
    return names


def plumbing(obj: object) -> bool:
    """A module's logger and its type variables: never API."""
    return isinstance(obj, logging.Logger | TypeVar | ParamSpec)


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_is_in_all_or_excluded_on_purpose(name: str) -> None:
    module = load(name)
    excluded = NOT_EXPORTED.get(name, {})
    public = [
        n
        for n in defined_names(module)
        if not n.startswith("_") and not plumbing(getattr(module, n, None))
    ]
    assert [n for n in public if n not in module.__all__ and n not in excluded] == []
    assert sorted(set(excluded) - set(public)) == []  # no stale exclusion


def test_the_public_name_check_sees_definitions_assignments_and_re_exports() -> None:
    found = defined_names(load("eventbus"))
    assert "EventBus" in found and "Listener" in found  # re-exports
    found = defined_names(load("domain.web"))
    assert {"WebConfig", "create_app", "MAX_ID", "logger"} <= set(found)
