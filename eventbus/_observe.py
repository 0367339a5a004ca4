"""The hook instrumentation plugs into (OpenTelemetry, see :mod:`eventbus.interop.opentelemetry`).

A bus without an observer runs exactly the code it runs without this module: the observer
wraps what the bus already calls, at the moments it is built, never per emit:

* each listener's ``call`` (what every emit path calls) when it is subscribed;
* each compiled dispatch function of ``emit()`` when it is compiled;
* ``emit_async()`` (one ``is None`` test per call when unobserved);
* each failure record, after the sink made it (the failure path only).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from ._emission import Emission
from ._failures import FailureRecord
from ._listeners import Listener, Outcome
from ._table import Plan

__all__ = ["Observer"]


class Observer(Protocol):
    """**Protocol:** what a bus's instrumentation provides."""

    def listener(self, sub: Listener) -> Callable[[Any], Any]:
        """What the bus calls instead of ``sub.fn`` (async if ``sub`` is)."""
        ...

    def dispatch(
        self, plan: Plan, call: Callable[[Any], object], lone: bool
    ) -> Callable[[Any], object]:
        """What ``emit()`` calls instead of *call* for *plan*; *lone*: *call* is the one
        listener's own, whose failure ``emit()`` records (so it is not the publisher's)."""
        ...

    async def emit_async(
        self, plan: Plan, emission: Emission, run: Callable[[], Awaitable[list[Outcome]]]
    ) -> list[Outcome]:
        """Around one ``emit_async()``: *run* runs the listeners for *emission*."""
        ...

    def failed(self, record: FailureRecord) -> None:
        """A failure was recorded (dropped calls too)."""
        ...
