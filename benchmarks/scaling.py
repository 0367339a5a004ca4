"""Does the cost of an emit grow with what is registered, and what does a failure cost?

Question: dispatch plans are cached per event type, so one emit should cost the same with 10 or
10,000 other names or wildcard patterns registered (the cache is rebuilt on the first emit after
a subscribe or an unsubscribe: that one is measured too). Capturing a failure builds a record
(ids, timestamp, JSON payload, the traceback taken but not yet rendered) only when a listener
raised; what does that cost the publisher with the memory store, and with the SQL store
(SQLite file, batched writer, flush included)? The bus logs a failure at ERROR, a few lines per
listener and error type a minute, then counts the rest: repeated failures (a storm) mostly
skip the log line; the "every failure logged" row lifts that limit (through a private
attribute) to show what the line itself costs. The log goes to a NullHandler.

Every sample checks its work: listener calls counted, failures recorded, rows written.

Run: ``.venv/bin/python benchmarks/scaling.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from collections.abc import Callable
from pathlib import Path

from _events import Ping, declare_others, registry
from _harness import (
    AsyncLoop,
    Options,
    Row,
    SyncLoop,
    Table,
    Work,
    counted,
    environment,
    finish,
    parse_options,
    print_environment,
    run_async_cases,
    run_sync_cases,
)

from eventbus import Event, EventBus
from eventbus.backends.memory import MemoryFailureStore

SIZES = (10, 100, 1_000, 10_000)
FAILURE_BATCH = 500  # emits between two flushes of the SQL store
DIRECT = "direct call (baseline)"
FAILURE_TARGET_NS = 15_000  # one captured failure, publisher side (issue 12)
TARGETS = {1_000: 2.5}  # the ratio the "1,000 other names / patterns" rows must meet


class SvcDone(Event, name="svc5.done", registry=registry):
    n: int


def noop(event: object) -> None:
    """The listener of every name and pattern an emit does not reach."""
    return None


[target], target_calls = counted(1)  # the listener every measured emit reaches


def explode(event: object) -> None:
    raise ValueError("boom")


def _emit_loop(bus: EventBus, ev: Event) -> SyncLoop:
    def loop(n: int) -> None:
        for _ in range(n):
            bus.emit(ev)

    return loop


def _direct_loop(fn: Callable[[object], None], ev: Event) -> SyncLoop:
    def loop(n: int) -> None:
        for _ in range(n):
            fn(ev)

    return loop


def exact_bus(others: list[type[Event]], size: int) -> EventBus:
    """The emitted name has one listener; *size* other names have one each."""
    bus = EventBus(registry=registry)
    for i, cls in enumerate(others[:size]):
        bus.on(cls, noop, name=f"other{i}")
    bus.on(Ping, target, name="target")
    return bus


def pattern_bus(size: int) -> EventBus:
    """*size* patterns ``svc{i}.*`` are registered; the emitted ``svc5.done`` matches one."""
    bus = EventBus(registry=registry)
    for i in range(size):
        bus.on(f"svc{i}.*", target if i == 5 else noop, name=f"pattern{i}")
    return bus


def registered(options: Options, others: list[type[Event]]) -> Table:
    """One emit as registered exact names and wildcard patterns grow."""
    cases: dict[str, SyncLoop] = {DIRECT: _direct_loop(target, Ping(n=1))}
    goals: dict[str, float | None] = {DIRECT: None}
    for size in SIZES:
        label = f"{size:>6,} other exact names"
        cases[label] = _emit_loop(exact_bus(others, size), Ping(n=1))
        goals[label] = TARGETS.get(size)
    for size in SIZES:
        label = f"{size:>6,} wildcard patterns"
        cases[label] = _emit_loop(pattern_bus(size), SvcDone(n=1))
        goals[label] = 2.5 if size == 100 else None
    for loop in cases.values():
        loop(1)
    stats = run_sync_cases(cases, options, work=dict.fromkeys(cases, Work(target_calls, 1)))
    table = Table("One emit, 1 matching listener, as registrations grow", ratio_header="x direct")
    for label, s in stats.items():
        first = f"{SIZES[0]:>6,}" + label[6:]
        note = "" if label == DIRECT else f"{s.median / stats[first].median:.2f}x the 10 row"
        table.add(Row(label, s, None if label == DIRECT else DIRECT, note, target=goals[label]))
    return table


def rebuild(options: Options, others: list[type[Event]]) -> Table:
    """The first emit after a subscribe: the plan is rebuilt by scanning every subscription."""
    cases: dict[str, SyncLoop] = {}
    ev = Ping(n=1)
    for size in SIZES:
        bus = exact_bus(others, size)

        def loop(n: int, bus: EventBus = bus) -> None:
            for _ in range(n):
                bus.on(Ping, noop, name="extra")
                bus.off(Ping, "extra")
                bus.emit(ev)

        cases[f"{size:>6,} other exact names"] = loop
    stats = run_sync_cases(cases, options, work=dict.fromkeys(cases, Work(target_calls, 1)))
    table = Table("on() + off() + first emit (plan rebuilt), as registrations grow")
    for label, s in stats.items():
        table.add(Row(label, s))
    return table


def _sql_store_class() -> type | None:
    try:
        from eventbus.backends.sql import SqlFailureStore
    except ImportError:
        return None
    return SqlFailureStore


async def failures(options: Options) -> Table:
    """An emit whose only listener raises, against one whose listener returns."""
    ev = Ping(n=1)
    happy = EventBus(registry=registry)
    happy.on(Ping, target, name="ok")
    memory = EventBus(registry=registry, failures=MemoryFailureStore(max_records=10_000))
    memory.on(Ping, explode, name="explode")
    logged = EventBus(registry=registry, failures=MemoryFailureStore(max_records=10_000))
    logged.on(Ping, explode, name="explode")
    logged._sink.limiter.burst = 1 << 62  # private: lift the rate limit of the log line
    storm = "emit, listener raises, memory store"
    every = "emit, listener raises, memory store, every failure logged"
    sync_loops = {
        DIRECT: _direct_loop(target, ev),
        "emit, listener returns": _emit_loop(happy, ev),
        storm: _emit_loop(memory, ev),
        every: _emit_loop(logged, ev),
    }
    work = {
        DIRECT: Work(target_calls, 1),
        "emit, listener returns": Work(target_calls, 1),
        storm: Work(lambda: memory.statistics().failures, 1),
        every: Work(lambda: logged.statistics().failures, 1),
    }

    async def as_async(loop: SyncLoop, n: int) -> None:
        loop(n)

    def lift(loop: SyncLoop) -> AsyncLoop:
        return lambda n: as_async(loop, n)

    cases = {label: lift(loop) for label, loop in sync_loops.items()}
    sql_label = "emit, listener raises, SQL store (SQLite), flush included"
    store_cls = _sql_store_class()
    with tempfile.TemporaryDirectory() as tmp:
        if store_cls is None:
            stats = await run_async_cases(cases, options, work=work)
        else:
            store = store_cls(f"sqlite+aiosqlite:///{Path(tmp) / 'failures.db'}")
            sql_bus = EventBus(registry=registry, failures=store)
            sql_bus.on(Ping, explode, name="explode")

            async def sql_loop(n: int) -> None:
                left = n
                while left:
                    batch = min(left, FAILURE_BATCH)
                    for _ in range(batch):
                        sql_bus.emit(ev)
                    await store.flush()
                    left -= batch

            cases[sql_label] = sql_loop
            work[sql_label] = Work(lambda: store.statistics().written, 1)
            async with sql_bus:
                await sql_loop(1)
                stats = await run_async_cases(cases, options, {sql_label: FAILURE_BATCH}, work=work)
    table = Table("Failure capture: one emit, one listener", ratio_header="x direct")
    for label, s in stats.items():
        note = ""
        if label in (storm, every):
            share = s.median / FAILURE_TARGET_NS
            verdict = "met" if share <= 1 else "MISSED"
            note = f"target <= {FAILURE_TARGET_NS / 1000:.0f} µs: {verdict} ({share:.2f}x of it)"
        table.add(Row(label, s, None if label == DIRECT else DIRECT, note))
    if store_cls is None:
        table.add(Row(sql_label, None, note="n/a (not available)"))
    return table


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    # Failures are logged at ERROR with the traceback: keep the record, drop the output.
    log = logging.getLogger("eventbus")
    log.addHandler(logging.NullHandler())
    log.propagate = False
    others = declare_others(max(SIZES))
    tables = [registered(options, others)]
    print(tables[-1].render(), end="\n\n", flush=True)
    tables.append(rebuild(options, others))
    print(tables[-1].render(), end="\n\n", flush=True)
    tables.append(asyncio.run(failures(options)))
    print(tables[-1].render(), end="\n\n", flush=True)
    finish("scaling", tables, options, env)


if __name__ == "__main__":
    main()
