"""Subscribing: ``on`` / ``off`` / ``once`` / ``listeners``, names, and the dispatch cache."""

from __future__ import annotations

import functools
import gc
import logging
import weakref
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from eventbus import (
    DuplicateListenerError,
    Event,
    EventBus,
    ListenerLookupError,
    UnknownEventError,
)
from eventbus.testing import AsyncRecordingListener
from tests.eventbus.helpers import (
    OrderPaid,
    OrderShipped,
    Recorder,
    UserRegistered,
    count_compiles,
    count_plan_builds,
    explode,
)

PAID = OrderPaid(order_id=1, user_id=7)


def test_on_as_decorator_returns_the_function(bus: EventBus, rec: Recorder) -> None:
    @bus.on(OrderPaid)
    def grant(e: OrderPaid) -> None:
        rec.calls.append(("grant", e))

    bus.emit(PAID)
    assert rec.calls == [("grant", PAID)]
    assert callable(grant) and grant.__name__ == "grant"


def test_on_as_call_returns_the_function(bus: EventBus, rec: Recorder) -> None:
    fn = rec.sync("l")
    assert bus.on("order.paid", fn) is fn
    bus.emit(PAID)
    assert rec.tags == ["l"]


def test_default_name_is_module_colon_qualname(bus: EventBus) -> None:
    bus.on(OrderPaid, explode)
    [sub] = bus.listeners(OrderPaid)
    assert sub.name == "tests.eventbus.helpers:explode"
    assert bus.listener("tests.eventbus.helpers:explode") is sub
    assert (sub.pattern, sub.is_async, sub.once) == ("order.paid", False, False)


def test_subscribing_an_undeclared_name_is_an_error(bus: EventBus) -> None:
    with pytest.raises(UnknownEventError, match="'order.refunded'.*subscribe with a wildcard"):
        bus.on("order.refunded", explode)


