"""What :meth:`EventBus.instrument` attaches (:mod:`eventbus.interop.opentelemetry`'s is one).

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

from .._failures import FailureRecord
from ._emission import Emission
from ._listeners import Listener, Outcome
from ._table import Plan

if TYPE_CHECKING:
    from ._nesting import Nesting

__all__ = ["Observer"]


class Observer(Protocol):
    """**Protocol:** what a bus's instrumentation provides."""

    def bound(self, nesting: Nesting) -> None:
        """Attached to a bus (:meth:`EventBus.instrument`) whose emits nest in *nesting*:
        its ``current()`` and ``emission()`` give the emission in progress."""
        ...

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
