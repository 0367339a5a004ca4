"""The bus page: listeners per event with their call and failure counts, the queue, drops,
and failures over time as a chart.

What the public API gives: ``bus.statistics()`` (queue depth, in flight, drops, failures since
start), ``bus.listeners(name)`` per declared event, ``bus.listener_statistics()`` (calls and
failures per event and listener, which the page turns on: ``count_calls``), and the failure
store for the chart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from markupsafe import Markup
from starlette.responses import Response

from eventbus import EventBus, FailureRecord, ListenerStatistics

from ._charts import bar_chart, time_buckets
from ._pages import Action, PageRequest, Panel, View
from ._store_wait import DEFAULT_STORE_TIMEOUT, StoreUnavailable, store_deadline

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
    calls: int
    failures: int


class BusPage:
    """Listeners with their call counts, queue and failures over time of *bus*.

    :param count_calls: turn the bus's call counting on (``bus.count_calls = True``), which
        the listener table shows; without it, a bus that does not count shows no figures
    :param chart_limit: most failures read for the chart (the newest ones); the page says so
        when it reaches it
    :param store_timeout: seconds the chart waits for the failure store; past it, the page
        shows the rest and says the store is unavailable
    """

    slug = "bus"
    title = "Bus"
    templates: tuple[str, str] | None = None

    def __init__(
        self,
        bus: EventBus,
        *,
        count_calls: bool = True,
        chart_limit: int = 10_000,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
    ) -> None:
        self.bus = bus
        self.chart_limit = chart_limit
        self.store_timeout = store_timeout
        if count_calls:
            bus.count_calls = True

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
        notices: list[str] = []
        recent: list[FailureRecord] = []
        chart: Markup | str
        try:
            with store_deadline(store, self.store_timeout):
                await store.flush()
                recent = await store.query(since=now - span, limit=self.chart_limit)
        except StoreUnavailable as exc:
            notices.append(exc.message)
            chart = "No chart: it is drawn from the failure store, which did not answer."
        else:
            chart = bar_chart(
                time_buckets(
                    ((r.first_failed_at, r.status.value) for r in recent),
                    end=now,
                    span=span,
                    count=count,
                ),
                label=f"Failures per {_step(span / count)} over the last {window}, by status now",
            )
        counted = {(s.event, s.listener): s for s in self.bus.listener_statistics()}
        return request.render(
            "bus.html",
            status=400 if errors else 200,
            errors=errors,
            notices=notices,
            stats=self.bus.statistics(),
            rows=self._listener_rows(counted),
            counting=self.bus.count_calls,
            chart=chart,
            window=window,
            windows=list(WINDOWS),
            capped=len(recent) >= self.chart_limit,
            chart_limit=self.chart_limit,
        )

    def _listener_rows(
        self, counted: dict[tuple[str, str], ListenerStatistics]
    ) -> list[ListenerRow]:
        rows: list[ListenerRow] = []
        seen: set[tuple[str, str]] = set()
        for name in sorted(self.bus.registry.names()):
            for sub in self.bus.listeners(name):
                key = (name, sub.name)
                seen.add(key)
                stats = counted.get(key)
                rows.append(
                    ListenerRow(
                        event=name,
                        listener=sub.name,
                        pattern=sub.pattern,
                        kind="async" if sub.is_async else "sync",
                        options=_options(sub),
                        calls=stats.calls if stats else 0,
                        failures=stats.failures if stats else 0,
                    )
                )
        # counted listeners no longer subscribed (or of events no longer declared)
        rows += [
            ListenerRow(key[0], key[1], "", "gone", "", counted[key].calls, counted[key].failures)
            for key in sorted(set(counted) - seen)
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
