"""``priority=``, ``times=``, ``bus.subscribed()`` and the ``max_listeners`` leak warning."""

from __future__ import annotations

import warnings

import anyio
import pytest

from eventbus import (
    Event,
    EventBus,
    MaxListenersExceededWarning,
    MemoryFailureStore,
)
from tests.eventbus.helpers import OrderPaid, OrderShipped, Recorder, explode, reg

PAID = OrderPaid(order_id=1, user_id=7)


# -- priority --------------------------------------------------------------------------------


async def test_higher_priority_runs_first_across_exact_and_wildcard(
    bus: EventBus, rec: Recorder
) -> None:
    bus.on(OrderPaid, rec.sync("a"))
    bus.on("order.*", rec.sync("b"), priority=5)
    bus.on(OrderPaid, rec.sync("c"), priority=5)
    bus.on("**", rec.sync("d"), priority=-1)
    bus.on(OrderPaid, rec.sync("e"))
    bus.once("order.paid", rec.sync("f"), priority=10)
    bus.emit(PAID)
    assert rec.tags == ["f", "b", "c", "a", "e", "d"]
    assert [s.name.rsplit(":")[-1] for s in bus.listeners(OrderPaid)] == ["b", "c", "a", "e", "d"]


async def test_priority_orders_emit_async_and_sequential_fan_out(
    bus: EventBus, rec: Recorder
) -> None:
    bus.on(OrderPaid, rec.async_("low"))
    bus.on(OrderPaid, rec.async_("high"), priority=1)
    bus.on(OrderPaid, rec.sync("mid"))
    outcomes = await bus.emit_async(PAID)
    assert [o.value for o in outcomes] == ["high", "low", "mid"]
    rec.calls.clear()
    outcomes = await bus.emit_async(PAID, concurrent=False)
    assert rec.tags == ["high", "low", "mid"]
    assert [o.value for o in outcomes] == ["high", "low", "mid"]


