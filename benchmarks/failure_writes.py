"""How many failure rows per second does SqlFailureStore write into a SQLite file, and what does a
failure storm cost the publisher?

Target: at least 20,000 rows/s for records accepted by ``store.record()`` and written by the
background writer until ``flush()`` returns, into a fresh SQLite file under a temporary
directory. Each write case is a ratio to the writer as it was before adaptive batches (fixed
2,000-row transactions, ``max_batch_size=batch_size``), measured in the same run.

The storm: a publisher emits to an async listener that never finishes, behind a small queue, so
that almost every emit becomes a "dropped: queue full" failure, faster than any database takes
rows (the report that started this: 200k emits, 279,873 records past the buffer, each logged
in full at ERROR, emitting 1.8x slower). The publisher awaits once per 100 emits, as a server
between requests does. Rows/s counts every failure from the first emit until all of them are in
the table, spilled ones included; the publisher's emits/s are compared with the same storm on a
``MemoryFailureStore``. The store's log goes to a real handler (its lines are counted); the
bus's own per-failure line is silenced in every case alike.

The last table is a storm past the cap of the default in-memory store: 400,000 records into
``MemoryFailureStore()`` (``max_records=100,000``), so that 300,000 are evicted, against the
same records into an unbounded one. Eviction must cost about nothing: it was quadratic once
(28 s for this storm).

A second table divides by the process's CPU time (event loop plus worker threads) instead of
wall time: on a machine shared with other work it shows what the code costs. The load average
is printed with the tables. Every sample asserts that the table holds every row it timed.

Run: ``.venv/bin/python benchmarks/failure_writes.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
import sqlalchemy as sa
from _harness import (
    Options,
    Row,
    Stats,
    Table,
    environment,
    finish,
    parse_options,
    print_environment,
)
from anyio.lowlevel import checkpoint

from eventbus import Event, EventBus, EventRegistry, FailureRecord, MemoryFailureStore
from eventbus.abc import FailureStore
from eventbus.backends.sql import SqlFailureStore, create_tables

N = 50_000  # rows per record+flush sample
QUICK_N = 10_000
EMIT_SHARE = 10  # the end-to-end case is ~10x slower: it emits N / EMIT_SHARE events
STORM = 200_000  # emits per storm sample (the reported storm)
QUICK_STORM = 40_000
STORM_BUFFER = 100_000  # the store's default buffer_size
QUICK_STORM_BUFFER = 10_000
PAST_CAP = 400_000  # records of the in-memory storm, four times the default cap
QUICK_PAST_CAP = 80_000
YIELD_EVERY = 100  # emits between two awaits of the storm's publisher
REPEATS = 3
TARGET = 20_000  # rows/s
FIXED = "fixed 2,000-row batches"
MEMORY = "storm, MemoryFailureStore"

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


@dataclasses.dataclass
class Sample:
    """One timed run: rows it put in the table, wall and CPU seconds, publisher seconds."""

    rows: int
    wall: float
    cpu: float
    publisher: float = 0.0
    spilled: int = 0
    log_lines: int = 0


Case = Callable[[Path, int], Awaitable[Sample]]


class Clock:
    """Wall and CPU seconds since construction."""

    def __init__(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def make_records(n: int) -> list[FailureRecord]:
    """Realistic rows: a short JSON payload and a ~400-byte traceback each."""
    now = datetime.now(UTC)
    tb = "Traceback (most recent call last):\n" + '  File "app/billing.py", line 42\n' * 10
    return [
        FailureRecord(
            id=uuid.uuid4().hex,
            event_id=uuid.uuid4().hex,
            event_name="order.paid",
            payload=f'{{"order_id": {i}}}',
            payload_ok=True,
            listener="billing:grant_points",
            error_type="ValueError",
            message=f"points service refused order {i}",
            traceback=tb + "ValueError: refused\n",
            first_failed_at=now,
            last_failed_at=now,
        )
        for i in range(n)
    ]


async def count_rows(store: SqlFailureStore) -> int:
    async with store.engine.connect() as conn:
        return int(await conn.scalar(sa.select(sa.func.count()).select_from(store.table)) or 0)


def new_store(tmp: Path, *, adaptive: bool, buffer_size: int = 100_000) -> SqlFailureStore:
    url = f"sqlite+aiosqlite:///{tmp / f'{uuid.uuid4().hex}.db'}"
    max_batch = 20_000 if adaptive else 2_000
    return SqlFailureStore(url, batch_size=2_000, max_batch_size=max_batch, buffer_size=buffer_size)


def record_then_flush(*, adaptive: bool) -> Case:
    """``record()`` n prebuilt records into a started store, then ``flush()``; rows/s."""

    async def sample(tmp: Path, n: int) -> Sample:
        store = new_store(tmp, adaptive=adaptive)
        await create_tables(store.engine)
        records = make_records(n)
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            clock = Clock()
            for rec in records:
                store.record(rec)
            await store.flush()
            wall, cpu = clock.stop()
            rows = await count_rows(store)
            await store.aclose()
        assert rows == n, f"{rows} rows in the table, {n} recorded"
        return Sample(rows, wall, cpu)

    return sample


async def emit_failures(tmp: Path, n: int) -> Sample:
    """End to end: ``emit()`` n events to a raising sync listener, then ``flush()``."""
    store = new_store(tmp, adaptive=True)
    await create_tables(store.engine)
    bus = EventBus(reg, store)

    @bus.on(OrderPaid, name="billing:grant_points")
    def refuse(e: OrderPaid) -> None:
        raise ValueError("refused")

    events = [OrderPaid(order_id=i) for i in range(n)]
    with store_log():
        async with bus:
            clock = Clock()
            for e in events:
                bus.emit(e)
            await store.flush()
            wall, cpu = clock.stop()
            rows = await count_rows(store)
    assert rows == n, f"{rows} rows in the table, {n} emitted"
    return Sample(rows, wall, cpu)


def storm(make: Callable[[Path], FailureStore]) -> Case:
    """n emits, nearly all dropped behind a full queue: every failure in the store, timed."""

    async def sample(tmp: Path, n: int) -> Sample:
        store = make(tmp)
        if isinstance(store, SqlFailureStore):
            await create_tables(store.engine)
        bus = EventBus(reg, store, queue_size=100, workers=1, shutdown_grace=0)

        @bus.on(OrderPaid, name="billing:grant_points")
        async def stuck(e: OrderPaid) -> None:
            await anyio.sleep_forever()

        events = [OrderPaid(order_id=i) for i in range(n)]
        with store_log() as lines:
            async with bus:
                clock = Clock()
                for i, e in enumerate(events):
                    bus.emit(e)
                    if i % YIELD_EVERY == 0:
                        await checkpoint()
                publisher = time.perf_counter() - clock.wall
                await store.flush()
                wall, cpu = clock.stop()
                recorded = bus.statistics().failures
            # close recorded the 101 calls still queued or running as cut short
        if isinstance(store, SqlFailureStore):
            rows = await count_rows(store)
            await store.engine.dispose()
            stats = store.statistics()
            assert rows == n == stats.written + stats.reingested, (rows, n, stats)
            spilled = stats.spilled
        else:
            assert isinstance(store, MemoryFailureStore)
            rows, spilled = len(store), 0
            assert rows == n, (rows, n)
        return Sample(recorded, wall, cpu, publisher, spilled, len(lines()))

    return sample


class store_log:
    """Send the store's log lines to a real (in-memory) handler and count them; silence the
    bus's own per-failure line, the same way in every case."""

    def __enter__(self) -> Callable[[], list[str]]:
        self.stream = io.StringIO()
        self.handler = logging.StreamHandler(self.stream)
        self.core, self.store = (
            logging.getLogger("eventbus"),
            logging.getLogger("eventbus.failures"),
        )
        self.saved = (self.core.level, self.store.level, self.store.propagate)
        self.core.setLevel(logging.CRITICAL)
        self.store.setLevel(logging.INFO)
        self.store.propagate = False
        self.store.addHandler(self.handler)
        return lambda: self.stream.getvalue().splitlines()

    def __exit__(self, *exc: object) -> None:
        self.store.removeHandler(self.handler)
        self.core.setLevel(self.saved[0])
        self.store.setLevel(self.saved[1])
        self.store.propagate = self.saved[2]


