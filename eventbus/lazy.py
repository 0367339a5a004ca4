"""The plumbing of a package's exports: names imported on first access (PEP 562), so that
importing the package stays light (``import scheduler`` loads neither redis nor SQLAlchemy,
``import domain.events`` none of the domain's services); and the path they show.

Used by ``eventbus``, ``scheduler`` and ``domain``; imports nothing but the standard library.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports", "show_as_module"]


def lazy_exports(
    package: str, modules: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of *package*, for names imported on first access.

    Assign them under ``if not TYPE_CHECKING:``, next to ``TYPE_CHECKING`` imports of the same
    names: mypy then checks every use, where a module ``__getattr__`` would let a typo pass.
    A name, once imported, is set on the package, so later lookups skip ``__getattr__``.

    :param package: the package's ``__name__``
    :param modules: each lazy name's module, relative to *package* (``".backends.redis"``)
    :return: ``(__getattr__, __dir__)``; ``__getattr__`` raises ``AttributeError`` naming the
        package for any other name, ``__dir__`` lists the lazy names too
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *modules})

    return __getattr__, __dir__


def show_as_module(
    module: str, *objects: object, within: str | None = None, public_too: bool = False
) -> None:
    """Show *objects* as defined in *module*, the path users import them from: reprs,
    tracebacks and a failure row's ``error_type`` then read ``eventbus.EventBus``, not the
    private module that defines it.

    :param within: the package whose modules' objects are renamed (default: *module*);
        the objects of other packages (a re-exported ``typing`` alias) keep their path
    :param public_too: rename those defined in public modules of *within* too (``eventbus``
        shows ``eventbus.MemoryFailureStore``); by default only those of private ones (a
        ``_name`` in their path)
    """
    prefix = f"{within or module}."
    for obj in objects:
        own = getattr(obj, "__module__", None)
        if not isinstance(own, str) or not own.startswith(prefix):
            continue
        if not public_too and not any(p.startswith("_") for p in own[len(prefix) :].split(".")):
            continue
        try:
            obj.__module__ = module
        except (AttributeError, TypeError):  # a constant, or a type that keeps its own
            pass