def test_non_callable_listener_is_refused(bus: EventBus) -> None:
    with pytest.raises(TypeError, match="must be callable"):
        bus.on(OrderPaid, 42)  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("options", "match"),
    [
        pytest.param({"retries": -1}, "retries=-1", id="negative-retries"),
        pytest.param({"timeout": 0}, "timeout=0", id="zero-timeout"),
        pytest.param({"errors": "ignore"}, "errors='ignore'", id="unknown-policy"),
    ],
)
def test_bad_options_are_refused_and_nothing_registered(
    bus: EventBus, options: dict[str, object], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        bus.on(OrderPaid, explode, **options)  # type: ignore[call-overload]
    assert bus.listeners(OrderPaid) == []


def test_off_by_function(bus: EventBus, rec: Recorder) -> None:
    a, b = rec.sync("a"), rec.sync("b")
    bus.on(OrderPaid, a)
    bus.on(OrderPaid, b)
    bus.off(OrderPaid, a)
    bus.emit(PAID)
    assert rec.tags == ["b"]
    assert bus.listener("tests.eventbus.helpers:a") is None


def test_off_by_name(bus: EventBus, rec: Recorder) -> None:
    bus.on("order.*", rec.sync("a"), name="audit")
    bus.off("order.*", "audit")
    bus.emit(PAID)
    assert rec.tags == []


def test_off_of_a_bound_method(bus: EventBus) -> None:
    """Regression test: ``obj.method`` is a new object at each access, so ``is`` never matched."""

    class Billing:
        def grant(self, e: OrderPaid) -> None:
            raise AssertionError("unsubscribed")

    billing = Billing()
    bus.on(OrderPaid, billing.grant)
    bus.off(OrderPaid, billing.grant)
    bus.emit(PAID)
    assert bus.listeners(OrderPaid) == []


def test_off_of_an_unknown_listener_names_it(bus: EventBus) -> None:
    bus.on(OrderPaid, explode)
    with pytest.raises(ListenerLookupError, match="no listener 'nobody' is subscribed to"):
        bus.off(OrderPaid, "nobody")
    with pytest.raises(ListenerLookupError, match="helpers:explode.*'order.shipped'"):
        bus.off(OrderShipped, explode)  # subscribed, but to another event
    assert len(bus.listeners(OrderPaid)) == 1


def test_once_runs_a_single_time_and_frees_its_name(bus: EventBus, rec: Recorder) -> None:
    fn = rec.sync("first")
    bus.once(OrderPaid)(fn)
    bus.emit(PAID)
    bus.emit(PAID)
    assert rec.tags == ["first"]
    assert bus.listeners(OrderPaid) == []
    bus.on(OrderPaid, fn)  # the name is free again


def test_once_as_call(bus: EventBus, rec: Recorder) -> None:
    """Regression test: ``once`` took no listener argument, unlike ``on``."""
    fn = rec.sync("first")
    assert bus.once(OrderPaid, fn) is fn
    bus.emit(PAID)
    bus.emit(PAID)
    assert rec.tags == ["first"]


def test_on_with_once_true(bus: EventBus, rec: Recorder) -> None:
    bus.on("order.*", rec.sync("w"), once=True)
    bus.emit(PAID)
    bus.emit(OrderShipped(order_id=1))
    assert rec.tags == ["w"]


async def test_once_in_emit_async(bus: EventBus, rec: Recorder) -> None:
    bus.once(OrderPaid, rec.async_("first"))
    [out] = await bus.emit_async(PAID)
    assert out.value == "first"
    assert await bus.emit_async(PAID) == []
    assert rec.tags == ["first"]


class Request:
    """State a listener per request closes over (what must not outlive the request)."""


def listener_of(request: Request, fail: bool = False) -> Callable[[Event], Any]:
    def reply(e: Event) -> None:
        assert request is not None
        if fail:
            raise ValueError("reply failed")

    return reply


def alive_after_gc(ref: weakref.ref[Request]) -> bool:
    gc.collect()
    return ref() is not None


@pytest.mark.parametrize("others", [0, 2], ids=["alone", "among-others"])
@pytest.mark.parametrize("times", [1, 2])
async def test_a_used_up_listener_whose_calls_succeeded_is_not_kept(
    bus: EventBus, others: int, times: int
) -> None:
    """Regression test: the bus kept the latest 1,000 used-up once/times listeners (for
    retries of their failures) even when nothing failed, with all their closures held."""
    for i in range(others):
        bus.on(OrderPaid, lambda e: None, name=f"other{i}")
    request = Request()
    ref = weakref.ref(request)
    bus.on(OrderPaid, listener_of(request), name="reply", times=times)
    del request
    for _ in range(times):
        bus.emit(PAID)
    await bus.emit_async(PAID)  # another plan compiled and run, without it
    assert bus.listener("reply") is None
    assert not alive_after_gc(ref)


async def test_a_used_up_listener_whose_call_failed_is_kept_for_its_retry(
    bus: EventBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest's log capture would keep the failures' tracebacks, and the frames in them
    monkeypatch.setattr(logging.getLogger("eventbus"), "propagate", False)
    monkeypatch.setattr(logging.getLogger("eventbus"), "disabled", True)
    request = Request()
    ref = weakref.ref(request)
    bus.once(OrderPaid, listener_of(request, fail=True), name="reply")
    del request
    bus.emit(PAID)
    assert alive_after_gc(ref)  # its failure can be retried
    async with bus:
        assert (await bus.retry_failures()).failed == 1
        assert alive_after_gc(ref)  # still pending
        await bus.retry_failures(max_attempts=1)  # dead now: nothing left to retry
    assert not alive_after_gc(ref)


@pytest.mark.parametrize("others", [0, 2], ids=["alone", "among-others"])
def test_an_unsubscribed_listener_is_not_kept(bus: EventBus, others: int) -> None:
    """Regression test: the functions of recent plans (kept for a plan that comes back) held
    every listener of those plans, unsubscribed ones too, with their closures."""
    for i in range(others):
        bus.on(OrderPaid, lambda e: None, name=f"other{i}")
    request = Request()
    ref = weakref.ref(request)
    with bus.subscribed(OrderPaid, listener_of(request), name="reply"):
        bus.emit(PAID)
    bus.on(OrderPaid, listener_of(Request()), name="another")
    bus.emit(PAID)
    bus.off(OrderPaid, "another")
    bus.emit(PAID)
    del request
    assert not alive_after_gc(ref)


def test_listeners_in_subscription_order_across_exact_and_wildcards(bus: EventBus) -> None:
    def l1(e: Event) -> None: ...
    def l2(e: Event) -> None: ...
    def l3(e: Event) -> None: ...
    def l4(e: Event) -> None: ...
    def l5(e: Event) -> None: ...

    bus.on("**", l1)
    bus.on(OrderPaid, l2)
    bus.on("order.shipped", l3)
    bus.on("*.paid", l4)
    bus.on("order.*", l5)
    assert [s.fn for s in bus.listeners(OrderPaid)] == [l1, l2, l4, l5]
    assert [s.fn for s in bus.listeners("order.shipped")] == [l1, l3, l5]


def test_listeners_of_an_undeclared_name_is_an_error(bus: EventBus) -> None:
    with pytest.raises(UnknownEventError):
        bus.listeners("nope.x")


def test_duplicate_name_is_refused_and_registers_nothing(bus: EventBus) -> None:
    bus.on(OrderPaid, explode)
    with pytest.raises(DuplicateListenerError, match="'tests.eventbus.helpers:explode'") as info:
        bus.on(OrderShipped, explode)
    assert isinstance(info.value, ValueError)
    assert bus.listeners(OrderShipped) == []
    assert bus.statistics().listeners == 1


def test_explicit_duplicate_name_is_refused_for_different_functions(bus: EventBus) -> None:
    bus.on(OrderPaid, lambda e: None, name="audit")
    with pytest.raises(DuplicateListenerError, match="'audit'"):
        bus.on("order.*", lambda e: None, name="audit")
    assert [s.name for s in bus.listeners(OrderPaid)] == ["audit"]


def test_name_allows_a_second_subscription_of_the_same_function(
    bus: EventBus, rec: Recorder
) -> None:
    fn = rec.sync("l")
    bus.on(OrderPaid, fn)
    bus.on(OrderPaid, fn, name="again")
    bus.emit(PAID)
    assert rec.tags == ["l", "l"]
    bus.off(OrderPaid, "again")
    bus.emit(PAID)
    assert rec.tags == ["l", "l", "l"]


def test_bound_methods_of_two_instances_need_names(bus: EventBus) -> None:
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def bump(self, e: OrderPaid) -> None:
            self.n += 1

    a, b = Counter(), Counter()
    bus.on(OrderPaid, a.bump)
    with pytest.raises(DuplicateListenerError):
        bus.on(OrderPaid, b.bump)
    bus.on(OrderPaid, b.bump, name="b.bump")
    bus.emit(PAID)
    assert (a.n, b.n) == (1, 1)


def test_dispatch_cache_sees_subscribe_and_unsubscribe(bus: EventBus, rec: Recorder) -> None:
    a, b = rec.sync("a"), rec.sync("b")
    bus.on(OrderPaid, a)
    bus.emit(PAID)  # builds and caches the plan
    bus.on("order.*", b)
    bus.emit(PAID)
    bus.off(OrderPaid, a)
    bus.emit(PAID)
    bus.off("order.*", b)
    bus.emit(PAID)
    assert rec.tags == ["a", "a", "b", "b"]


def test_a_subscription_change_rebuilds_only_the_event_types_it_matches(
    bus: EventBus, rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression test: any on() or off() dropped the compiled dispatch of every event type,
    so a subscription per request (``wait_for``, ``subscribed()``) recompiled them all."""
    builds = count_plan_builds(bus)
    compiled = count_compiles(monkeypatch)
    events = [PAID, OrderShipped(order_id=1), UserRegistered(user_id=1)]
    for tag in ("paid1", "paid2"):
        bus.on(OrderPaid, rec.sync(tag))
    for tag in ("shipped1", "shipped2"):
        bus.on(OrderShipped, rec.sync(tag))
    bus.on(UserRegistered, rec.sync("registered"))  # a lone listener: nothing compiled

    def emit_all() -> None:
        for e in events:
            bus.emit(e)

    emit_all()
    assert (builds, len(compiled)) == ([OrderPaid, OrderShipped, UserRegistered], 2)
    builds.clear()
    for _ in range(3):  # a subscription per request
        bus.on(OrderShipped, rec.sync("request"), name="request")
        emit_all()
        bus.off(OrderShipped, "request")
        emit_all()
    assert builds == [OrderShipped] * 6
    assert len(compiled) == 3  # with "request", once; without it, the code of the start
    builds.clear()
    bus.on("order.*", rec.sync("wild"))
    emit_all()
    assert builds == [OrderPaid, OrderShipped]
    rec.calls.clear()
    emit_all()
    assert rec.tags == ["paid1", "paid2", "wild", "shipped1", "shipped2", "wild", "registered"]


def test_a_plan_that_comes_back_gets_its_dispatch_function_back(
    bus: EventBus, rec: Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscription per request: after off(), the function of before on() is reused (it
    was compiled again from the same source, a new function, at each request)."""
    compiled = count_compiles(monkeypatch)
    bus.on(OrderPaid, rec.sync("a"))
    bus.on(OrderPaid, rec.sync("b"))
    bus.emit(PAID)
    before = bus._dispatch[OrderPaid][0]
    for _ in range(3):
        with bus.subscribed(OrderPaid, rec.sync("request"), name="request"):
            bus.emit(PAID)
        bus.emit(PAID)
        assert bus._dispatch[OrderPaid][0] is before
    assert len(compiled) == 2
    assert rec.tags == ["a", "b"] + ["a", "b", "request", "a", "b"] * 3
    bus.errors = "propagate"  # compiled with the bus's policy: compiled again
    bus.emit(PAID)
    assert bus._dispatch[OrderPaid][0] is not before


async def test_dispatch_cache_is_shared_by_emit_and_emit_async(
    bus: EventBus, rec: Recorder
) -> None:
    """Each subscription change builds one plan, which both emits then reuse (counted)."""
    builds = count_plan_builds(bus)
    bus.on(OrderPaid, rec.sync("a"))
    await bus.emit_async(PAID)
    bus.emit(PAID)
    await bus.emit_async(PAID)
    assert len(builds) == 1
    bus.on(OrderPaid, rec.sync("b"))
    await bus.emit_async(PAID)
    bus.emit(PAID)
    assert len(builds) == 2
    bus.off(OrderPaid, "tests.eventbus.helpers:a")
    bus.emit(PAID)
    await bus.emit_async(PAID)
    assert len(builds) == 3
    assert rec.tags == ["a"] * 3 + ["a", "b"] * 2 + ["b"] * 2


def test_sync_listener_with_timeout_is_refused_at_subscription(bus: EventBus) -> None:
    with pytest.raises(ValueError, match="timeout= applies to async listeners only"):
        bus.on(OrderPaid, explode, timeout=1)
    assert bus.listeners(OrderPaid) == []


def test_statistics_and_repr(bus: EventBus) -> None:
    bus.on(OrderPaid, explode)
    stats = bus.statistics()
    assert (stats.listeners, stats.running, stats.queued, stats.dropped, stats.failures) == (
        1,
        False,
        0,
        0,
        0,
    )
    assert "listeners=1" in repr(bus) and "errors='capture'" in repr(bus)


async def test_once_listener_run_by_a_nested_emit_is_not_reported_twice(
    bus: EventBus, rec: Recorder
) -> None:
    """A once-listener consumed by a nested emit is not in the outer emit's outcomes."""

    def relay(e: Event) -> str:
        rec.calls.append(("relay", e))
        bus.emit(PAID)
        return "relay"

    bus.once(OrderPaid, relay)
    bus.once(OrderPaid, rec.sync("second"))
    outcomes = await bus.emit_async(PAID)
    assert [o.value for o in outcomes] == ["relay"]
    assert rec.tags == ["relay", "second"]


# -- what a subscription is: async behind a wrapper, cached plans, once() options ----------


def logged(fn: Callable[[Event], Any]) -> Callable[[Event], Any]:
    @functools.wraps(fn)
    def wrapper(e: Event) -> Any:
        return fn(e)

    return wrapper


async def test_async_listener_behind_functools_wraps_runs_as_async(bus: EventBus) -> None:
    """Regression test: it was classified as sync, so its coroutine was never awaited."""
    ran: list[Event] = []

    @logged
    async def grant(e: Event) -> str:
        ran.append(e)
        return "granted"

    bus.on(OrderPaid, grant)
    assert bus.listeners(OrderPaid)[0].is_async
    with anyio.fail_after(3):
        [out] = await bus.emit_async(PAID)
    assert (ran, out.value, out.ok) == ([PAID], "granted", True)


class AsyncCallable:
    async def __call__(self, e: Event) -> str:
        await anyio.lowlevel.checkpoint()
        return "called"


class InheritsAsyncCall(AsyncCallable):
    """Its async ``__call__`` comes from the base class."""


class MyRecorder(AsyncRecordingListener):
    """A subclass of the testing helper: its ``__call__`` is inherited too."""


async def test_an_inherited_async_call_makes_an_async_listener(bus: EventBus) -> None:
    """Regression test: only a ``__call__`` defined on the instance's own class was seen, so
    these ran as sync listeners whose coroutine was closed and recorded as a TypeError."""
    recorder = MyRecorder()
    bus.on(OrderPaid, InheritsAsyncCall(), name="inherits")
    bus.on(OrderPaid, recorder, name="recorder")
    assert [s.is_async for s in bus.listeners(OrderPaid)] == [True, True]
    async with bus:
        bus.emit(PAID)
        with anyio.fail_after(3):
            await recorder.wait_for(1)
        outs = await bus.emit_async(PAID)
    assert [o.value for o in outs] == ["called", None]
    assert recorder.events == [PAID, PAID]
    assert await bus.failures.query() == []


async def test_emit_async_reuses_the_plan_cached_by_emit(bus: EventBus, rec: Recorder) -> None:
    """Regression test: a cached fast plan made emit_async rebuild the plan on every call."""
    builds = count_plan_builds(bus)
    bus.on(OrderPaid, rec.sync("a"))
    bus.emit(PAID)
    for _ in range(3):
        await bus.emit_async(PAID)
    assert builds == [OrderPaid]
    assert rec.tags == ["a"] * 4


def test_once_options_are_keyword_checked(bus: EventBus, rec: Recorder) -> None:
    """Regression test: once(**options) accepted any keyword for the type checker.

    mypy (``warn_unused_ignores``) fails this file if the ignore below stops being needed.
    """
    bus.once(OrderPaid, rec.sync("a"), name="only-once", retries=1)
    with pytest.raises(TypeError):
        bus.once(OrderPaid, rec.sync("b"), retry=1)  # type: ignore[call-overload]
    bus.emit(PAID)
    bus.emit(PAID)
    assert rec.tags == ["a"]