def memory_past_cap(n: int) -> Table:
    """``record()`` *n* records into the default ``MemoryFailureStore`` (capped; quick runs
    use a quarter of *n* as the cap) and into an unbounded one; records/s."""
    records = make_records(n)
    cap = n // 4
    cases = {"unbounded (max_records=None)": None, f"max_records={cap:,}, past the cap": cap}
    samples: dict[str, list[float]] = {label: [] for label in cases}
    log = logging.getLogger("eventbus.failures")  # its eviction WARNINGs go to a real handler
    handler, propagate = logging.StreamHandler(io.StringIO()), log.propagate
    log.addHandler(handler)
    log.propagate = False
    for _ in range(REPEATS):
        for label, limit in cases.items():
            store = MemoryFailureStore(max_records=limit)
            clock = Clock()
            for rec in records:
                store.record(rec)
            wall, _cpu = clock.stop()
            assert len(store) == (limit or n)
            samples[label].append(n / wall)
    log.removeHandler(handler)
    log.propagate = propagate
    table = Table(f"a storm of {n:,} records into MemoryFailureStore", unit="records/s")
    base = next(iter(cases))
    for label, limit in cases.items():
        note = f"{n - (limit or n):,} evicted" if limit else "baseline"
        table.add(Row(label, Stats(tuple(samples[label])), None if limit is None else base, note))
    return table


