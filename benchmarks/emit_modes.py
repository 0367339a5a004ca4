"""Sync vs async emit: what each mode costs, and when the publisher gets control back.

Question: how much does ``emit()`` / ``await emit_async()`` cost per event compared with calling
the listeners yourself, and how long does a slow listener hold up the publisher in each mode?
The second table is the performance page's publisher latency table (docs/performance.md).

Listeners count their calls (a closure increment, in the baseline's loops too), and every
sample checks the count. Rows with a target (issue 12) say whether they meet it. The "floor"
row is the least any dispatcher can do in Python: a dict lookup and one call in a ``try``.

Run: ``.venv/bin/python benchmarks/emit_modes.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import anyio
from _harness import (
    AsyncLoop,
    Options,
    Row,
    Stats,
    SyncLoop,
    Table,
    Work,
    counted,
    counted_async,
    environment,
    finish,
    parse_options,
    print_environment,
    run_async_cases,
    run_sync_cases,
)

from eventbus import Event, EventBus, EventRegistry, validate_events

SLOW_SECONDS = 0.020  # the slow listener of the latency table
LATENCY_REPEATS = 7
QUICK_LATENCY_REPEATS = 3
BATCH = 100  # emits per wait in the "emit + 10 async listeners" case

registry = EventRegistry()


class Ping(Event, name="bench.ping", registry=registry):
    n: int


EVENT = Ping(n=1)


def _bus(listeners: list[Callable[[Ping], object]], **options: int | bool) -> EventBus:
    bus = EventBus(registry=registry, **options)  # type: ignore[arg-type]
    for i, fn in enumerate(listeners):
        bus.on(Ping, fn, name=f"listener{i}")
    return bus


# -- (a) throughput ------------------------------------------------------------------------------


Case = tuple[SyncLoop, str | None, Work, float | None]  # loop, baseline, work, target ratio


def sync_cases() -> dict[str, Case]:
    """``emit`` with 1 and 10 sync listeners, against calling them directly; and with 10
    listeners on a bus that counts their calls (``count_calls=True``)."""
    [one], ones = counted(1)
    ten_list, tens = counted(10)
    ten = tuple(ten_list)
    bus1 = _bus([one])
    bus10 = _bus(list(ten))
    bus10_counting = _bus(list(ten), count_calls=True)
    table: dict[type, Callable[[object], None]] = {Ping: one}

    def direct_1(n: int) -> None:
        fn, ev = one, EVENT
        for _ in range(n):
            fn(ev)

    def floor_emit(event: Ping) -> None:
        try:
            table[type(event)](event)
        except Exception:
            pass

    def floor_1(n: int) -> None:
        emit, ev = floor_emit, EVENT
        for _ in range(n):
            emit(ev)

    def direct_10(n: int) -> None:
        fns, ev = ten, EVENT
        for _ in range(n):
            for fn in fns:
                fn(ev)

    def emit_1(n: int) -> None:
        bus, ev = bus1, EVENT
        for _ in range(n):
            bus.emit(ev)

    def emit_10(n: int) -> None:
        bus, ev = bus10, EVENT
        for _ in range(n):
            bus.emit(ev)

    def emit_10_counting(n: int) -> None:
        bus, ev = bus10_counting, EVENT
        for _ in range(n):
            bus.emit(ev)

    def counted_calls() -> int:
        return sum(s.calls for s in bus10_counting.listener_statistics())

    def direct_built_1(n: int) -> None:
        fn, make = one, Ping
        for i in range(n):
            fn(make(n=i))

    def emit_built_1(n: int) -> None:
        bus, make = bus1, Ping
        for i in range(n):
            bus.emit(make(n=i))

    def emit_built_1_validated(n: int) -> None:
        previous = validate_events(True)
        try:
            emit_built_1(n)
        finally:
            validate_events(previous)

    one_call, ten_calls = Work(ones, 1), Work(tens, 10)
    base_1, base_10 = "direct call, 1 sync listener", "direct loop, 10 sync listeners"
    base_built = "direct call, 1 sync listener, event built per call"
    return {
        base_1: (direct_1, None, one_call, None),
        "floor: dict lookup + call in a try": (floor_1, base_1, one_call, None),
        "emit, 1 sync listener": (emit_1, base_1, one_call, 2.5),
        base_10: (direct_10, None, ten_calls, None),
        "emit, 10 sync listeners": (emit_10, base_10, ten_calls, 1.05),
        "emit, 10 sync listeners, calls counted": (
            emit_10_counting,
            base_10,
            Work(counted_calls, 10),
            None,
        ),
        # what typed-instance validation costs: on in tests and -X dev only (issue 22)
        base_built: (direct_built_1, None, one_call, None),
        "emit, 1 sync listener, event built per emit": (emit_built_1, base_built, one_call, None),
        "the same, fields validated (tests, -X dev)": (
            emit_built_1_validated,
            base_built,
            one_call,
            None,
        ),
    }


async def async_throughput(options: Options) -> Table:
    """``emit`` and ``emit_async`` with 10 listeners, against ``asyncio.gather`` / a direct loop;
    and ``emit`` with 1 sync listener on a running bus (the thread is checked), in a task."""
    [one], ones = counted(1)
    bus_running = _bus([one])
    afns_list, async_calls = counted_async(10)
    afns = tuple(afns_list)
    sfns_list, sync_calls = counted(10)
    sfns = tuple(sfns_list)
    done = 0
    finished = asyncio.Event()
    target = 0

    def make_counting() -> Callable[[Ping], Awaitable[None]]:
        async def listener(event: Ping) -> None:
            nonlocal done
            done += 1
            if done == target:
                finished.set()

        return listener

    background = 0  # calls the "until all done" case saw finish

    def background_calls() -> int:
        return background

    counting = [make_counting() for _ in range(10)]
    bus_emit = _bus(list(counting), queue_size=BATCH * 10)
    bus_async = _bus(list(afns))
    bus_sync = _bus(list(sfns))

    async def direct_1(n: int) -> None:
        fn, ev = one, EVENT
        for _ in range(n):
            fn(ev)

    async def emit_1_running(n: int) -> None:
        bus, ev = bus_running, EVENT
        for _ in range(n):
            bus.emit(ev)

    async def gather_10(n: int) -> None:
        fns, ev = afns, EVENT
        for _ in range(n):
            await asyncio.gather(*[fn(ev) for fn in fns])

    async def direct_sync_10(n: int) -> None:
        fns, ev = sfns, EVENT
        for _ in range(n):
            for fn in fns:
                fn(ev)
            await asyncio.sleep(0)  # emit_async checkpoints once; so does this

    async def emit_async_10(n: int) -> None:
        bus, ev = bus_async, EVENT
        for _ in range(n):
            await bus.emit_async(ev)

    async def emit_async_sync_10(n: int) -> None:
        bus, ev = bus_sync, EVENT
        for _ in range(n):
            await bus.emit_async(ev)

    async def emit_10_until_done(n: int) -> None:
        nonlocal done, target, background
        bus, ev = bus_emit, EVENT
        left = n
        while left:
            batch = min(left, BATCH)
            done, target = 0, batch * 10
            finished.clear()
            for _ in range(batch):
                bus.emit(ev)
            await finished.wait()
            background += done
            left -= batch

    gather = "asyncio.gather, 10 async listeners"
    loop = "direct loop + sleep(0), 10 sync listeners"
    direct = "direct call, 1 sync listener, in a task"
    cases: dict[str, tuple[AsyncLoop, str | None, Work, float | None]] = {
        direct: (direct_1, None, Work(ones, 1), None),
        "emit, 1 sync listener, bus running (thread checked)": (
            emit_1_running,
            direct,
            Work(ones, 1),
            None,
        ),
        gather: (gather_10, None, Work(async_calls, 10), None),
        "await emit_async, 10 async listeners": (
            emit_async_10,
            gather,
            Work(async_calls, 10),
            1.15,
        ),
        "emit, 10 async listeners, until all done": (
            emit_10_until_done,
            gather,
            Work(background_calls, 10),
            None,
        ),
        loop: (direct_sync_10, None, Work(sync_calls, 10), None),
        "await emit_async, 10 sync listeners": (
            emit_async_sync_10,
            loop,
            Work(sync_calls, 10),
            3.0,
        ),
    }
    async with bus_emit, bus_running:
        stats = await run_async_cases(
            {k: v[0] for k, v in cases.items()},
            options,
            work={k: v[2] for k, v in cases.items()},
        )
    table = Table("Async throughput, asyncio, ns per emit", ratio_header="x base")
    for label, (_, base, _, goal) in cases.items():
        table.add(Row(label, stats[label], base, target=goal))
    return table


def sync_throughput(options: Options) -> Table:
    cases = sync_cases()
    stats = run_sync_cases(
        {k: v[0] for k, v in cases.items()}, options, work={k: v[2] for k, v in cases.items()}
    )
    table = Table("Sync throughput, ns per emit", ratio_header="x base")
    for label, (_, base, _, goal) in cases.items():
        table.add(Row(label, stats[label], base, target=goal))
    return table


# -- (b) publisher latency ------------------------------------------------------------------------


def _busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def publisher_latency(options: Options) -> list[Table]:
    """Time until the publisher continues, and until the slow listener is done, in µs."""
    repeats = QUICK_LATENCY_REPEATS if options.quick else LATENCY_REPEATS
    finished = asyncio.Event()
    finished_at = 0.0

    def mark_done() -> None:
        nonlocal finished_at
        finished_at = time.perf_counter()
        finished.set()

    def sync_cpu(event: Ping) -> None:
        _busy(SLOW_SECONDS)
        mark_done()

    async def async_sleep(event: Ping) -> None:
        await anyio.sleep(SLOW_SECONDS)
        mark_done()

    async def async_cpu(event: Ping) -> None:
        _busy(SLOW_SECONDS)
        mark_done()

    back = Table("Publisher latency: time until the publisher gets control back", unit="µs")
    done = Table("Publisher latency: time until the slow listener has finished", unit="µs")
    base = "direct call of the sync listener"
    direct: list[float] = []
    for _ in range(repeats):
        start = time.perf_counter()
        sync_cpu(EVENT)
        direct.append((time.perf_counter() - start) * 1e6)
    for table in (back, done):
        table.add(Row(base, Stats(tuple(direct))))
    listeners: list[tuple[str, Callable[[Ping], object]]] = [
        ("sync listener, 20 ms CPU", sync_cpu),
        ("async listener, 20 ms anyio.sleep", async_sleep),
        ("async listener, 20 ms CPU (no await)", async_cpu),
    ]
    for text, fn in listeners:
        for mode in ("emit", "await emit_async"):
            back_us: list[float] = []
            done_us: list[float] = []
            async with _bus([fn]) as bus:
                for _ in range(repeats):
                    finished.clear()
                    start = time.perf_counter()
                    if mode == "emit":
                        bus.emit(EVENT)
                    else:
                        await bus.emit_async(EVENT)
                    back_us.append((time.perf_counter() - start) * 1e6)
                    await finished.wait()
                    done_us.append((finished_at - start) * 1e6)
            note = ""
            if mode == "emit" and fn is async_cpu:
                note = "back at once, but the event loop stalls 20 ms when a worker runs it"
            elif mode == "emit" and fn is sync_cpu:
                note = "sync listeners run inline: the publisher waits"
            back.add(Row(f"{mode}, {text}", Stats(tuple(back_us)), base, note))
            done.add(Row(f"{mode}, {text}", Stats(tuple(done_us)), base))
    return [back, done]


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    tables = [sync_throughput(options)]
    print(tables[-1].render(), end="\n\n", flush=True)
    tables.append(asyncio.run(async_throughput(options)))
    print(tables[-1].render(), end="\n\n", flush=True)
    for table in asyncio.run(publisher_latency(options)):
        tables.append(table)
        print(table.render(), end="\n\n", flush=True)
    finish("emit_modes", tables, options, env)


if __name__ == "__main__":
    main()
