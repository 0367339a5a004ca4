"""Per-listener call counts, for operators (the console's bus page): paid for only when on.

``EventBus(count_calls=True)`` (or ``bus.count_calls = True``) recompiles the dispatch
functions of ``emit()`` with one ``c0.calls += 1`` line per listener, and sends
``emit_async()`` through the path that counts its outcomes; a bus that does not count runs
exactly the code it ran before counting existed (see :mod:`eventbus._core._compiler`).

What is counted, per (event name, listener name):

* ``calls``: deliveries of an emit to the listener: a sync call of ``emit()`` (however many
  ``retries=`` it took), an async listener queued by ``emit()`` (a queued call later
  dropped or cut short by shutdown counts, and is a failure too), each listener call of
  ``emit_async()`` and ``emit_threadsafe()``. Retries from the failure table are not
  deliveries: they update their failure row instead.
* ``failures``: failure records the bus made for those deliveries.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ._listeners import Outcome
from ._table import Plan

__all__ = ["CallCount", "CallCounts", "ListenerStatistics"]


@dataclasses.dataclass(frozen=True, slots=True)
class ListenerStatistics:
    """What one listener did for one event since the bus started counting."""

    event: str
    listener: str
    calls: int  #: deliveries (see :meth:`EventBus.listener_statistics`)
    failures: int  #: failure records of those deliveries


class CallCount:
    """The counters of one (event, listener): a cell the generated code increments."""

    __slots__ = ("calls", "failures")

    def __init__(self) -> None:
        self.calls = 0
        self.failures = 0


class CallCounts:
    """Every counter of one bus, kept while counting is off so that turning it on again
    goes on from there."""

    __slots__ = ("_cells",)

    def __init__(self) -> None:
        self._cells: dict[tuple[str, str], CallCount] = {}

    def cell(self, event: str, listener: str) -> CallCount:
        """The counters of *listener* for *event*, made on first use."""
        key = (event, listener)
        found = self._cells.get(key)
        if found is None:
            found = self._cells[key] = CallCount()
        return found

    def failed(self, event: str, listener: str) -> None:
        """One failure record was made (called by the failure sink)."""
        self.cell(event, listener).failures += 1

    def delivered(self, plan: Plan, outcomes: Sequence[Outcome | None]) -> None:
        """Count the calls of one ``emit_async()``: one per outcome (``None``: not called)."""
        event = plan.event_type.__event_name__
        for sub, outcome in zip(plan.listeners, outcomes, strict=True):
            if outcome is not None:
                self.cell(event, sub.name).calls += 1

    def snapshot(self) -> list[ListenerStatistics]:
        """Every counter, by event then listener."""
        return [
            ListenerStatistics(event, listener, cell.calls, cell.failures)
            for (event, listener), cell in sorted(self._cells.items())
        ]
