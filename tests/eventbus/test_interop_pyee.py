"""pyee interop against real pyee emitters: both directions, the facade, failing listeners."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

import anyio
import pytest
from pyee import EventEmitter
from pyee.asyncio import AsyncIOEventEmitter

from eventbus import (
    Event,
    EventBus,
    EventRegistry,
    ListenerErrors,
    ListenerLookupError,
    PayloadError,
    UnknownEventError,
)
from eventbus.interop.pyee import (
    PyeeFacade,
    UnmappedEventError,
    UnsupportedPyeeEventError,
    as_pyee,
    bridge_from_pyee,
    bridge_to_pyee,
)
from eventbus.testing import AsyncRecordingListener, RecordingListener, capture_failures

reg = EventRegistry()

asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int
    amount: int = 0


class OrderShipped(Event, name="order.shipped", registry=reg):
    order_id: int


class Elsewhere(Event, name="order.paid", registry=EventRegistry()):
    order_id: int


def explode(*args: Any, **kwargs: Any) -> None:
    raise ValueError("boom")


def paid_from_args(order_id: int, amount: int) -> OrderPaid:
    return OrderPaid(order_id=order_id, amount=amount)


# -- pyee -> bus ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("converter", "args", "kwargs"),
    [
        pytest.param(OrderPaid, (), {"order_id": 1, "amount": 5}, id="type-kwargs"),
        pytest.param(OrderPaid, ({"order_id": 1, "amount": 5},), {}, id="type-mapping"),
        pytest.param(OrderPaid, (OrderPaid(order_id=1, amount=5),), {}, id="type-instance"),
        pytest.param(paid_from_args, (1, 5), {}, id="function-positional"),
    ],
)
def test_bridge_from_pyee_builds_typed_events(
    converter: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    ee = EventEmitter()
    bus = EventBus(reg)
    seen = RecordingListener()
    bus.on(OrderPaid, seen)
    bridge_from_pyee(ee, bus, {"paid": converter})
    assert ee.emit("paid", *args, **kwargs) is True
    assert seen.events == [OrderPaid(order_id=1, amount=5)]


@pytest.mark.parametrize(
    ("converter", "args", "kwargs", "match"),
    [
        pytest.param(OrderPaid, (), {"order_id": "1"}, "field 'order_id' must be int", id="type"),
        pytest.param(OrderPaid, (), {}, "missing field 'order_id'", id="missing"),
        pytest.param(OrderPaid, (1, 2), {}, "2 positional argument", id="positional"),
        pytest.param(lambda: "nope", (), {}, "returned str, not an Event", id="not-an-event"),
    ],
)
def test_a_bad_pyee_payload_raises_into_the_pyee_publisher(
    converter: Any, args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    ee = EventEmitter()
    bridge_from_pyee(ee, EventBus(reg), {"paid": converter})
    with pytest.raises(PayloadError, match=match):
        ee.emit("paid", *args, **kwargs)


def test_bridge_from_pyee_validates_its_mapping_up_front() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    with pytest.raises(UnknownEventError, match=r"mapping\['paid'\] must be declared"):
        bridge_from_pyee(ee, bus, {"paid": Elsewhere})
    with pytest.raises(TypeError, match=r"mapping\['paid'\] must be an Event type or a function"):
        bridge_from_pyee(ee, bus, {"paid": 42})  # type: ignore[dict-item]
    with pytest.raises(UnsupportedPyeeEventError, match="'error' event has no equivalent"):
        bridge_from_pyee(ee, bus, {"error": OrderPaid})
    with pytest.raises(ValueError, match="unmapped='drop' must be"):
        bridge_from_pyee(ee, bus, {}, unmapped="drop")  # type: ignore[arg-type]
    assert ee.event_names() == set()  # nothing half-attached


def test_unmapped_names_are_ignored_by_default() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    seen = RecordingListener()
    bus.on("**", seen)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    assert ee.emit("refunded", order_id=1) is False
    assert seen.count == 0


def test_unmapped_names_can_be_rejected_before_any_pyee_listener_runs() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    pyee_side = RecordingListener()
    ee.on("refunded", pyee_side)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid}, unmapped="reject")
    with pytest.raises(UnmappedEventError, match=r"'refunded' has no mapping .*mapped: 'paid'"):
        ee.emit("refunded", order_id=1)
    assert pyee_side.count == 0
    ee.on("later", pyee_side)  # pyee's own 'new_listener' emit passes the guard
    ee.emit("paid", order_id=1)


def test_detach_stops_forwarding_and_restores_emit() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    seen = RecordingListener()
    bus.on(OrderPaid, seen)
    with bridge_from_pyee(ee, bus, {"paid": OrderPaid}, unmapped="reject") as bridge:
        assert bridge.attached
        ee.emit("paid", order_id=1)
    assert not bridge.attached
    assert "emit" not in vars(ee)
    assert ee.emit("paid", order_id=2) is False
    assert ee.emit("refunded") is False  # no longer rejected
    assert [e.order_id for e in seen.events] == [1]
    bridge.detach()  # again: nothing happens
    assert "detached" in repr(bridge)


def test_detach_survives_listeners_removed_behind_its_back() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    bridge = bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    ee.remove_all_listeners()
    bridge.detach()


def test_a_failing_bus_listener_is_captured_and_the_pyee_publisher_goes_on() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    survivor, pyee_after = RecordingListener(), []
    bus.on(OrderPaid, explode)
    bus.on(OrderPaid, survivor)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    ee.on("paid", lambda **kw: pyee_after.append(kw))
    with capture_failures(bus) as failures:
        assert ee.emit("paid", order_id=1) is True  # no exception, no 'error' event
    failures.assert_one(listener=explode, error_type=ValueError, event=OrderPaid)
    assert survivor.count == 1
    assert pyee_after == [{"order_id": 1}]


def test_a_failing_pyee_listener_keeps_pyee_semantics_and_the_bus_still_got_the_event() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    seen = RecordingListener()
    bus.on(OrderPaid, seen)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    ee.on("paid", explode)
    with capture_failures(bus) as failures, pytest.raises(ValueError, match="boom"):
        ee.emit("paid", order_id=1)  # pyee's EventEmitter raises into its publisher
    assert seen.count == 1
    failures.assert_none()


def test_under_propagate_a_bus_failure_reaches_the_pyee_publisher() -> None:
    ee, bus = EventEmitter(), EventBus(reg, errors="propagate")
    bus.on(OrderPaid, explode)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    with (
        capture_failures(bus) as failures,
        pytest.RaisesGroup(ValueError, check=lambda g: isinstance(g, ListenerErrors)),
    ):
        ee.emit("paid", order_id=1)
    failures.assert_one(listener=explode)


@asyncio_only
async def test_asyncio_emitter_a_bus_failure_is_captured_and_no_error_event_fires() -> None:
    ee = AsyncIOEventEmitter()
    errors: list[BaseException] = []
    ee.on("error", errors.append)
    async with EventBus(reg) as bus:
        failing = AsyncRecordingListener(raises=ValueError("late"))
        bus.on(OrderPaid, failing)
        bridge_from_pyee(ee, bus, {"paid": OrderPaid})
        with capture_failures(bus) as failures:
            assert ee.emit("paid", order_id=1) is True
            with anyio.fail_after(5):
                await failing.wait_for()
            await bus.failures.flush()
        failures.assert_one(listener=failing.listener_name, match="late")
    assert errors == []


@asyncio_only
async def test_asyncio_emitter_reports_bridge_errors_on_its_error_event() -> None:
    ee = AsyncIOEventEmitter()
    errors: list[BaseException] = []
    ee.on("error", errors.append)
    bus = EventBus(reg, errors="propagate")
    bus.on(OrderPaid, explode)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    with capture_failures(bus):
        ee.emit("paid", order_id=1)
        ee.emit("paid", order_id="x")
    assert [type(e) for e in errors] == [ListenerErrors, PayloadError]


@asyncio_only
async def test_asyncio_emitter_failing_pyee_listener_goes_to_error_not_to_the_bus() -> None:
    ee = AsyncIOEventEmitter()
    errors: list[BaseException] = []
    ee.on("error", errors.append)
    bus = EventBus(reg)
    seen = RecordingListener()
    bus.on(OrderPaid, seen)
    ee.on("paid", explode)
    bridge_from_pyee(ee, bus, {"paid": OrderPaid})
    with capture_failures(bus) as failures:
        ee.emit("paid", order_id=1)
    assert [str(e) for e in errors] == ["boom"]
    assert seen.count == 1
    failures.assert_none()


# -- bus -> pyee ---------------------------------------------------------------------------------


def test_bridge_to_pyee_forwards_matching_events_as_one_argument() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    got = RecordingListener()
    ee.on("order.paid", got)
    with bridge_to_pyee(bus, ee, "order.*"):
        bus.emit(OrderPaid(order_id=1))
        bus.emit(OrderShipped(order_id=1))  # no pyee listener: pyee ignores it
    bus.emit(OrderPaid(order_id=2))  # detached
    assert got.events == [OrderPaid(order_id=1)]
    assert bus.listeners(OrderPaid) == []


def test_bridge_to_pyee_can_spread_fields_as_keywords() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    calls: list[dict[str, Any]] = []
    ee.on("order.paid", lambda **kw: calls.append(kw))
    bridge_to_pyee(bus, ee, OrderPaid, call="kwargs")
    bus.emit(OrderPaid(order_id=3, amount=9))
    assert calls == [{"order_id": 3, "amount": 9}]


def test_a_failing_pyee_listener_behind_bridge_to_pyee_is_a_bus_failure() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    ee.on("order.paid", explode)
    survivor = RecordingListener()
    bridge_to_pyee(bus, ee, OrderPaid)
    bus.on(OrderPaid, survivor)
    with capture_failures(bus) as failures:
        bus.emit(OrderPaid(order_id=1))  # the bus publisher is unaffected
    rec = failures.assert_one(error_type=ValueError)
    assert rec.listener == "eventbus.interop.pyee:to_pyee[order.paid]"
    assert survivor.count == 1


@pytest.mark.parametrize("call", ["event", "kwargs"])
def test_one_emitter_bridged_both_ways_does_not_loop(call: Literal["event", "kwargs"]) -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    pyee_side: list[object] = []
    bus_side = RecordingListener()
    ee.on("order.paid", lambda *args, **kwargs: pyee_side.append(args or kwargs))
    bus.on(OrderPaid, bus_side)
    bridge_from_pyee(ee, bus, {"order.paid": OrderPaid})
    bridge_to_pyee(bus, ee, "order.*", call=call)
    with capture_failures(bus) as failures:
        ee.emit("order.paid", order_id=1)  # from pyee: reaches the bus once, no echo
        bus.emit(OrderPaid(order_id=2))  # from the bus: reaches pyee once, no echo
    failures.assert_none()
    assert len(pyee_side) == 2
    assert bus_side.events == [OrderPaid(order_id=1), OrderPaid(order_id=2)]


async def test_a_failed_forward_to_pyee_can_be_retried_from_the_failure_table() -> None:
    ee, bus = EventEmitter(), EventBus(reg)
    flaky = RecordingListener(raises=ValueError, fail_times=1)
    ee.on("order.paid", flaky)
    bridge_to_pyee(bus, ee, OrderPaid, name="to-legacy")
    bus.emit(OrderPaid(order_id=1))
    report = await bus.retry_failures(listener="to-legacy")
    assert flaky.count == 2
    assert [r.status for r in await bus.failures.query()] == ["resolved"]
    assert report.resolved == 1


# -- the facade ----------------------------------------------------------------------------------


def client_module(ee: EventEmitter | PyeeFacade, log: list[str]) -> Callable[[], None]:
    """Code written against pyee's API: it must run unchanged on a real emitter and the facade."""

    @ee.on("order.paid")
    def audit(*args: Any, **kwargs: Any) -> None:
        log.append("audit")

    def once_only(*args: Any, **kwargs: Any) -> None:
        log.append("once")

    ee.once("order.paid", once_only)
    ee.add_listener("order.shipped", audit)  # the same function on a second event

    def publish() -> None:
        log.append(f"handled={ee.emit('order.paid', order_id=1)}")
        log.append(f"handled={ee.emit('order.paid', order_id=2)}")
        log.append(f"n={len(ee.listeners('order.paid'))}")
        ee.remove_listener("order.paid", audit)
        log.append(f"handled={ee.emit('order.paid', order_id=3)}")
        log.append(f"handled={ee.emit('order.shipped', order_id=3)}")

    return publish


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(EventEmitter, id="pyee"),
        pytest.param(lambda: as_pyee(EventBus(reg)), id="facade"),
    ],
)
def test_code_written_for_pyee_behaves_the_same_on_the_facade(make: Callable[[], Any]) -> None:
    log: list[str] = []
    publish = client_module(make(), log)
    publish()
    assert log == [
        "audit",
        "once",
        "handled=True",
        "audit",
        "handled=True",
        "n=1",
        "handled=False",
        "audit",
        "handled=True",
    ]


