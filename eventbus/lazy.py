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

from ._public import show_as_module

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


show_as_module(__name__, show_as_module, within="eventbus")
