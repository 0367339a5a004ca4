"""Model-based: random subscribe / unsubscribe / emit sequences against a plain model of the
bus, with priorities, wildcards, ``times=`` and listeners that subscribe, unsubscribe and emit
while they run (re-entrancy), under ``emit()`` and sequential ``emit_async()``.

The model matches names with a regular expression of its own (not the bus's ``matches()``),
orders by priority then subscription order, takes a ``times=`` call when an emit reaches the
listener, and runs the listeners of the plan an emit started with (a snapshot). Adopted from
the core review's fuzzers; subscription changes drop only the plans they reach, and a plan
that comes back reuses its function: both are exercised on every sequence.
"""

from __future__ import annotations

import re
import types
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventbus import Event, EventBus, EventRegistry, matches

reg = EventRegistry()
NAMES = ["a", "a.b", "a.b.c", "b.c", "a.c"]
TYPES: dict[str, type[Event]] = {
    n: types.new_class(n.replace(".", "_"), (Event,), {"name": n, "registry": reg}) for n in NAMES
}
PATTERNS = [*NAMES, "*", "a.*", "**", "a.**", "**.c", "*.c", "a.**.c", "*.*"]
MAX_NESTING = 3

Action = tuple[str, Any] | None  # ("emit", name), ("sub", index), ("off", index), or nothing
Spec = tuple[str, int, int | None, Action]  # pattern, priority, times, action when called
Step = tuple[str, Any]  # ("sub", Spec), ("off", index), ("emit", name)
Log = list[tuple[int, str, int]]  # (listener index, event name, nesting depth)


def reference_match(pattern: str, name: str) -> bool:
    """``*`` is one segment, ``**`` any number of segments (zero included)."""
    parts = [{"*": "[^.]+", "**": "@@"}.get(seg, re.escape(seg)) for seg in pattern.split(".")]
    rx = r"\.".join(parts)
    rx = rx.replace(r"\.@@", r"(\.[^.]+)*").replace(r"@@\.", r"([^.]+\.)*")
    rx = rx.replace("@@", r"[^.]*(\.[^.]+)*")
    return re.fullmatch(rx, name) is not None


action: st.SearchStrategy[Action] = st.one_of(
    st.none(),
    st.tuples(st.just("emit"), st.sampled_from(NAMES)),
    st.tuples(st.just("sub"), st.integers(0, 30)),
    st.tuples(st.just("off"), st.integers(0, 30)),
)
spec: st.SearchStrategy[Spec] = st.tuples(
    st.sampled_from(PATTERNS), st.integers(-2, 2), st.one_of(st.none(), st.integers(1, 3)), action
)
step: st.SearchStrategy[Step] = st.one_of(
    st.tuples(st.just("sub"), spec),
    st.tuples(st.just("off"), st.integers(0, 30)),
    st.tuples(st.just("emit"), st.sampled_from(NAMES)),
)
steps = st.lists(step, max_size=25)


@given(st.sampled_from(PATTERNS), st.sampled_from(NAMES))
def test_matches_agrees_with_a_regular_expression(pattern: str, name: str) -> None:
    assert matches(pattern, name) == reference_match(pattern, name)


class Model:
    """What the bus should do: subscriptions as ``[index, pattern, priority, left, seq]``."""

    def __init__(self) -> None:
        self.specs: list[Spec] = []
        self.subs: list[list[Any]] = []
        self.seq = 0
        self.log: Log = []
        self.depth = 0

    def run(self, steps: list[Step]) -> None:
        for kind, arg in steps:
            if kind == "sub":
                self.specs.append(arg)
                self.sub(len(self.specs) - 1)
            elif kind == "off":
                if self.specs:
                    self.off(arg % len(self.specs))
            else:
                self.emit(arg)

    def sub(self, idx: int) -> None:
        if any(s[0] == idx for s in self.subs):
            return
        pattern, priority, times, _ = self.specs[idx]
        self.subs.append([idx, pattern, priority, times, self.seq])
        self.seq += 1

    def off(self, idx: int) -> None:
        self.subs = [s for s in self.subs if s[0] != idx]

    def emit(self, name: str) -> None:
        self.depth += 1
        matching = [s for s in self.subs if reference_match(s[1], name)]
        for s in sorted(matching, key=lambda s: (-s[2], s[4])):
            if s[3] is not None:
                if s[3] == 0:  # a nested emit took its last call
                    continue
                s[3] -= 1
                if s[3] == 0:
                    self.off(s[0])
            self.log.append((s[0], name, self.depth))
            act = self.specs[s[0]][3]
            if act is None:
                continue
            if act[0] == "emit":
                if self.depth < MAX_NESTING:
                    self.emit(act[1])
            elif act[0] == "sub":
                self.sub(act[1] % len(self.specs))
            else:
                self.off(act[1] % len(self.specs))
        self.depth -= 1


