"""How many failure rows per second does SqlFailureStore write into a SQLite file?

Target: at least 20,000 rows/s for records accepted by ``store.record()`` and written by the
background writer until ``flush()`` returns (one transaction per batch, executemany inserts),
into a fresh SQLite file under a temporary directory. Other rows show what the batch size,
the SQLite pragmas and the whole failure path (a listener raising under ``emit()``) cost.

A second table divides by the process's CPU time (event loop plus aiosqlite's thread) instead
of wall time: on a machine shared with other work it shows what the code costs, and on an idle
machine the two agree (the write is CPU-bound: WAL with ``synchronous=NORMAL`` does not fsync
per commit). The load average is printed with the tables.

Run: ``.venv/bin/python benchmarks/failure_writes.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import anyio
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
from sqlalchemy.ext.asyncio import create_async_engine

from eventbus import Event, EventBus, EventRegistry, FailureRecord
from eventbus.backends.sql import SqlFailureStore, create_tables

N = 50_000  # rows per sample
QUICK_N = 10_000
EMIT_SHARE = 10  # the end-to-end case is ~10x slower: it emits N / EMIT_SHARE events
REPEATS = 3
QUICK_REPEATS = 3
TARGET = 20_000  # rows/s
BATCH_SIZES = (500, 2_000, 10_000)
DEFAULT_BATCH = 2_000

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg):
    order_id: int


Sample = Callable[[Path, int], Awaitable["Clock"]]  # (temp dir, n) -> elapsed times


class Clock:
    """Wall and CPU seconds between ``start()`` and ``stop()``."""

    def start(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> Clock:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        return self


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


def record_then_flush(batch_size: int, *, pragmas: bool = True) -> Sample:
    """``record()`` n prebuilt records into a started store, then ``flush()``; rows/s."""

    async def sample(tmp: Path, n: int) -> Clock:
        url = f"sqlite+aiosqlite:///{tmp / f'{uuid.uuid4().hex}.db'}"
        # A URL-built store sets WAL + synchronous=NORMAL; a given engine keeps SQLite defaults.
        store = SqlFailureStore(url if pragmas else create_async_engine(url), batch_size=batch_size)
        await create_tables(store.engine)
        records = make_records(n)
        clock = Clock()
        async with anyio.create_task_group() as tg:
            await store.start(tg)
            clock.start()
            for rec in records:
                store.record(rec)
            await store.flush()
            clock.stop()
            await store.aclose()
        if not pragmas:
            await store.engine.dispose()
        assert store.statistics().written == n
        return clock

    return sample


async def emit_failures(tmp: Path, n: int) -> Clock:
    """End to end: ``emit()`` n events to a raising sync listener, then close the bus."""
    store = SqlFailureStore(f"sqlite+aiosqlite:///{tmp / f'{uuid.uuid4().hex}.db'}")
    await create_tables(store.engine)
    bus = EventBus(reg, store)

    @bus.on(OrderPaid, name="billing:grant_points")
    def refuse(e: OrderPaid) -> None:
        raise ValueError("refused")

    events = [OrderPaid(order_id=i) for i in range(n)]
    logging.disable(logging.CRITICAL)  # 50,000 logged tracebacks would measure the terminal
    try:
        clock = Clock()
        async with bus:
            clock.start()
            for e in events:
                bus.emit(e)
            await store.flush()
            clock.stop()
    finally:
        logging.disable(logging.NOTSET)
    assert store.statistics().written == n
    return clock


async def measure(options: Options) -> list[Table]:
    n = QUICK_N if options.quick else N
    repeats = QUICK_REPEATS if options.quick else REPEATS
    cases: dict[str, tuple[Sample, str]] = {
        f"record+flush, batch {b:,}": (
            record_then_flush(b),
            "default" if b == DEFAULT_BATCH else "",
        )
        for b in BATCH_SIZES
    }
    cases[f"record+flush, batch {DEFAULT_BATCH:,}, no pragmas"] = (
        record_then_flush(DEFAULT_BATCH, pragmas=False),
        "journal=DELETE, synchronous=FULL",
    )
    cases["emit -> raising listener -> table"] = (
        emit_failures,
        f"n={n // EMIT_SHARE:,}, logging disabled",
    )
    wall: dict[str, list[float]] = {label: [] for label in cases}
    cpu: dict[str, list[float]] = {label: [] for label in cases}
    with tempfile.TemporaryDirectory(prefix="failure_writes-") as tmp:
        for _ in range(repeats):  # round-robin, so that noise hits every case alike
            for label, (sample, _note) in cases.items():
                rows = n // EMIT_SHARE if sample is emit_failures else n
                clock = await sample(Path(tmp), rows)
                wall[label].append(rows / clock.wall)
                cpu[label].append(rows / clock.cpu)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    tables = [
        Table(f"failure rows written to SQLite, n={n:,}; load average {load}", unit="rows/s"),
        Table(f"the same per CPU-second of this process, n={n:,}", unit="rows/CPU-s"),
    ]
    for label, (_sample, note) in cases.items():
        tables[0].add(Row(label, Stats(tuple(wall[label])), note=note))
        tables[1].add(Row(label, Stats(tuple(cpu[label])), note=note))
    return tables


def main() -> None:
    options = parse_options(__doc__)
    env = environment()
    print_environment(env)
    tables = anyio.run(measure, options, backend="asyncio")
    for table in tables:
        print(table.render())
    for table in tables:
        default = next(r for r in table.rows if r.note == "default")
        assert default.stats is not None
        verdict = "meets" if default.stats.median >= TARGET else "MISSES"
        print(
            f"# default batch: median {default.stats.median:,.0f} {table.unit} {verdict} the "
            f"target of {TARGET:,} rows/s"
        )
    finish("failure_writes", tables, options, env)


if __name__ == "__main__":
    main()