def test_facade_failing_listener_is_captured_where_pyee_would_raise() -> None:
    pyee_ee, bus = EventEmitter(), EventBus(reg)
    ee = as_pyee(bus)
    survivors: list[str] = []
    for target in (pyee_ee, ee):
        target.on("order.paid", explode)
        name = type(target).__name__
        target.on("order.paid", lambda *a, n=name, **k: survivors.append(n))
    with pytest.raises(ValueError, match="boom"):
        pyee_ee.emit("order.paid", order_id=1)
    with capture_failures(bus) as failures:
        assert ee.emit("order.paid", order_id=1) is True
    rec = failures.assert_one(error_type=ValueError)
    assert rec.listener == "tests.eventbus.test_interop_pyee:explode@order.paid"
    assert survivors == ["PyeeFacade"]  # pyee stopped at the failure; the bus went on


def test_facade_has_no_error_or_new_listener_event() -> None:
    ee = as_pyee(EventBus(reg))
    with pytest.raises(UnsupportedPyeeEventError, match="on_failure"):
        ee.on("error", print)
    with pytest.raises(UnsupportedPyeeEventError, match="'error'"):
        ee.emit("error", ValueError("x"))
    with pytest.raises(UnsupportedPyeeEventError, match="bus.listeners"):
        ee.on("new_listener", print)