async def measure(options: Options) -> list[Table]:
    n = QUICK_N if options.quick else N
    storm_n = QUICK_STORM if options.quick else STORM
    buffer = QUICK_STORM_BUFFER if options.quick else STORM_BUFFER

    def sql(*, adaptive: bool, buffer_size: int) -> Callable[[Path], FailureStore]:
        return lambda tmp: new_store(tmp, adaptive=adaptive, buffer_size=buffer_size)

    holds = f"storm -> table, buffer {storm_n:,} holds it"
    cases: dict[str, tuple[Case, int, str]] = {
        f"record+flush, {FIXED}": (record_then_flush(adaptive=False), n, "baseline"),
        "record+flush, adaptive 2,000..20,000": (record_then_flush(adaptive=True), n, "default"),
        "emit -> raising listener -> table": (emit_failures, n // EMIT_SHARE, ""),
        holds: (storm(sql(adaptive=True, buffer_size=storm_n)), storm_n, ""),
        f"storm -> table, {FIXED}": (storm(sql(adaptive=False, buffer_size=buffer)), storm_n, ""),
        "storm -> table, adaptive": (storm(sql(adaptive=True, buffer_size=buffer)), storm_n, ""),
        MEMORY: (storm(lambda _: MemoryFailureStore(max_records=None)), storm_n, ""),
    }
    samples: dict[str, list[Sample]] = {label: [] for label in cases}
    with tempfile.TemporaryDirectory(prefix="failure_writes-") as tmp:
        for _ in range(REPEATS):  # round-robin, so that noise hits every case alike
            for label, (case, rows, _note) in cases.items():
                samples[label].append(await case(Path(tmp), rows))
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    base = f"record+flush, {FIXED}"
    writes = Table(f"failure rows into SQLite; load average {load}", unit="rows/s")
    per_cpu = Table("the same per CPU-second of this process", unit="rows/CPU-s")
    publisher = Table(f"the storm's publisher, {storm_n:,} emits", unit="emits/s")
    publisher.ratio_header = "ratio"
    for label, (_case, rows, note) in cases.items():
        got = samples[label]
        if label.startswith("storm"):
            spilled = (min(s.spilled for s in got), max(s.spilled for s in got))
            note = (
                f"spilled {spilled[0]:,}-{spilled[1]:,}, store log lines "
                f"{max(s.log_lines for s in got)}"
                if label != MEMORY
                else "reference: no database"
            )
            publisher.add(
                Row(
                    label.removeprefix("storm -> table, "),
                    Stats(tuple(rows / s.publisher for s in got)),
                    None if label == holds else holds.removeprefix("storm -> table, "),
                    note,
                )
            )
            if label == MEMORY:
                continue
            if label != holds:
                note = f"buffer {buffer:,}, {note}"
        elif not note:
            note = f"n={rows:,}"
        baseline = None if label == base else base
        writes.add(Row(label, Stats(tuple(s.rows / s.wall for s in got)), baseline, note))
        per_cpu.add(Row(label, Stats(tuple(s.rows / s.cpu for s in got)), baseline, note))
    memory = memory_past_cap(QUICK_PAST_CAP if options.quick else PAST_CAP)
    return [writes, per_cpu, publisher, memory]


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    tables = anyio.run(measure, options, backend="asyncio")
    for table in tables:
        print(table.render())
    default = next(r for r in tables[0].rows if r.note == "default")
    assert default.stats is not None
    verdict = "meets" if default.stats.median >= TARGET else "MISSES"
    print(
        f"# default writer: median {default.stats.median:,.0f} rows/s {verdict} the target of "
        f"{TARGET:,} rows/s"
    )
    finish("failure_writes", tables, options, env)


if __name__ == "__main__":
    main()
