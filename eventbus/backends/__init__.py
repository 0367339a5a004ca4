"""Storage backends: ``memory`` (embedded default) and ``sql`` (SQLAlchemy 2 async).

A namespace: each backend is its own public module, imported when asked for (``sql`` loads
SQLAlchemy), so nothing is exported here.
"""

from __future__ import annotations

__all__: list[str] = []