def test_facade_wildcards_match_and_are_listed() -> None:
    ee = as_pyee(EventBus(reg))
    exact, wild = RecordingListener(), RecordingListener()
    ee.on("order.*", wild)
    ee.on(OrderPaid, exact)
    ee.emit("order.paid", OrderPaid(order_id=1))
    ee.emit("order.shipped", {"order_id": 2})
    assert ee.listeners("order.paid") == [wild, exact]
    assert wild.events == [OrderPaid(order_id=1), OrderShipped(order_id=2)]
    assert exact.events == [OrderPaid(order_id=1)]
    assert ee.event_names() == {"order.*", "order.paid"}


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        pytest.param(
            ("order.nope",), {}, UnknownEventError, "'order.nope' is not declared", id="undeclared"
        ),
        pytest.param(("order.paid", 1, 2), {}, PayloadError, "2 positional", id="positional"),
        pytest.param(
            ("order.paid", OrderShipped(order_id=1)),
            {},
            PayloadError,
            "got a 'order.shipped' event",
            id="wrong-event",
        ),
        pytest.param(
            ("order.paid",), {"order_id": "x"}, PayloadError, "must be int", id="bad-field"
        ),
    ],
)
def test_facade_emit_rejects_what_cannot_become_a_typed_event(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    ee = as_pyee(EventBus(reg))
    with pytest.raises(error, match=match):
        ee.emit(*args, **kwargs)


async def test_facade_kwargs_call_shape_spreads_fields_for_sync_and_async_listeners() -> None:
    ee = as_pyee(EventBus(reg), call="kwargs")
    got: list[tuple[str, dict[str, Any]]] = []

    def sync_listener(**kw: Any) -> None:
        got.append(("sync", kw))

    async def async_listener(order_id: int, amount: int) -> None:
        got.append(("async", {"order_id": order_id, "amount": amount}))

    ee.on("order.paid", sync_listener)
    ee.on("order.paid", async_listener)
    assert ee.listeners("order.paid") == [sync_listener, async_listener]
    outcomes = await ee.bus.emit_async(OrderPaid(order_id=1, amount=2))
    assert all(o.ok for o in outcomes)
    assert got == [("sync", {"order_id": 1, "amount": 2}), ("async", {"order_id": 1, "amount": 2})]
    ee.remove_listener("order.paid", async_listener)
    assert ee.listeners("order.paid") == [sync_listener]


async def test_facade_async_listeners_run_in_the_background_of_a_running_bus() -> None:
    listener = AsyncRecordingListener()
    async with EventBus(reg) as bus:
        ee = as_pyee(bus)
        ee.on("order.paid", listener)
        assert ee.emit("order.paid", order_id=1) is True
        with anyio.fail_after(5):
            await listener.wait_for()


def test_facade_names_listeners_uniquely_and_registers_a_pair_once() -> None:
    bus = EventBus(reg)
    ee = as_pyee(bus)

    def make() -> Callable[[Event], None]:
        return lambda e: None

    first, second = make(), make()  # same qualname: 'make.<locals>.<lambda>'
    ee.on("order.paid", first)
    ee.on("order.paid", second)
    ee.on("order.paid", first)  # pyee keeps one registration per (event, function)
    base = "tests.eventbus.test_interop_pyee:" + make().__qualname__ + "@order.paid"
    assert [(s.name, s.fn) for s in bus.listeners(OrderPaid)] == [
        (base, first),
        (base + "#2", second),
    ]


def test_facade_remove_listener_and_remove_all_listeners() -> None:
    bus = EventBus(reg)
    ee: PyeeFacade = as_pyee(bus)
    other = RecordingListener()
    bus.on(OrderPaid, other)  # not the facade's: survives remove_all_listeners
    a, b = RecordingListener(), RecordingListener()
    ee.on("order.paid", a)
    ee.once("order.shipped")(b)
    with pytest.raises(ListenerLookupError, match="is not subscribed to 'order.shipped'"):
        ee.remove_listener("order.shipped", a)
    ee.remove_all_listeners("order.paid")
    assert ee.listeners("order.paid") == [other]
    ee.emit("order.shipped", order_id=1)  # the once listener fires and leaves
    ee.emit("order.shipped", order_id=2)
    assert b.count == 1
    assert ee.event_names() == set()
    ee.remove_all_listeners()
    assert "PyeeFacade(EventBus(" in repr(ee)
