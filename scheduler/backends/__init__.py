"""Concrete locks and run stores: ``local`` (one process), ``redis`` and ``sql`` (replicas).

``local`` is imported by ``scheduler`` itself; ``redis`` and ``sql`` import their client
libraries, so they are imported only when asked for. A namespace: nothing is exported here.
"""

from __future__ import annotations

__all__: list[str] = []
