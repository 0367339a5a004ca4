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
from typing import TYPE_CHECKING, Any, Protocol

from ._emission import Emission
from .._failures import FailureRecord
from ._listeners import Listener, Outcome
from ._table import Plan

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["Observer", "attach"]


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


def attach(bus: EventBus, observer: Observer | None) -> None:
    """Attach *observer* to *bus* (replacing any), or detach it with ``None``: the bus's
    ``_observe`` method, which :mod:`eventbus.interop.opentelemetry` calls."""
    compiled, sink, table = bus._compiled, bus._sink, bus._table
    previous = compiled.observer
    if previous is not None:
        sink.observers.remove(previous.failed)
    compiled.observer = observer
    table.wrap = None if observer is None else observer.listener
    for sub in table:
        sub.call = sub.fn if observer is None else observer.listener(sub)
    if observer is not None:
        sink.observers.append(observer.failed)
    table.invalidate()  # recompiled with the listeners' new calls, and wrapped
