"""``python -m scheduler`` and the ``eventbus-scheduler`` command: ``next``, ``runs``,
``jobs``, ``pause`` and ``resume``."""

from __future__ import annotations

from ._main import main

__all__ = ["main"]
