"""The path users import a name from, shown as its ``__module__``: what ``eventbus`` runs on its
exports as it is imported (it must not load :mod:`eventbus.lazy`, which ``domain`` and
``scheduler`` import: ``import domain.events`` stays light). Public as
:func:`eventbus.lazy.show_as_module`.
"""

from __future__ import annotations

__all__ = ["show_as_module"]


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
