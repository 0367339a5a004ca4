"""``eventbus.interop.opentelemetry``: spans and metrics, checked with the real OpenTelemetry
SDK (in-memory span exporter and metric reader), on asyncio and trio."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from eventbus import Event, EventBus, MemoryFailureStore
from eventbus.interop.opentelemetry import BusInstrumentation, instrument
from tests.eventbus.helpers import OrderPaid, OrderShipped, explode, reg

PAID = OrderPaid(order_id=1, user_id=7)


class Telemetry:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])

    def spans(self, prefix: str = "") -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.name.startswith(prefix)]

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """name -> [(attributes, value or histogram count)]"""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.reader.get_metrics_data()
        assert data is not None
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    points = out.setdefault(metric.name, [])
                    for p in metric.data.data_points:
                        value = getattr(p, "value", None)
                        points.append((dict(p.attributes or {}), getattr(p, "count", value)))
        return out


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    t = Telemetry()
    yield t
    t.tracer_provider.shutdown()
    t.meter_provider.shutdown()


@pytest.fixture
def traced(bus: EventBus, telemetry: Telemetry) -> Iterator[BusInstrumentation]:
    inst = instrument(bus, telemetry.tracer_provider, telemetry.meter_provider)
    yield inst
    inst.uninstrument()


def ok(e: Event) -> str:
    return "done"


async def test_an_emit_and_its_listener_calls_are_spans(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    bus.on(OrderPaid, ok)
    bus.on("order.*", ok, name="audit")
    bus.emit(PAID)
    [emit] = telemetry.spans("eventbus.emit")
    calls = telemetry.spans("eventbus.listener")
    assert emit.name == "eventbus.emit order.paid" and emit.kind is SpanKind.PRODUCER
    assert emit.attributes is not None
    event_id = emit.attributes["eventbus.event.id"]
    assert emit.attributes["eventbus.correlation_id"] == event_id
    assert "eventbus.causation_id" not in emit.attributes
    assert (emit.attributes["eventbus.listeners"], emit.attributes["eventbus.emit.mode"]) == (
        2,
        "emit",
    )
    assert [c.name for c in calls] == [
        "eventbus.listener tests.eventbus.test_opentelemetry:ok",
        "eventbus.listener audit",
    ]
    for call in calls:
        assert call.kind is SpanKind.CONSUMER
        assert call.parent is not None and call.parent.span_id == emit.context.span_id
        assert call.attributes is not None
        assert call.attributes["eventbus.event.id"] == event_id
        assert call.attributes["eventbus.listener.outcome"] == "ok"
        assert call.attributes["eventbus.listener.attempt"] == 1
        assert call.attributes["messaging.destination.name"] == "order.paid"


async def test_a_failing_listener_marks_its_span_and_counts_a_failure(
    bus: EventBus, store: MemoryFailureStore, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    bus.on(OrderPaid, explode)  # a lone listener: emit() records its failure itself
    bus.emit(PAID)
    [rec] = await store.query()
    [emit] = telemetry.spans("eventbus.emit")
    [call] = telemetry.spans("eventbus.listener")
    assert emit.status.status_code is StatusCode.UNSET  # captured: the publisher did not fail
    assert call.status.status_code is StatusCode.ERROR
    assert call.status.description == "ValueError: boom"
    assert call.attributes is not None and call.attributes["eventbus.listener.outcome"] == "error"
    assert call.attributes["eventbus.event.id"] == rec.event_id
    assert [e.name for e in call.events] == ["exception"]
    m = telemetry.metrics()
    assert m["eventbus.failures"] == [
        (
            {
                "eventbus.event.name": "order.paid",
                "eventbus.listener.name": "tests.eventbus.helpers:explode",
                "error.type": "ValueError",
            },
            1,
        )
    ]
    assert (
        {
            "eventbus.listener.name": "tests.eventbus.helpers:explode",
            "eventbus.listener.outcome": "error",
            "eventbus.event.name": "order.paid",
        },
        1,
    ) in m["eventbus.listener.calls"]


async def test_propagate_marks_the_emit_span(
    store: MemoryFailureStore, telemetry: Telemetry
) -> None:
    bus = EventBus(reg, store, errors="propagate")
    inst = instrument(bus, telemetry.tracer_provider, telemetry.meter_provider)
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, ok)
    with pytest.RaisesGroup(pytest.RaisesExc(ValueError, match="^boom")):
        bus.emit(PAID)
    [emit] = telemetry.spans("eventbus.emit")
    assert emit.status.status_code is StatusCode.ERROR
    inst.uninstrument()


async def test_a_nested_emit_links_to_its_cause(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    def ship(e: OrderPaid) -> None:
        bus.emit(OrderShipped(order_id=e.order_id))

    bus.on(OrderPaid, ship)
    bus.on(OrderShipped, ok)
    bus.emit(PAID)
    paid, shipped = (
        next(s for s in telemetry.spans() if s.name == f"eventbus.emit {n}")
        for n in ("order.paid", "order.shipped")
    )
    assert paid.attributes is not None and shipped.attributes is not None
    assert shipped.attributes["eventbus.causation_id"] == paid.attributes["eventbus.event.id"]
    assert shipped.attributes["eventbus.correlation_id"] == paid.attributes["eventbus.event.id"]
    [link] = shipped.links
    assert link.context.span_id == paid.context.span_id
    assert link.attributes == {"eventbus.link": "causation"}
    assert shipped.context.trace_id == paid.context.trace_id


async def test_background_listeners_join_the_publishers_trace(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    done = anyio.Event()

    async def grant(e: OrderPaid) -> None:
        await anyio.lowlevel.checkpoint()
        bus.emit(OrderShipped(order_id=1))
        done.set()

    bus.on(OrderPaid, grant)
    bus.on(OrderShipped, ok)
    tracer = telemetry.tracer_provider.get_tracer("test")
    async with bus:
        with tracer.start_as_current_span("request") as request:
            bus.emit(PAID)
        with anyio.fail_after(5):
            await done.wait()
    trace_id = request.get_span_context().trace_id
    spans = {s.name: s for s in telemetry.spans()}
    emit = spans["eventbus.emit order.paid"]
    [call] = [s for n, s in spans.items() if n.endswith("<locals>.grant")]
    child = spans["eventbus.emit order.shipped"]
    assert emit.parent is not None and emit.parent.span_id == request.get_span_context().span_id
    assert call.parent is not None and call.parent.span_id == emit.context.span_id
    assert child.parent is not None and child.parent.span_id == call.context.span_id
    assert {s.context.trace_id for s in spans.values()} == {trace_id}
    assert call.attributes is not None
    assert emit.attributes is not None
    assert call.attributes["eventbus.event.id"] == emit.attributes["eventbus.event.id"]
    assert call.attributes["eventbus.listener.async"] is True


async def test_emit_async_listener_spans_are_children_of_its_span(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    async def a(e: Event) -> None:
        await anyio.lowlevel.checkpoint()

    async def b(e: Event) -> None:
        raise KeyError("b")

    bus.on(OrderPaid, a)
    bus.on(OrderPaid, b)
    outcomes = await bus.emit_async(PAID)
    assert [o.ok for o in outcomes] == [True, False]
    [emit] = telemetry.spans("eventbus.emit")
    calls = telemetry.spans("eventbus.listener")
    assert emit.attributes is not None
    assert (emit.attributes["eventbus.emit.mode"], emit.attributes["eventbus.failed"]) == (
        "emit_async",
        1,
    )
    assert sorted(str((c.attributes or {})["eventbus.listener.outcome"]) for c in calls) == [
        "error",
        "ok",
    ]
    assert {c.parent.span_id for c in calls if c.parent} == {emit.context.span_id}


async def test_each_retry_attempt_is_a_span(
    store: MemoryFailureStore, telemetry: Telemetry
) -> None:
    bus = EventBus(reg, store, retry_backoff=0)
    inst = instrument(bus, telemetry.tracer_provider, telemetry.meter_provider)
    tries: list[int] = []

    def flaky(e: Event) -> None:
        tries.append(1)
        if len(tries) < 3:
            raise ValueError("not yet")

    bus.on(OrderPaid, flaky, retries=2)
    bus.emit(PAID)
    calls = telemetry.spans("eventbus.listener")
    assert [
        (
            (c.attributes or {})["eventbus.listener.attempt"],
            (c.attributes or {})["eventbus.listener.outcome"],
        )
        for c in calls
    ] == [(1, "error"), (2, "error"), (3, "ok")]
    assert all((c.attributes or {})["eventbus.listener.retries"] == 2 for c in calls)
    inst.uninstrument()


async def test_a_timed_out_listener_is_cancelled_and_its_timeout_shown(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    async def stuck(e: Event) -> None:
        await anyio.sleep_forever()

    bus.on(OrderPaid, stuck, timeout=0.01)
    with anyio.fail_after(5):
        [out] = await bus.emit_async(PAID)
    assert out.error is not None
    [call] = telemetry.spans("eventbus.listener")
    assert call.attributes is not None
    assert call.attributes["eventbus.listener.outcome"] == "cancelled"
    assert call.attributes["eventbus.listener.timeout"] == 0.01


async def test_metrics_count_emits_calls_durations_drops_and_the_queue(
    telemetry: Telemetry, store: MemoryFailureStore
) -> None:
    bus = EventBus(reg, store, queue_size=1, workers=1)
    inst = instrument(bus, telemetry.tracer_provider, telemetry.meter_provider)
    release = anyio.Event()

    async def slow(e: Event) -> None:
        await release.wait()

    bus.on(OrderPaid, slow)
    async with bus:
        with anyio.fail_after(5):
            bus.emit(PAID)  # taken by the worker
            await anyio.wait_all_tasks_blocked()
            bus.emit(PAID)  # queued
            bus.emit(PAID)  # dropped: queue full
            m = telemetry.metrics()
            depth = {a["eventbus.queue.state"]: v for a, v in m["eventbus.queue.depth"]}
            assert depth == {"waiting": 1, "running": 1}
            release.set()
    m = telemetry.metrics()
    assert m["eventbus.emits"] == [
        ({"eventbus.event.name": "order.paid", "eventbus.emit.mode": "emit"}, 3)
    ]
    name = "tests.eventbus.test_opentelemetry:test_metrics_count_emits_calls_durations_drops_and_the_queue.<locals>.slow"  # noqa: E501
    assert m["eventbus.dropped"] == [
        (
            {
                "eventbus.event.name": "order.paid",
                "eventbus.listener.name": name,
                "error.type": "eventbus.ListenerDroppedError",
            },
            1,
        )
    ]
    assert m["eventbus.listener.calls"] == [
        (
            {
                "eventbus.listener.name": name,
                "eventbus.listener.outcome": "ok",
                "eventbus.event.name": "order.paid",
            },
            2,
        )
    ]
    assert m["eventbus.listener.duration"] == [
        ({"eventbus.listener.name": name, "eventbus.listener.outcome": "ok"}, 2)
    ]
    inst.uninstrument()


async def test_uninstrumented_buses_call_listeners_directly(
    bus: EventBus, telemetry: Telemetry
) -> None:
    bus.on(OrderPaid, ok)
    bus.emit(PAID)
    assert bus._dispatch[OrderPaid][0] is ok  # emit() calls the listener itself
    inst = instrument(bus, telemetry.tracer_provider, telemetry.meter_provider)
    [sub] = bus.listeners(OrderPaid)
    assert sub.call is not ok and sub.fn is ok
    bus.emit(PAID)
    assert bus._dispatch[OrderPaid][0] is not ok
    with pytest.raises(RuntimeError, match="is instrumented already"):
        instrument(bus, telemetry.tracer_provider, telemetry.meter_provider)
    inst.uninstrument()
    bus.emit(PAID)
    assert bus._dispatch[OrderPaid][0] is ok and sub.call is ok
    assert len(telemetry.spans("eventbus.emit")) == 1  # only the instrumented emit
    bus.off(OrderPaid, ok)  # found by the function subscribed, whatever the bus calls


async def test_instrument_refuses_what_is_not_a_bus() -> None:
    with pytest.raises(TypeError, match=r"^instrument\(\) needs an EventBus, got 3"):
        instrument(3)  # type: ignore[arg-type]


async def test_counted_calls_and_spans_together(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    bus.count_calls = True
    bus.on(OrderPaid, ok, name="a")
    bus.emit(PAID)
    with anyio.fail_after(5):
        await bus.emit_async(PAID)
    assert [(s.calls, s.failures) for s in bus.listener_statistics()] == [(2, 0)]
    assert len(telemetry.spans("eventbus.emit")) == 2
    assert len(telemetry.spans("eventbus.listener")) == 2


class ReturnsACoroutine:
    """A sync-declared listener whose call returns a coroutine (emit_async awaits it)."""

    def __init__(self) -> None:
        self.current: list[Any] = []

    def __call__(self, e: Event) -> Any:
        return self.work()

    async def work(self) -> str:
        await anyio.lowlevel.checkpoint()
        from opentelemetry import trace

        self.current.append(trace.get_current_span().get_span_context().span_id)
        return "later"


async def test_the_span_of_a_sync_listener_returning_an_awaitable_covers_the_await(
    bus: EventBus, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    """Regression test: its span ended when the call returned, before emit_async awaited
    what it returned; the awaited part ran outside it (core review, risk 6)."""
    listener = ReturnsACoroutine()
    bus.on(OrderPaid, listener, name="later")
    with anyio.fail_after(5):
        [outcome] = await bus.emit_async(PAID)
    assert outcome.value == "later"
    [call] = telemetry.spans("eventbus.listener")
    assert listener.current == [call.context.span_id]
    assert call.attributes is not None and call.attributes["eventbus.listener.outcome"] == "ok"


async def test_under_emit_the_awaitable_a_sync_listener_returns_fails_its_span(
    bus: EventBus, store: MemoryFailureStore, telemetry: Telemetry, traced: BusInstrumentation
) -> None:
    listener = ReturnsACoroutine()
    bus.on(OrderPaid, listener, name="later")
    bus.on(OrderPaid, ok)  # two: the generated dispatch closes it
    bus.emit(PAID)
    [rec] = await store.query()
    assert rec.error_type == "TypeError" and listener.current == []  # closed, never run
    [call] = telemetry.spans("eventbus.listener later")
    assert call.status.status_code is StatusCode.ERROR
    assert call.attributes is not None and call.attributes["eventbus.listener.outcome"] == "error"
