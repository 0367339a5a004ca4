"""A durable listener: what it listens to, its consumer group, and how it is called."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any, Literal

from .._core._listeners import default_listener_name, is_async_callable
from .._events import Event
from ._keys import group_name

__all__ = ["DurableListener", "Start", "make_listener"]

#: Where a new consumer group starts: the stream's first entry, or its end (skips history).
Start = Literal["first", "latest"]


@dataclasses.dataclass(frozen=True, slots=True)
class DurableListener:
    """One durable subscription: one consumer group, ``service:name``, on one event's stream.

    A listener with a parameter named ``tx`` is called with an open ``AsyncConnection``; the
    inbox row is inserted in that same transaction, so its own writes happen once per event.
    """

    fn: Callable[..., Any]
    name: str
    event_type: type[Event]
    group: str
    is_async: bool
    takes_tx: bool
    tx_positional: bool  #: ``tx`` is positional-only (passed second); else passed as ``tx=``
    start: Start = "first"

    @property
    def event_name(self) -> str:
        return self.event_type.__event_name__

    def __repr__(self) -> str:
        return f"<DurableListener {self.name!r} on {self.event_name!r} (group {self.group!r})>"


def make_listener(
    service: str,
    event_type: type[Event],
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    start: Start = "first",
) -> DurableListener:
    """Check a durable subscription and describe it.

    :raises TypeError: if *event_type* is not a declared event type, *fn* is not callable,
        or a sync *fn* takes ``tx`` (a sync listener runs in a worker thread, where the async
        connection cannot be used: declare it ``async def``)
    :raises ValueError: for a name that cannot be part of a group name (give ``name=``), or
        a bad *start*
    """
    if not (isinstance(event_type, type) and issubclass(event_type, Event)) or not getattr(
        event_type, "__event_name__", ""
    ):
        raise TypeError(
            f"a durable listener subscribes to one declared event type, not {event_type!r} "
            "(patterns are in-process only: each durable listener has its own stream and group)"
        )
    if not callable(fn):
        raise TypeError(f"durable listener {fn!r} is not callable")
    if start not in ("first", "latest"):
        raise ValueError(f"start={start!r} must be 'first' or 'latest'")
    shown = name if name is not None else default_listener_name(fn)
    try:
        group = group_name(service, shown)
    except ValueError as exc:
        hint = "" if name is not None else "; give the durable listener a stable name= instead"
        raise ValueError(f"{exc}{hint}") from None
    is_async = is_async_callable(fn)
    takes_tx, tx_positional = _tx_parameter(fn)
    if takes_tx and not is_async:
        raise TypeError(
            f"durable listener {shown!r} takes 'tx' but is sync; sync listeners run in a worker "
            "thread, where the async connection cannot be used: declare it 'async def'"
        )
    return DurableListener(
        fn=fn,
        name=shown,
        event_type=event_type,
        group=group,
        is_async=is_async,
        takes_tx=takes_tx,
        tx_positional=tx_positional,
        start=start,
    )


def _tx_parameter(fn: Callable[..., Any]) -> tuple[bool, bool]:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False, False
    tx = params.get("tx")
    if tx is None:
        return False, False
    return True, tx.kind is inspect.Parameter.POSITIONAL_ONLY
