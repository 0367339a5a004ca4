"""Concrete locks and run stores: ``local`` (one process), ``redis`` and ``sql`` (replicas).

``local`` is imported by ``scheduler`` itself; ``redis`` and ``sql`` import their client
libraries, so they are imported only when asked for.
"""

from __future__ import annotations