class Driver:
    """The same steps on a real bus; *emit* is how a step (or a listener) emits."""

    def __init__(self) -> None:
        self.bus = EventBus(reg, max_listeners=0)
        self.specs: list[Spec] = []
        self.log: Log = []
        self.depth = 0

    def sub(self, idx: int, fn: Callable[[Event], Any]) -> None:
        if self.bus.listener(f"l{idx}") is not None:
            return
        pattern, priority, times, _ = self.specs[idx]
        self.bus.on(pattern, fn, name=f"l{idx}", priority=priority, times=times)

    def off(self, idx: int) -> None:
        if self.bus.listener(f"l{idx}") is not None:
            self.bus.off(self.specs[idx][0], f"l{idx}")

    def subscribed(self) -> list[str]:
        return sorted(s.name for s in self.bus._table)


def run_sync(steps: list[Step]) -> Driver:
    d = Driver()

    def make(idx: int) -> Callable[[Event], None]:
        act = d.specs[idx][3]

        def listener(e: Event) -> None:
            d.log.append((idx, e.__event_name__, d.depth))
            if act is None:
                return
            if act[0] == "emit":
                if d.depth < MAX_NESTING:
                    emit(act[1])
            elif act[0] == "sub":
                i = act[1] % len(d.specs)
                d.sub(i, make(i))
            else:
                d.off(act[1] % len(d.specs))

        return listener

    def emit(name: str) -> None:
        d.depth += 1
        try:
            d.bus.emit(TYPES[name]())
        finally:
            d.depth -= 1

    for kind, arg in steps:
        if kind == "sub":
            d.specs.append(arg)
            d.sub(len(d.specs) - 1, make(len(d.specs) - 1))
        elif kind == "off":
            if d.specs:
                d.off(arg % len(d.specs))
        else:
            emit(arg)
    return d


async def run_async(steps: list[Step]) -> Driver:
    d = Driver()

    def make(idx: int) -> Callable[[Event], Awaitable[None]]:
        act = d.specs[idx][3]

        async def listener(e: Event) -> None:
            d.log.append((idx, e.__event_name__, d.depth))
            if act is None:
                return
            if act[0] == "emit":
                if d.depth < MAX_NESTING:
                    await emit(act[1])
            elif act[0] == "sub":
                i = act[1] % len(d.specs)
                d.sub(i, make(i))
            else:
                d.off(act[1] % len(d.specs))

        return listener

    async def emit(name: str) -> None:
        d.depth += 1
        try:
            for outcome in await d.bus.emit_async(TYPES[name](), concurrent=False):
                assert outcome.ok, outcome.error
        finally:
            d.depth -= 1

    for kind, arg in steps:
        if kind == "sub":
            d.specs.append(arg)
            d.sub(len(d.specs) - 1, make(len(d.specs) - 1))
        elif kind == "off":
            if d.specs:
                d.off(arg % len(d.specs))
        else:
            await emit(arg)
    return d


def model_of(steps: list[Step]) -> Model:
    m = Model()
    m.run(steps)
    return m


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps)
def test_emit_matches_the_model(steps: list[Step]) -> None:
    real, model = run_sync(steps), model_of(steps)
    assert real.log == model.log
    assert real.subscribed() == sorted(f"l{s[0]}" for s in model.subs)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps)
def test_sequential_emit_async_matches_the_model(steps: list[Step]) -> None:
    real, model = anyio.run(run_async, steps), model_of(steps)
    assert real.log == model.log
    assert real.subscribed() == sorted(f"l{s[0]}" for s in model.subs)
