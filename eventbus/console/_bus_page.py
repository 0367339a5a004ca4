"""The bus page: listeners per event, the queue, drops, and failures over time as a chart.

What the public API gives: ``bus.statistics()`` (queue depth, in flight, drops, failures since
start), ``bus.listeners(name)`` per declared event, and the failure store. Per-listener *call*
counts are not exposed by the bus; failure counts per listener come from the store.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from starlette.responses import Response

from eventbus import EventBus, FailureStatus

from ._charts import bar_chart, time_buckets
from ._pages import Action, PageRequest, Panel, View

__all__ = ["WINDOWS", "BusPage"]

#: chart windows: name -> (span, bars)
WINDOWS = {
    "1h": (timedelta(hours=1), 60),
    "24h": (timedelta(hours=24), 48),
    "7d": (timedelta(days=7), 56),
}


@dataclasses.dataclass(frozen=True, slots=True)
class ListenerRow:
    event: str
    listener: str
    pattern: str
    kind: str
    options: str
    failures: dict[str, int]


class BusPage:
    """Listeners, queue and failure counts of *bus*."""

    slug = "bus"
    title = "Bus"
    templates: tuple[str, str] | None = None

    def __init__(self, bus: EventBus, *, scan_limit: int = 10_000) -> None:
        self.bus = bus
        self.scan_limit = scan_limit

    def __repr__(self) -> str:
        return f"BusPage(bus={self.bus!r})"

    def routes(self) -> Sequence[View | Action]:
        return [View("", self.index, "bus.index")]

    async def panel(self, request: PageRequest) -> Panel:
        stats = self.bus.statistics()
        return Panel(
            title=self.title,
            href=request.url("/bus"),
            rows=[
                ("running", "yes" if stats.running else "no"),
                ("listeners", stats.listeners),
                ("queued", stats.queued),
                ("dropped", stats.dropped),
                ("failures since start", stats.failures),
            ],
            alert=not stats.running or stats.dropped > 0,
        )

    async def index(self, request: PageRequest) -> Response:
        window = request.query.get("window") or "24h"
        errors = []
        if window not in WINDOWS:
            errors.append(f"window must be one of {', '.join(WINDOWS)}, not {window[:20]!r}")
            window = "24h"
        span, count = WINDOWS[window]
        now = datetime.now(UTC)
        store = self.bus.failures
        await store.flush()
        recent = await store.query(since=now - span, limit=self.scan_limit)
        everything = await store.query(limit=self.scan_limit)
        per_listener: dict[tuple[str, str], Counter[str]] = {}
        for rec in everything:
            key = (rec.event_name, rec.listener)
            per_listener.setdefault(key, Counter())[rec.status.value] += 1
        rows = self._listener_rows(per_listener)
        chart = bar_chart(
            time_buckets(
                ((r.first_failed_at, r.status.value) for r in recent),
                end=now,
                span=span,
                count=count,
            ),
            label=f"Failures per {_step(span / count)} over the last {window}, by status now",
        )
        return request.render(
            "bus.html",
            status=400 if errors else 200,
            errors=errors,
            stats=self.bus.statistics(),
            rows=rows,
            statuses=[s.value for s in FailureStatus],
            chart=chart,
            window=window,
            windows=list(WINDOWS),
            capped=len(everything) >= self.scan_limit,
            scan_limit=self.scan_limit,
        )

    def _listener_rows(self, failures: dict[tuple[str, str], Counter[str]]) -> list[ListenerRow]:
        rows: list[ListenerRow] = []
        seen: set[tuple[str, str]] = set()
        for name in sorted(self.bus.registry.names()):
            for sub in self.bus.listeners(name):
                key = (name, sub.name)
                seen.add(key)
                rows.append(
                    ListenerRow(
                        event=name,
                        listener=sub.name,
                        pattern=sub.pattern,
                        kind="async" if sub.is_async else "sync",
                        options=_options(sub),
                        failures=dict(failures.get(key, {})),
                    )
                )
        # failures of listeners no longer subscribed (or of events no longer declared)
        rows += [
            ListenerRow(key[0], key[1], "", "gone", "", dict(failures[key]))
            for key in sorted(set(failures) - seen)
        ]
        return rows


def _options(sub: object) -> str:
    parts = []
    if getattr(sub, "once", False):
        parts.append("once")
    timeout = getattr(sub, "timeout", None)
    if timeout is not None:
        parts.append(f"timeout {timeout:g} s")
    retries = getattr(sub, "retries", 0)
    if retries:
        parts.append(f"{retries} retries")
    errors = getattr(sub, "errors", None)
    if errors:
        parts.append(str(errors))
    return ", ".join(parts)


def _step(step: timedelta) -> str:
    minutes = int(step.total_seconds() // 60)
    return f"{minutes} min" if minutes < 120 else f"{minutes // 60} h"
