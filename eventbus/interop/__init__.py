"""Bridges between the bus and other event libraries; each lives in its own public module.

* :mod:`eventbus.interop.pyee`: ``bridge_from_pyee``, ``bridge_to_pyee`` and ``as_pyee``.
* :mod:`eventbus.interop.opentelemetry`: ``instrument(bus)``, spans and metrics (extra ``otel``).

A namespace: each bridge imports its library, so nothing is exported here.
"""

from __future__ import annotations

__all__: list[str] = []
