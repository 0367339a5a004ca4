"""The same dispatch workloads against pyee, blinker, pymitter, this bus, and a direct call.

Question: what does each emitter cost per event over calling the listener functions yourself
(the physical limit, measured in the same run with the same loop), and does that cost move when
many other names or wildcard patterns are registered? Listeners only count their calls (a
closure increment, the same functions in every row), so every ratio is dispatch overhead, and
every sample checks that each implementation made exactly the calls it should. "floor" is a
ten-line dict-plus-cache dispatcher: what any pure-Python bus can hope for on this machine.
The eventbus row of each table carries its target (issue 12) and says whether every peer is
beaten.

Run: ``.venv/bin/python benchmarks/peers.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable

import blinker
import pyee
import pyee.asyncio
import pymitter
from _events import Ping, declare_others, registry
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

from eventbus import Event, EventBus

OTHER_NAMES = 1_000
PATTERNS = 100
DIRECT = "direct call (baseline)"


class SvcDone(Event, name="svc42.done", registry=registry):
    n: int


OTHERS = declare_others(OTHER_NAMES)


def noop(event: object) -> None:
    """The listener of every name and pattern an emit does not reach."""
    return None


@dataclasses.dataclass
class Workload:
    """What is registered and what is emitted."""

    title: str
    event: Event
    listeners: list[Callable[[object], None]]  # on the emitted name (counted)
    calls: Callable[[], int]  # how many calls the counted listeners have had
    target: float  # the eventbus row's target ratio
    other_names: int = 0  # each with one listener
    patterns: int = 0  # ``svc{i}.*``, each with one listener; the emitted name matches one
    matched: Callable[[object], None] = noop  # the listener of the pattern the name matches

    @property
    def name(self) -> str:
        return self.event.__event_name__

    @property
    def called(self) -> list[Callable[[object], None]]:
        """The functions an emit calls, in order (the baseline calls exactly these)."""
        return self.listeners + ([self.matched] if self.patterns else [])

    def pattern_listener(self, i: int) -> Callable[[object], None]:
        return self.matched if self.name.startswith(f"svc{i}.") else noop


def _direct(w: Workload) -> SyncLoop:
    fns = tuple(w.called)
    ev = w.event
    if len(fns) == 1:
        [one] = fns

        def direct_1(n: int) -> None:
            for _ in range(n):
                one(ev)

        return direct_1

    def direct_many(n: int) -> None:
        for _ in range(n):
            for fn in fns:
                fn(ev)

    return direct_many


class Floor:
    """Minimal dict-plus-cache dispatcher: exact names and ``*`` patterns, nothing else."""

    def __init__(self) -> None:
        self._subs: list[tuple[str, Callable[[object], object]]] = []
        self._cache: dict[str, tuple[Callable[[object], object], ...]] = {}

    def on(self, pattern: str, fn: Callable[[object], object]) -> None:
        self._subs.append((pattern, fn))
        self._cache.clear()

    def _build(self, name: str) -> tuple[Callable[[object], object], ...]:
        segs = name.split(".")

        def match(p: str) -> bool:
            ps = p.split(".")
            return len(ps) == len(segs) and all(
                a in ("*", b) for a, b in zip(ps, segs, strict=True)
            )

        fns = tuple(fn for p, fn in self._subs if match(p))
        self._cache[name] = fns
        return fns

    def emit(self, name: str, event: object) -> None:
        try:
            fns = self._cache[name]
        except KeyError:
            fns = self._build(name)
        for fn in fns:
            try:
                fn(event)
            except Exception:
                pass


def _floor(w: Workload) -> SyncLoop:
    bus = Floor()
    for i in range(w.other_names):
        bus.on(f"other{i}.done", noop)
    for i in range(w.patterns):
        bus.on(f"svc{i}.*", w.pattern_listener(i))
    for fn in w.listeners:
        bus.on(w.name, fn)
    name, ev = w.name, w.event

    def loop(n: int) -> None:
        for _ in range(n):
            bus.emit(name, ev)

    return loop


def _eventbus(w: Workload) -> SyncLoop:
    bus = EventBus(registry=registry)
    for i, cls in enumerate(OTHERS[: w.other_names]):
        bus.on(cls, noop, name=f"other{i}")
    for i in range(w.patterns):
        bus.on(f"svc{i}.*", w.pattern_listener(i), name=f"pattern{i}")
    for i, fn in enumerate(w.listeners):
        bus.on(w.name, fn, name=f"listener{i}")
    ev = w.event

    def loop(n: int) -> None:
        for _ in range(n):
            bus.emit(ev)

    return loop


def _pyee(w: Workload, emitter: pyee.EventEmitter) -> SyncLoop | None:
    if w.patterns:
        return None
    for i in range(w.other_names):
        emitter.on(f"other{i}.done", noop)
    for fn in w.listeners:
        emitter.on(w.name, fn)
    name, ev = w.name, w.event

    def loop(n: int) -> None:
        for _ in range(n):
            emitter.emit(name, ev)

    return loop


def _blinker(w: Workload) -> SyncLoop | None:
    if w.patterns:
        return None
    ns = blinker.Namespace()
    for i in range(w.other_names):
        ns.signal(f"other{i}.done").connect(noop, weak=False)
    signal = ns.signal(w.name)
    for fn in w.listeners:
        signal.connect(fn, weak=False)
    ev = w.event

    def loop(n: int) -> None:
        for _ in range(n):
            signal.send(ev)

    return loop


def _pymitter(w: Workload) -> SyncLoop:
    emitter = pymitter.EventEmitter(wildcard=bool(w.patterns))
    for i in range(w.other_names):
        emitter.on(f"other{i}.done", noop)
    for i in range(w.patterns):
        emitter.on(f"svc{i}.*", w.pattern_listener(i))
    for fn in w.listeners:
        emitter.on(w.name, fn)
    name, ev = w.name, w.event

    def loop(n: int) -> None:
        for _ in range(n):
            emitter.emit(name, ev)

    return loop


EVENTBUS = "eventbus EventBus.emit"
PEERS = ("pyee", "blinker", "pymitter")


def sync_workload(w: Workload, options: Options) -> Table:
    """One sync workload against every implementation; n/a where a peer lacks the feature."""
    impls: dict[str, SyncLoop | None] = {
        DIRECT: _direct(w),
        "floor: dict+cache dispatcher": _floor(w),
        EVENTBUS: _eventbus(w),
        "pyee EventEmitter": _pyee(w, pyee.EventEmitter()),
        "pyee AsyncIOEventEmitter": _pyee(w, pyee.asyncio.AsyncIOEventEmitter()),
        "blinker Signal.send": _blinker(w),
        "pymitter EventEmitter": _pymitter(w),
    }
    cases = {k: v for k, v in impls.items() if v is not None}
    for loop in cases.values():
        loop(1)  # build caches outside the timing
    work = Work(w.calls, len(w.called))
    stats = run_sync_cases(cases, options, work=dict.fromkeys(cases, work))
    table = Table(w.title, ratio_header="x direct")
    for label, loop_or_none in impls.items():
        if loop_or_none is None:
            table.add(Row(label, None, note="no wildcard patterns"))
        elif label == EVENTBUS:
            note = _beats(stats, label)
            table.add(Row(label, stats[label], DIRECT, note, target=w.target))
        else:
            table.add(Row(label, stats[label], None if label == DIRECT else DIRECT))
    return table


def _beats(stats: dict[str, Stats], mine: str, unlike: tuple[str, ...] = ()) -> str:
    """Whether *mine* is faster (by median) than every peer measured in the same run.

    :param unlike: peers doing other work (not compared, but named)
    """
    peers = [k for k in stats if k.split()[0] in PEERS and k not in unlike]
    slower = [k for k in peers if stats[k].median <= stats[mine].median]
    verdict = f"slower than {', '.join(slower)}" if slower else f"beats every peer ({len(peers)})"
    return verdict + "".join(f"; {k}: not comparable" for k in unlike)


# -- async ----------------------------------------------------------------------------------------


async def async_workload(options: Options) -> Table:
    """10 async listeners, awaited until all finished (peers that cannot await: a counter)."""
    fns, calls = counted_async(10)
    ev = Ping(n=1)
    name = ev.__event_name__

    async def gather(n: int) -> None:
        for _ in range(n):
            await asyncio.gather(*[fn(ev) for fn in fns])

    bus = EventBus(registry=registry)
    for i, fn in enumerate(fns):
        bus.on(Ping, fn, name=f"listener{i}")

    async def eventbus_loop(n: int) -> None:
        for _ in range(n):
            await bus.emit_async(ev)

    cache = {name: tuple(fns)}

    async def floor_loop(n: int) -> None:
        for _ in range(n):
            await asyncio.gather(*[fn(ev) for fn in cache[name]])

    aee = pyee.asyncio.AsyncIOEventEmitter()
    done = 0
    finished = asyncio.Event()

    def counted(fn: Callable[[object], Awaitable[None]]) -> Callable[[object], Awaitable[None]]:
        async def listener(event: object) -> None:
            nonlocal done
            await fn(event)
            done += 1
            if done == len(fns):
                finished.set()

        return listener

    for fn in fns:
        aee.on(name, counted(fn))

    async def pyee_loop(n: int) -> None:
        nonlocal done
        for _ in range(n):
            done = 0
            finished.clear()
            aee.emit(name, ev)
            await finished.wait()

    signal = blinker.Signal()
    for fn in fns:
        signal.connect(fn, weak=False)

    async def blinker_loop(n: int) -> None:
        for _ in range(n):
            await signal.send_async(ev)

    mitter = pymitter.EventEmitter()
    for fn in fns:
        mitter.on(name, fn)

    async def pymitter_loop(n: int) -> None:
        for _ in range(n):
            await mitter.emit_async(name, ev)

    gather_label = "asyncio.gather (baseline)"
    cases: dict[str, tuple[AsyncLoop, str]] = {
        gather_label: (gather, ""),
        "floor: dict+cache + gather": (floor_loop, ""),
        "eventbus await emit_async": (eventbus_loop, ""),
        "pyee AsyncIOEventEmitter": (pyee_loop, "emit, then wait for a done counter"),
        "blinker await send_async": (blinker_loop, "awaits receivers one after another"),
        "pymitter await emit_async": (pymitter_loop, ""),
    }
    stats = await run_async_cases(
        {k: v[0] for k, v in cases.items()}, options, work=dict.fromkeys(cases, Work(calls, 10))
    )
    table = Table(
        "10 async listeners, awaited until all finished (asyncio)", ratio_header="x gather"
    )
    for label, (_, note) in cases.items():
        base = None if label == gather_label else gather_label
        if label == "eventbus await emit_async":
            note = _beats(stats, label, unlike=("blinker await send_async",))
            table.add(Row(label, stats[label], base, note, target=1.15))
        else:
            table.add(Row(label, stats[label], base, note))
    return table


def workloads() -> list[Workload]:
    one, one_calls = counted(1)
    ten, ten_calls = counted(10)
    other, other_calls = counted(1)
    [matched], matched_calls = counted(1)
    return [
        Workload("1 listener", Ping(n=1), one, one_calls, 2.5),
        Workload("10 listeners", Ping(n=1), ten, ten_calls, 1.05),
        Workload(
            f"1 listener, {OTHER_NAMES:,} other names registered",
            Ping(n=1),
            other,
            other_calls,
            2.5,
            other_names=OTHER_NAMES,
        ),
        Workload(
            f"{PATTERNS} wildcard patterns 'svc{{i}}.*' registered, the emit matches one",
            SvcDone(n=1),
            [],
            matched_calls,
            2.5,
            patterns=PATTERNS,
            matched=matched,
        ),
    ]


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    tables: list[Table] = []
    for w in workloads():
        tables.append(sync_workload(w, options))
        print(tables[-1].render(), end="\n\n", flush=True)
    tables.append(asyncio.run(async_workload(options)))
    print(tables[-1].render(), end="\n\n", flush=True)
    finish("peers", tables, options, env)


if __name__ == "__main__":
    main()
