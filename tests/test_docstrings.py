"""Documentation the code promises: every exception class and every Protocol method has a
docstring, and the exception tree drawn atop each package's exception module is the real one.

As httpx and APScheduler document all of theirs: an error a user catches, or a method a user's
own store implements, is documented where it is defined.
"""

from __future__ import annotations

import builtins
import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

from tests.test_public_api import PACKAGES, public_modules

#: Where each package draws its exception tree.
TREES = {
    "eventbus": "eventbus._exceptions",
    "scheduler": "scheduler._exceptions",
    "domain": "domain.exceptions",
}
ABC_MODULES = ["eventbus.abc", "scheduler.abc", "domain.abc"]


def every_module(package: str) -> list[ModuleType]:
    """The package and all its modules, private ones included (not ``__main__``)."""
    root = importlib.import_module(package)
    names = [i.name for i in pkgutil.walk_packages(root.__path__, prefix=f"{package}.")]
    return [root, *(importlib.import_module(n) for n in names if not n.endswith("__main__"))]


def exception_classes(package: str) -> list[type[BaseException]]:
    found: dict[int, type[BaseException]] = {}
    for module in every_module(package):
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.split(".")[0] == package:
                found[id(cls)] = cls
    return sorted(found.values(), key=lambda c: (c.__module__, c.__qualname__))


def exported_exceptions(package: str) -> dict[str, type[BaseException]]:
    """Exception classes in the ``__all__`` of the package's public modules, by name."""
    out: dict[str, type[BaseException]] = {}
    for name in public_modules(package):
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", ()):
            obj = getattr(module, attr)
            if isinstance(obj, type) and issubclass(obj, BaseException):
                out[attr] = obj
    return out


def first_line(obj: object) -> str:
    doc = obj.__dict__.get("__doc__") if isinstance(obj, type) else getattr(obj, "__doc__", None)
    return (inspect.cleandoc(doc).splitlines() or [""])[0] if doc else ""


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exception_class_has_a_docstring(package: str) -> None:
    classes = exception_classes(package)
    assert classes  # the walk finds them
    assert [f"{c.__module__}.{c.__qualname__}" for c in classes if not first_line(c)] == []


def protocol_members(module_name: str) -> list[tuple[str, object]]:
    module = importlib.import_module(module_name)
    members: list[tuple[str, object]] = []
    for cls_name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module_name or not getattr(cls, "_is_protocol", False):
            continue
        for attr, value in vars(cls).items():
            if attr.startswith("_"):
                continue
            if isinstance(value, property):
                value = value.fget
            if inspect.isfunction(value):
                members.append((f"{cls_name}.{attr}", value))
    return members


@pytest.mark.parametrize("module_name", ABC_MODULES)
def test_every_protocol_method_has_a_docstring(module_name: str) -> None:
    members = protocol_members(module_name)
    assert members  # the walk finds them
    assert [name for name, fn in members if not first_line(fn)] == []


# -- the drawn tree --------------------------------------------------------------------------

_ENTRY = re.compile(r"^(?P<lead>[ │]*)(?:[├└]── )?(?P<name>[A-Z]\w+)(?:\s+\((?P<base>\w+)\))?")


def drawn_tree(module_name: str) -> list[tuple[str, str | None, str | None]]:
    """``(name, parent, builtin base)`` of each class in the module docstring's tree: the
    literal block after the first line ending in ``::``."""
    doc = importlib.import_module(module_name).__doc__ or ""
    lines = doc.split("::\n", 1)[1].splitlines()[1:]
    block = []
    for line in lines:
        if not line.startswith("    "):
            break
        block.append(line)
    entries: list[tuple[str, str | None, str | None]] = []
    stack: list[tuple[int, str]] = []  # (depth, name) of the open ancestors
    for line in block:
        m = _ENTRY.match(line)
        assert m is not None, f"cannot read tree line {line!r}"
        depth = len(m["lead"])
        while stack and stack[-1][0] >= depth:
            stack.pop()
        entries.append((m["name"], stack[-1][1] if stack else None, m["base"]))
        stack.append((depth, m["name"]))
    return entries


@pytest.mark.parametrize("package", PACKAGES)
def test_the_drawn_exception_tree_is_the_real_one(package: str) -> None:
    exported = exported_exceptions(package)
    tree = drawn_tree(TREES[package])
    wrong = []
    for name, parent, base in tree:
        cls = exported.get(name)
        if cls is None:
            wrong.append(f"{name}: drawn, but no public module exports it")
            continue
        if parent is not None and not issubclass(cls, exported[parent]):
            wrong.append(f"{name}: drawn under {parent}, but does not derive from it")
        if base is not None and not issubclass(cls, getattr(builtins, base)):
            wrong.append(f"{name}: drawn as a {base}, but is not one")
    drawn = {name for name, _, _ in tree}
    wrong += [f"{name}: exported, but not drawn" for name in sorted(set(exported) - drawn)]
    assert wrong == []
