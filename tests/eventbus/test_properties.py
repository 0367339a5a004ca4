"""Property: every matching listener runs once per emit, and every failure is recorded once."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st

from eventbus import Event, EventBus, MemoryFailureStore, matches
from tests.eventbus.helpers import OrderPaid, OrderShipped, UserRegistered, reg

PATTERNS = ["order.paid", "order.shipped", "order.*", "*.paid", "**", "user.*", "a.**.b", "*"]


@dataclass(frozen=True)
class Spec:
    pattern: str
    is_async: bool
    fails: bool


specs = st.builds(Spec, st.sampled_from(PATTERNS), st.booleans(), st.booleans())
events = st.sampled_from(["order.paid", "order.shipped", "user.registered"])


def make(name: str, n: int) -> Event:
    if name == "order.paid":
        return OrderPaid(order_id=n, user_id=0)
    if name == "order.shipped":
        return OrderShipped(order_id=n)
    return UserRegistered(user_id=n)


def number(e: Event) -> int:
    return e.user_id if isinstance(e, UserRegistered) else e.order_id  # type: ignore[attr-defined]


def emission_number(payload: str) -> int:
    data = json.loads(payload)
    n: int = data["user_id"] if "order_id" not in data else data["order_id"]
    return n


def subscribe(bus: EventBus, spec: Spec, tag: str, runs: Counter[tuple[str, int]]) -> None:
    if spec.is_async:

        async def a(e: Event) -> None:
            await anyio.lowlevel.checkpoint()
            runs[tag, number(e)] += 1
            if spec.fails:
                raise ValueError(tag)

        bus.on(spec.pattern, a, name=tag)
    else:

        def s(e: Event) -> None:
            runs[tag, number(e)] += 1
            if spec.fails:
                raise ValueError(tag)

        bus.on(spec.pattern, s, name=tag)


@settings(max_examples=50, deadline=None)
@given(
    listeners=st.lists(specs, max_size=8),
    emitted=st.lists(events, min_size=1, max_size=4),
    background=st.booleans(),
)
async def test_each_matching_listener_runs_once_and_each_failure_is_recorded_once(
    listeners: list[Spec], emitted: list[str], background: bool
) -> None:
    store = MemoryFailureStore()
    bus = EventBus(reg, store)
    runs: Counter[tuple[str, int]] = Counter()
    for i, spec in enumerate(listeners):
        subscribe(bus, spec, f"l{i}", runs)

    with anyio.fail_after(10):
        if background:
            async with bus:
                for n, name in enumerate(emitted):
                    bus.emit(make(name, n))
        else:
            for n, name in enumerate(emitted):
                outcomes = await bus.emit_async(make(name, n))
                expected = [f"l{i}" for i, s in enumerate(listeners) if matches(s.pattern, name)]
                assert [o.listener for o in outcomes] == expected

    expected_runs = Counter(
        {
            (f"l{i}", n): 1
            for n, name in enumerate(emitted)
            for i, spec in enumerate(listeners)
            if matches(spec.pattern, name)
        }
    )
    assert runs == expected_runs
    expected_failures = sorted(
        (f"l{i}", n, name)
        for n, name in enumerate(emitted)
        for i, spec in enumerate(listeners)
        if spec.fails and matches(spec.pattern, name)
    )
    records = await store.query(limit=None)
    recorded = sorted((r.listener, emission_number(r.payload), r.event_name) for r in records)
    assert recorded == expected_failures
    assert all(r.error_type == "ValueError" and r.attempts == 1 for r in records)
    assert bus.statistics().failures == len(expected_failures)