async def test_priority_orders_background_listeners_queueing(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.async_("later"))
    bus.on(OrderPaid, rec.async_("first"), priority=3)
    async with EventBus(reg, workers=1) as one_worker:
        for sub in bus.listeners(OrderPaid):
            one_worker.on(OrderPaid, sub.fn, name=sub.name, priority=sub.priority)
        one_worker.emit(PAID)
    assert rec.tags == ["first", "later"]


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        pytest.param({"priority": "high"}, TypeError, r"^priority='high' must be an int", id="str"),
        pytest.param({"priority": True}, TypeError, r"^priority=True must be an int", id="bool"),
        pytest.param({"times": 0}, ValueError, r"^times=0 must be an int >= 1", id="times-0"),
        pytest.param({"times": -2}, ValueError, r"^times=-2 must be an int >= 1", id="times-neg"),
        pytest.param({"times": 1.5}, TypeError, r"^times=1\.5 must be an int", id="times-float"),
        pytest.param(
            {"times": 2, "once": True}, ValueError, r"^once=True means times=1", id="once-times"
        ),
    ],
)
async def test_bad_options_are_refused_by_name(
    bus: EventBus, rec: Recorder, options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        bus.on(OrderPaid, rec.sync("x"), **options)  # type: ignore[call-overload]
    with pytest.raises(error, match=message):
        bus.subscribed(OrderPaid, rec.sync("x"), **options)  # type: ignore[call-overload]
    assert bus.listeners(OrderPaid) == []


# -- times ---------------------------------------------------------------------------------


async def test_times_runs_n_times_then_unsubscribes(bus: EventBus, rec: Recorder) -> None:
    sub_fn = rec.sync("thrice")
    bus.on(OrderPaid, sub_fn, times=3)
    bus.on(OrderPaid, rec.sync("always"))
    [sub, _] = bus.listeners(OrderPaid)
    assert (sub.times, sub.left, sub.once) == (3, 3, False)
    assert "times=3" in repr(sub)
    for _ in range(5):
        bus.emit(PAID)
    assert rec.tags.count("thrice") == 3 and rec.tags.count("always") == 5
    assert [s.name for s in bus.listeners(OrderPaid)] == ["tests.eventbus.helpers:always"]


async def test_times_counts_emit_async_and_background_calls(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.async_("twice"), times=2)
    await bus.emit_async(PAID)
    async with bus:
        bus.emit(PAID)
        bus.emit(PAID)  # nothing left: not queued at all
    assert rec.tags == ["twice", "twice"]
    assert bus.listeners(OrderPaid) == []


async def test_a_lone_times_listener_emitting_itself_stops_at_its_limit(
    store: MemoryFailureStore,
) -> None:
    bus = EventBus(reg, store)
    calls: list[int] = []

    def again(e: OrderPaid) -> None:
        calls.append(e.order_id)
        bus.emit(OrderPaid(order_id=e.order_id + 1, user_id=1))

    bus.on(OrderPaid, again, times=4)
    bus.emit(PAID)
    assert calls == [1, 2, 3, 4]
    assert await store.query() == []  # no recursion error: the limit ended the loop


async def test_once_is_times_one(bus: EventBus, rec: Recorder) -> None:
    bus.once(OrderPaid, rec.sync("o"))
    [sub] = bus.listeners(OrderPaid)
    assert (sub.once, sub.times) == (True, 1)
    with pytest.raises(TypeError, match=r"^once\(\) got an unexpected keyword argument 'times'"):
        bus.once(OrderPaid, rec.sync("p"), times=2)  # type: ignore[call-overload]


# -- subscribed() -----------------------------------------------------------------------------


async def test_subscribed_with_block_removes_the_listener_however_it_ends(
    bus: EventBus, rec: Recorder
) -> None:
    fn = rec.sync("scoped")
    with bus.subscribed(OrderPaid, fn, priority=2) as sub:
        assert sub.priority == 2 and bus.listeners(OrderPaid) == [sub]
        bus.emit(PAID)
    assert bus.listeners(OrderPaid) == []
    with pytest.raises(KeyError), bus.subscribed("order.*", fn, name="scoped-2"):
        bus.emit(PAID)
        raise KeyError("the block failed")
    assert bus.listeners(OrderPaid) == []
    bus.emit(PAID)
    assert rec.tags == ["scoped", "scoped"]


async def test_subscribed_async_with_and_its_rules(bus: EventBus, rec: Recorder) -> None:
    bus.on(OrderPaid, rec.sync("kept"))  # same function, another subscription: stays
    scope = bus.subscribed(OrderPaid, rec.sync("kept"), name="temporary", times=1)
    assert "not entered" in repr(scope)
    async with scope as sub:
        assert sub.name == "temporary"
        await bus.emit_async(PAID)  # uses its one call: removed already
    assert [s.name for s in bus.listeners(OrderPaid)] == ["tests.eventbus.helpers:kept"]
    with pytest.raises(RuntimeError, match=r"was entered already; call bus\.subscribed\(\) again"):
        scope.__enter__()
    with pytest.raises(TypeError, match=r"^subscribed\(\) got an unexpected keyword .*'prio'"):
        bus.subscribed(OrderPaid, rec.sync("x"), prio=1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=r"^subscribed\(\) needs a callable listener, got 3"):
        bus.subscribed(OrderPaid, 3)  # type: ignore[call-overload]


async def test_subscribed_collects_events_while_a_wait_happens(bus: EventBus) -> None:
    got: list[Event] = []
    async with bus:
        with bus.subscribed(OrderShipped, got.append):
            await bus.emit_async(OrderShipped(order_id=5))
        bus.emit(OrderShipped(order_id=6))
    assert got == [OrderShipped(order_id=5)]


# -- max_listeners ----------------------------------------------------------------------------


def adder(i: int) -> None:
    pass


async def test_more_listeners_than_max_listeners_warns_once_naming_the_event(
    rec: Recorder,
) -> None:
    bus = EventBus(reg, max_listeners=3)
    for i in range(3):
        bus.on(OrderPaid, rec.sync(f"l{i}"))
    with pytest.warns(MaxListenersExceededWarning) as caught:
        bus.on(OrderPaid, rec.sync("l3"))
        bus.on(OrderPaid, rec.sync("l4"))  # warned once only
    [w] = caught
    assert w.filename == __file__  # points at the subscribing line
    assert str(w.message).startswith(
        "4 listeners are subscribed to 'order.paid' on one bus (max_listeners=3)"
    )
    assert isinstance(w.message, MaxListenersExceededWarning)
    assert (w.message.pattern, w.message.count, w.message.limit) == ("order.paid", 4, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(3):
            bus.on("order.*", rec.sync(f"w{i}"))  # another pattern: counted apart
        for name in ("l3", "l4"):
            bus.off(OrderPaid, f"tests.eventbus.helpers:{name}")
    with pytest.warns(MaxListenersExceededWarning, match="'order.paid'"):
        bus.on(OrderPaid, rec.sync("l5"))  # under the limit again, then over: warns again


async def test_a_warning_turned_into_an_error_registers_nothing(rec: Recorder) -> None:
    """Regression test: under warnings-as-errors the leak warning was raised after the
    listener was registered, so ``on()`` left it subscribed, and ``subscribed()`` leaked the
    listener it exists to scope (its ``__exit__`` never ran)."""
    bus = EventBus(reg, max_listeners=1)
    bus.on(OrderPaid, rec.sync("kept"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(MaxListenersExceededWarning, match="^2 listeners"):
            bus.on(OrderPaid, rec.sync("refused"))
        with pytest.raises(MaxListenersExceededWarning, match="^2 listeners"):
            with bus.subscribed(OrderPaid, rec.sync("scoped")):
                raise AssertionError("not entered")  # pragma: no cover
        assert [s.name.rsplit(":", 1)[-1] for s in bus.listeners(OrderPaid)] == ["kept"]
    with pytest.warns(MaxListenersExceededWarning, match="^2 listeners"):  # still unwarned
        bus.on(OrderPaid, rec.sync("accepted"))
    bus.emit(PAID)
    assert rec.tags == ["kept", "accepted"]


async def test_max_listeners_zero_is_off_and_bad_values_are_refused(rec: Recorder) -> None:
    bus = EventBus(reg, max_listeners=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(150):
            bus.on(OrderPaid, rec.sync(f"l{i}"))
    assert bus.max_listeners == 0
    bus.max_listeners = 200
    assert bus.max_listeners == 200
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=r"^max_listeners=.* must be an int >= 0"):
            bus.max_listeners = bad  # type: ignore[assignment]
    with pytest.raises(ValueError, match=r"^max_listeners=-1 must be an int >= 0"):
        EventBus(reg, max_listeners=-1)


async def test_the_default_limit_is_one_hundred(rec: Recorder) -> None:
    bus = EventBus(reg)
    assert bus.max_listeners == 100
    for i in range(100):
        bus.on(OrderPaid, rec.sync(f"l{i}"))
    with pytest.warns(MaxListenersExceededWarning, match="^101 listeners"):
        bus.on(OrderPaid, rec.sync("l100"))


async def test_failing_times_listener_counts_its_failed_calls(
    bus: EventBus, store: MemoryFailureStore
) -> None:
    bus.on(OrderPaid, explode, times=2)
    for _ in range(3):
        bus.emit(PAID)
    assert len(await store.query()) == 2
    with anyio.fail_after(5):
        assert await bus.emit_async(PAID) == []
