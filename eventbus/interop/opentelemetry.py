"""OpenTelemetry traces and metrics for a bus (the optional extra ``otel``).

``instrument(bus)`` makes, through the global providers or the ones given:

* a span per emit, ``eventbus.emit order.paid`` (kind ``PRODUCER``), for ``emit()``,
  ``emit_async()`` and ``emit_threadsafe()``, with a link to the span of the emit that caused
  it (its ``causation_id``);
* a child span per listener call, ``eventbus.listener <name>`` (kind ``CONSUMER``), with the
  event name and id, the listener name, the outcome (``ok``, ``error``, ``cancelled``), the
  attempt and the listener's timeout. Listener spans run in the emit's context, background
  listeners too (the workers run each call in a copy of the publisher's context taken at emit
  time), so they join the request's trace;
* metrics: ``eventbus.emits``, ``eventbus.listener.calls`` and ``eventbus.listener.duration``
  (by listener and outcome), ``eventbus.failures`` (by listener and error type),
  ``eventbus.dropped``, and the gauge ``eventbus.queue.depth``.

Attribute names follow the messaging conventions where they fit (``messaging.system`` is
``eventbus``, ``messaging.destination.name`` the event name) and use ``eventbus.*`` otherwise.

A bus that is not instrumented runs exactly the code it ran before: instrumentation wraps the
functions the bus calls when they are built, and ``uninstrument()`` puts them back.
"""

from __future__ import annotations

import collections
import inspect
import time
from collections.abc import Awaitable, Callable, Generator, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from ..extras import missing_extra

if _missing := missing_extra(__name__, "otel"):
    raise _missing

from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, MeterProvider, Observation
from opentelemetry.trace import (
    Link,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TracerProvider,
)

from .._core._bus import EventBus
from .._core._calls import attempt
from .._core._emission import Emission
from .._core._listeners import Listener, Outcome
from .._core._nesting import Nesting
from .._core._sink import AWAITABLE_HINT
from .._core._table import Plan
from .._events import Event
from .._failures import FailureRecord

__all__ = ["BusInstrumentation", "instrument"]

_SCOPE = "eventbus"
#: Span contexts kept to link an emit to the emit that caused it (the most recent ones).
_MAX_LINKED = 10_000
_DROPPED = "eventbus.ListenerDroppedError"


def instrument(
    bus: EventBus,
    tracer_provider: TracerProvider | None = None,
    meter_provider: MeterProvider | None = None,
) -> BusInstrumentation:
    """Trace and measure *bus*; call ``.uninstrument()`` on the result to stop.

    Instrument before emitting: a ``bus.emit`` bound earlier still works, and is traced too.

    :param tracer_provider: default: the global one (``opentelemetry.trace``)
    :param meter_provider: default: the global one (``opentelemetry.metrics``)
    :raises TypeError: if *bus* is not an :class:`~eventbus.EventBus`
    :raises RuntimeError: if *bus* is instrumented already
    """
    if not isinstance(bus, EventBus):
        raise TypeError(f"instrument() needs an EventBus, got {bus!r}")
    if bus.observer is not None:
        raise RuntimeError(f"{bus!r} is instrumented already; call uninstrument() first")
    instrumentation = BusInstrumentation(bus, tracer_provider, meter_provider)
    bus.instrument(instrumentation)
    return instrumentation


