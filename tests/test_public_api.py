"""The public API of each package: ``__all__`` is sorted, complete, and shows public paths.

Like anyio's ``tests/test_all_attributes.py``: a name in ``__all__`` must exist, and a class or
function it exports reports a path users import from as its ``__module__`` (the package, or a
public module such as ``scheduler.backends.local``), never a private ``_module``.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

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
