"""How late is a delayed durable event? From the time it was due to its listener's call.

One process runs a ``RedisStreams`` transport (its relay and a consumer group) and publishes
at 1,000 events/s for one second (transactions of 10 events every 10 ms), every event due in
the same later second (``deliver_at`` spread over it, 1 ms apart): the relay must wake for
each due row rather than wait for its poll (``poll_interval=1.0``, as in production).

Baseline, measured in the same run: the same events published for now at the same rate,
their latency from commit to listener call. "lateness" of a scheduled event is its listener
call minus its ``deliver_at``, or minus its commit where a loaded machine made the publisher
commit it after it was due (the run prints by how much publishing ended before the first due
time); an event called before its ``deliver_at`` fails the run. Each case runs ROUNDS times
on SQLite (a file) and PostgreSQL 15 (a throwaway server); the tables show the median, min
and max over rounds of each round's p99 (and p50).
Target (issue 26): p99 lateness <= 100 ms at 1,000 scheduled events/s due in one second.

Run: ``.venv/bin/python benchmarks/delayed.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
from _harness import Row, Stats, Table, environment, finish, parse_options, print_environment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test suite's throwaway servers

RATE = 1_000  # events/s published, and due per second
PER_TX = 10
TICK = PER_TX / RATE
LEAD = 3.0  # seconds from the first publish to the first due time (a busy machine)
ROUNDS = 3
QUICK_ROUNDS = 1
TARGET_MS = 100.0


async def run_case(redis_url: str, db_url: str, *, scheduled: bool) -> dict[str, float]:
    """Publish RATE events over one second; return p50, p99 and max (ms) of latency (now) or
    lateness (scheduled), after checking each arrived once and none early."""
    from eventbus.backends.redis import make_redis_client
    from eventbus.backends.sql import make_engine
    from eventbus.durable import DurableOptions, RedisStreams, create_durable_tables
    from eventbus.durable._tables import outbox
    from tests.durable.events import REG, OrderPaid

    client = make_redis_client(redis_url, socket_timeout=10, max_connections=32)
    await client.flushall()
    engine = make_engine(db_url)
    await create_durable_tables(engine)
    async with engine.begin() as conn:
        await conn.execute(outbox.delete())
    streams = RedisStreams(
        client, engine, service="bench", registry=REG, options=DurableOptions(poll_interval=1.0)
    )
    called: dict[int, float] = {}
    repeated = 0
    done = anyio.Event()

    async def listener(e: OrderPaid) -> None:
        nonlocal repeated
        if e.order_id in called:
            repeated += 1
        called.setdefault(e.order_id, time.time())
        if len(called) == RATE:
            done.set()

    streams.subscribe(OrderPaid, listener, name="bench.delayed")
    due_at: dict[int, float] = {}  # Unix seconds
    start_at: dict[int, float] = {}  # the later of due time and commit time
    try:
        async with streams:
            first_due = datetime.now(UTC) + timedelta(seconds=LEAD)
            start = time.monotonic()
            for first in range(0, RATE, PER_TX):
                async with engine.begin() as conn:
                    for i in range(first, first + PER_TX):
                        if scheduled:
                            due = first_due + timedelta(seconds=i / RATE)
                            await streams.publish(OrderPaid(order_id=i), conn, deliver_at=due)
                            due_at[i] = due.timestamp()
                        else:
                            await streams.publish(OrderPaid(order_id=i), conn)
                committed = time.time()
                for i in range(first, first + PER_TX):  # a publisher late under load: from then
                    start_at[i] = max(committed, due_at.get(i, committed))
                await anyio.sleep(max(0.0, start + (first + PER_TX) / RATE - time.monotonic()))
            published = time.time()
            with anyio.fail_after(60):
                await done.wait()
    finally:
        await client.aclose()
        await engine.dispose()
    early = [i for i in due_at if called[i] < due_at[i]]
    if early:
        raise AssertionError(f"{len(early)} events arrived before they were due")
    delays = sorted((called[i] - start_at[i]) * 1000 for i in range(RATE))
    if repeated:
        raise AssertionError(f"{repeated} events were delivered twice without a failure")
    q = statistics.quantiles(delays, n=100)
    # scheduled: how long before the first due time publishing ended (< 0: the load made
    # the publisher late, and lateness includes its delay)
    margin = (due_at[0] - published) * 1000 if scheduled else 0.0
    return {"p50": q[49], "p99": q[98], "max": delays[-1], "margin": margin}


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(quick: bool) -> list[Table]:
    from tests.postgres_server import PostgresNotInstalled, PostgresServer
    from tests.redis_server import RedisServer

    tmp = Path(tempfile.mkdtemp(prefix="bench-delayed-"))
    databases: dict[str, str] = {"sqlite": f"sqlite+aiosqlite:///{tmp / 'bench.db'}"}
    pg: PostgresServer | None = None
    try:
        pg = PostgresServer(database="bench")
        pg.__enter__()
        databases["postgresql"] = pg.url()
    except (PostgresNotInstalled, RuntimeError) as exc:
        print(f"# PostgreSQL cases skipped: {exc}")
    results: dict[str, list[dict[str, float]]] = {}
    try:
        with RedisServer() as redis:
            for rnd in range(QUICK_ROUNDS if quick else ROUNDS):
                for db_name, url in databases.items():
                    for scheduled in (False, True):
                        label = _label(db_name, scheduled)
                        r = await run_case(redis.url, url, scheduled=scheduled)
                        results.setdefault(label, []).append(r)
                        print(
                            f"# round {rnd + 1}, {label}: p50 {r['p50']:.1f} ms, p99 "
                            f"{r['p99']:.1f} ms, max {r['max']:.1f} ms, published "
                            f"{r['margin']:.0f} ms before the first due (load {load()})"
                        )
    finally:
        if pg is not None:
            pg.__exit__(None, None, None)
    tables = []
    for stat in ("p99", "p50"):
        table = Table(
            f"{stat} of each round: scheduled events' lateness (due to listener call) vs "
            f"events published for now (commit to listener call), {RATE:,}/s",
            unit="ms",
            ratio_header="vs now",
        )
        for db_name in databases:
            now, later = _label(db_name, False), _label(db_name, True)
            table.add(Row(now, Stats(tuple(r[stat] for r in results[now]))))
            worst = max(r[stat] for r in results[later])
            note = ""
            if stat == "p99":
                met = "met" if worst <= TARGET_MS else "MISSED"
                note = f"target p99 <= {TARGET_MS:.0f} ms: {met} (worst round {worst:.1f} ms)"
            table.add(
                Row(later, Stats(tuple(r[stat] for r in results[later])), baseline=now, note=note)
            )
        tables.append(table)
    for table in tables:
        print()
        print(table.render())
    return tables


def _label(db_name: str, scheduled: bool) -> str:
    return f"{db_name}, {'scheduled, due in one second' if scheduled else 'published for now'}"


if __name__ == "__main__":
    opts = parse_options(__doc__)
    env = environment()
    print_environment(env)
    tables = anyio.run(main, opts.quick, backend="asyncio")
    finish("delayed", tables, opts, env)