class BusInstrumentation:
    """The spans and instruments of one bus (an :class:`eventbus._core._observe.Observer`)."""

    def __init__(
        self,
        bus: EventBus,
        tracer_provider: TracerProvider | None,
        meter_provider: MeterProvider | None,
    ) -> None:
        self.bus = bus
        self._nesting: Nesting = Nesting(1)  # until bound() hands it the bus's
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self._emits = meter.create_counter(
            "eventbus.emits", unit="{emit}", description="Events emitted"
        )
        self._calls = meter.create_counter(
            "eventbus.listener.calls", unit="{call}", description="Listener calls, by outcome"
        )
        self._duration = meter.create_histogram(
            "eventbus.listener.duration", unit="s", description="Duration of listener calls"
        )
        self._failures = meter.create_counter(
            "eventbus.failures", unit="{failure}", description="Failure records made"
        )
        self._dropped = meter.create_counter(
            "eventbus.dropped", unit="{call}", description="Background calls dropped"
        )
        self._depth = meter.create_observable_gauge(
            "eventbus.queue.depth",
            callbacks=[self._observe_depth],
            unit="{call}",
            description="Background calls waiting in the queue",
        )
        self._spans: collections.OrderedDict[str, SpanContext] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"<BusInstrumentation of {self.bus!r}>"

    def uninstrument(self) -> None:
        """Stop: the bus calls its listeners directly again."""
        if self.bus.observer is self:
            self.bus.instrument(None)

    # -- the Observer protocol ---------------------------------------------------------------

    def bound(self, nesting: Nesting) -> None:
        self._nesting = nesting

    def listener(self, sub: Listener) -> Callable[[Any], Any]:
        fn = sub.fn
        if sub.is_async:

            async def traced_async(event: Event) -> Any:
                with self._listener_span(sub, event):
                    return await fn(event)

            return traced_async

        def traced(event: Event) -> Any:
            call = self._listener_call(sub, event)
            with call.current():
                try:
                    value = fn(event)
                except BaseException as exc:
                    call.finish(exc)
                    raise
            if value is not None and inspect.isawaitable(value):
                # emit_async() awaits it (emit() closes it): the call ends after that
                return _Awaited(value, call)
            call.finish(None)
            return value

        return traced

    def dispatch(
        self, plan: Plan, call: Callable[[Any], object], lone: bool
    ) -> Callable[[Any], object]:
        n = len(plan.listeners)
        nesting = self._nesting

        def traced_emit(event: Event) -> object:
            with self._emit_span(nesting.emission(), "emit", n, raises=not lone):
                return call(event)

        return traced_emit

    async def emit_async(
        self, plan: Plan, emission: Emission, run: Callable[[], Awaitable[list[Outcome]]]
    ) -> list[Outcome]:
        with self._emit_span(emission, "emit_async", len(plan.listeners), raises=True) as span:
            outcomes = await run()
            span.set_attribute("eventbus.failed", sum(1 for o in outcomes if not o.ok))
            return outcomes

    def failed(self, record: FailureRecord) -> None:
        attributes = {
            "eventbus.event.name": record.event_name,
            "eventbus.listener.name": record.listener,
            "error.type": record.error_type,
        }
        self._failures.add(1, attributes)
        if record.error_type == _DROPPED:
            self._dropped.add(1, attributes)

    # -- spans ---------------------------------------------------------------------------------

    @contextmanager
    def _emit_span(
        self, emission: Emission, mode: str, listeners: int, raises: bool
    ) -> Iterator[Span]:
        name = emission.event.__event_name__
        attributes: dict[str, Any] = {
            "messaging.system": "eventbus",
            "messaging.operation.type": "send",
            "messaging.destination.name": name,
            "eventbus.event.name": name,
            "eventbus.event.id": emission.event_id,
            "eventbus.correlation_id": emission.correlation_id,
            "eventbus.emit.mode": mode,
            "eventbus.listeners": listeners,
        }
        links = []
        if emission.causation_id is not None:
            attributes["eventbus.causation_id"] = emission.causation_id
            cause = self._spans.get(emission.causation_id)
            if cause is not None:
                links.append(Link(cause, {"eventbus.link": "causation"}))
        self._emits.add(1, {"eventbus.event.name": name, "eventbus.emit.mode": mode})
        with self.tracer.start_as_current_span(
            f"eventbus.emit {name}",
            kind=SpanKind.PRODUCER,
            attributes=attributes,
            links=links,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            self._remember(emission.event_id, span.get_span_context())
            try:
                yield span
            except Exception as exc:
                if raises:  # it reaches the publisher (propagate): the emit failed
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                raise

    @contextmanager
    def _listener_span(self, sub: Listener, event: Event) -> Iterator[Span]:
        call = self._listener_call(sub, event)
        with call.current():
            try:
                yield call.span
            except BaseException as exc:
                call.finish(exc)
                raise
        call.finish(None)

    def _listener_call(self, sub: Listener, event: Event) -> _Call:
        """The span of one listener call, started (not current yet)."""
        emission = self._nesting.current()
        ename = event.__event_name__
        attributes: dict[str, Any] = {
            "messaging.system": "eventbus",
            "messaging.operation.type": "process",
            "messaging.destination.name": ename,
            "eventbus.event.name": ename,
            "eventbus.listener.name": sub.name,
            "eventbus.listener.attempt": attempt.get(),
            "eventbus.listener.async": sub.is_async,
        }
        if emission is not None and emission.event is event:
            attributes["eventbus.event.id"] = emission.event_id
        if sub.timeout is not None:
            attributes["eventbus.listener.timeout"] = sub.timeout
        if sub.retries:
            attributes["eventbus.listener.retries"] = sub.retries
        span = self.tracer.start_span(
            f"eventbus.listener {sub.name}", kind=SpanKind.CONSUMER, attributes=attributes
        )
        return _Call(self, span, sub.name, ename)

    def _remember(self, event_id: str, context: SpanContext) -> None:
        spans = self._spans
        spans[event_id] = context
        if len(spans) > _MAX_LINKED:
            spans.popitem(last=False)

    def _observe_depth(self, options: CallbackOptions) -> Iterable[Observation]:
        stats = self.bus.statistics()
        return [
            Observation(stats.queued, {"eventbus.queue.state": "waiting"}),
            Observation(stats.in_flight, {"eventbus.queue.state": "running"}),
        ]


class _Call:
    """The span and measurements of one listener call, from its start to :meth:`finish`."""

    __slots__ = ("event", "inst", "listener", "span", "start")

    def __init__(self, inst: BusInstrumentation, span: Span, listener: str, event: str) -> None:
        self.inst = inst
        self.span = span
        self.listener = listener
        self.event = event
        self.start = time.perf_counter()

    def current(self) -> AbstractContextManager[Span]:
        """The span as the current one (while the listener's code runs)."""
        return trace.use_span(
            self.span, end_on_exit=False, record_exception=False, set_status_on_exception=False
        )

    def finish(self, exc: BaseException | None) -> None:
        """End the span and count the call: *exc* is what it raised (None: it returned)."""
        span, outcome = self.span, "ok"
        if isinstance(exc, Exception):
            outcome = "error"
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        elif exc is not None:
            outcome = "cancelled"
        span.set_attribute("eventbus.listener.outcome", outcome)
        measured = {"eventbus.listener.name": self.listener, "eventbus.listener.outcome": outcome}
        self.inst._calls.add(1, {**measured, "eventbus.event.name": self.event})
        self.inst._duration.record(time.perf_counter() - self.start, measured)
        span.end()


class _Awaited:
    """What a sync-declared listener returned, awaitable: awaited (``emit_async()``) inside
    the call's span, which ends after it; closed unawaited (``emit()``), the call failed."""

    __slots__ = ("awaitable", "call")

    def __init__(self, awaitable: Awaitable[Any], call: _Call) -> None:
        self.awaitable = awaitable
        self.call = call

    def __await__(self) -> Generator[Any, None, Any]:
        with self.call.current():
            try:
                value = yield from self.awaitable.__await__()
            except BaseException as exc:
                self.call.finish(exc)
                raise
        self.call.finish(None)
        return value

    def close(self) -> None:
        close = getattr(self.awaitable, "close", None)
        if callable(close):
            close()
        self.call.finish(TypeError(f"listener {self.call.listener!r} {AWAITABLE_HINT}"))
