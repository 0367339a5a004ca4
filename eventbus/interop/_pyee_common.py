"""What the pyee bridges and the pyee facade share: the call shapes, pyee's own event names,
and the error for them. Re-exported by :mod:`eventbus.interop.pyee`."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from .._events import Event
from .._exceptions import EventBusError

__all__ = ["PYEE_SPECIAL", "CallShape", "UnsupportedPyeeEventError", "call_shape", "event_fields"]

CallShape = Literal["event", "kwargs"]

#: pyee emits these itself; they are never forwarded, mapped or rejected.
PYEE_SPECIAL = frozenset({"error", "new_listener"})


class UnsupportedPyeeEventError(EventBusError, ValueError):
    """pyee's own ``error`` and ``new_listener`` events have no bus equivalent."""

    def __init__(self, name: str) -> None:
        self.name = name
        instead = (
            "a failing listener is captured as a FailureRecord: read bus.failures, or pass "
            "EventBus(on_failure=...) to be called with each one"
            if name == "error"
            else "inspect bus.listeners(...) instead"
        )
        super().__init__(f"pyee's {name!r} event has no equivalent on the bus; {instead}")


def call_shape(call: str) -> bool:
    """Whether listeners get the event's fields as keywords (``"kwargs"``), not the event.

    :raises ValueError: for another value than ``"event"`` or ``"kwargs"``
    """
    if call not in ("event", "kwargs"):
        raise ValueError(f"call={call!r} must be 'event' or 'kwargs'")
    return call == "kwargs"


def event_fields(event: Event) -> dict[str, Any]:
    return {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
