"""What does durability cost, end to end, from a commit in one process to a listener that
finished in another?

Durable events (``eventbus.durable.RedisStreams``): the publisher's transaction writes outbox
rows; the relay of the publishing process (woken after the commit) adds them to the stream;
a consumer process reads them through its consumer group, calls the listener, acknowledges.
Baseline, measured in the same run: the naive pipeline the outbox replaces, ``XADD`` from the
publisher and ``XREADGROUP`` + ``XACK`` in the consumer, no outbox, no inbox, no leases.

Cases, each on SQLite (a file, WAL) and on PostgreSQL 15 (a throwaway server):

* **max**: publish N events as fast as the publisher can (transactions of 100 events), and
  divide N by the time from the first commit to the last listener finished: the sustained
  rate of the whole pipeline. Also with a listener taking ``tx`` that inserts one row
  (exactly-once effects: the row and its inbox row commit together), three times: deliveries
  sharing a transaction per batch (the default) with the insert statement built once, as a
  hot listener should; the same with ``insert().values(...)`` built at every call (SQLAlchemy
  then makes the statement and its cache key each time); and one transaction per event
  (``tx_batch=1``, as before batching). A ``tx`` listener's event counts as finished when its
  transaction commits.
* **1,000/s** and **5,000/s** offered (``tx`` listeners: 1,000/s): every 10 ms the publisher
  commits the events due (transactions of at most ``RATE/1000`` events, so about 1,000
  commits per second); the latency of each event is from its commit to its listener's end
  (p50, p99, max).

"cost/event" is wall time per event of the max case, as a ratio to the naive baseline; the
"(cpu)" column the same with the CPU time of both processes from the first commit to the last
listener call (other processes on a shared machine do not inflate it; imports, setup and
shutdown, which differ between the cases, are left out). Every case asserts that each event
reached the listener (counts). Targets (issue 14, 2 cores): >= 5,000 events/s on PostgreSQL,
p99 <= 50 ms at 1,000/s, cost <= 3x the baseline. The load average is printed with the tables.

Run: ``.venv/bin/python benchmarks/durable.py [--quick] [--only TEXT] [--json PATH]``
(``--only``: the cases whose label contains TEXT, and the baseline)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from _harness import Options, Row, Stats, Table, environment, finish, print_environment

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the test suite's throwaway servers, rather than a third copy

N = 20_000  # events of a max case
QUICK_N = 5_000
TX_SHARE = 5  # a listener taking tx commits once per event: its max case runs N / TX_SHARE
SECONDS = 3.0  # duration of a fixed-rate case
QUICK_SECONDS = 1.5
RATES = (1_000, 5_000)
MAX_TX = 100  # events per transaction in the max case
TICK = 0.01  # the fixed-rate publisher's period
PUBLISHERS = 16  # concurrent transactions of the fixed-rate publisher
ROUNDS = 3  # samples of each max case, taken round-robin
QUICK_ROUNDS = 1


# -- the consumer process ------------------------------------------------------------------------


async def worker(args: argparse.Namespace) -> None:
    """Consume *args.n* events, then print their finish times and this process's CPU time
    from "ready" to the last listener call: as the publisher's, without the imports, setup
    and shutdown, which differ between the cases and are not a cost per event."""
    from eventbus.backends.redis import make_redis_client

    finished: dict[int, float] = {}
    done = anyio.Event()
    cpu_at: dict[str, float] = {}

    def ready() -> None:
        cpu_at["ready"] = time.process_time()
        print("ready", flush=True)

    def finish_one(order_id: int) -> None:
        finished[order_id] = time.time()
        if len(finished) >= args.n:
            cpu_at.setdefault("done", time.process_time())
            done.set()

    client = make_redis_client(args.redis, socket_timeout=10, max_connections=32)
    if args.mode == "naive":
        await naive_consumer(client, args.n, ready, finish_one, done)
    else:
        await durable_consumer(args, client, ready, finish_one, done)
    cpu = cpu_at["done"] - cpu_at["ready"]
    await client.aclose()
    print(json.dumps({"finished": finished, "cpu": cpu}), flush=True)


async def naive_consumer(
    client: Any,
    n: int,
    ready: Callable[[], None],
    finish_one: Callable[[int], None],
    done: anyio.Event,
) -> None:
    stream = "naive:stream"
    await client.xgroup_create(stream, "g", id="0", mkstream=True)
    ready()
    while not done.is_set():
        reply: Any = await client.xreadgroup("g", "c", {stream: ">"}, count=500, block=1000)
        for _, entries in reply or ():
            for _, fields in entries:
                order = json.loads(fields[b"payload"])["order_id"]
                await listener(order)
                finish_one(order)
            await client.xack(stream, "g", *[e[0] for e in entries])


async def listener(order_id: int) -> None:
    """The work of the listener: none (an async call), so that the pipeline is measured."""


async def durable_consumer(
    args: argparse.Namespace,
    client: Any,
    ready: Callable[[], None],
    finish_one: Callable[[int], None],
    done: anyio.Event,
) -> None:
    import sqlalchemy as sa
    from sqlalchemy.ext.asyncio import AsyncConnection

    from eventbus.backends.sql import make_engine
    from eventbus.durable import DurableOptions, RedisStreams
    from tests.durable.events import REG, OrderPaid, effects

    engine = make_engine(args.db)
    streams = RedisStreams(
        client,
        engine,
        service="bench",
        registry=REG,
        options=DurableOptions(poll_interval=1.0, tx_batch=1 if args.mode == "tx1" else 50),
    )
    if args.mode in ("tx", "txv", "tx1"):

        def committed(conn: Any) -> None:  # an event has its effect once its commit is done
            for order_id in conn.info.pop("bench", ()):
                finish_one(order_id)

        sa.event.listen(engine.sync_engine, "commit", committed)
        insert = effects.insert()  # built once, as a hot listener's statement should be
        per_call = args.mode == "txv"

        async def with_tx(e: OrderPaid, tx: AsyncConnection) -> None:
            await listener(e.order_id)
            if per_call:  # SQLAlchemy builds the statement and its cache key at every call
                await tx.execute(
                    effects.insert().values(listener="bench", event_id="", order_id=e.order_id)
                )
            else:
                row = {"listener": "bench", "event_id": "", "order_id": e.order_id}
                await tx.execute(insert, row)
            tx.sync_connection.info.setdefault("bench", []).append(e.order_id)  # type: ignore[union-attr]

        streams.subscribe(OrderPaid, with_tx, name="bench.tx")
    else:

        async def plain(e: OrderPaid) -> None:
            await listener(e.order_id)
            finish_one(e.order_id)

        streams.subscribe(OrderPaid, plain, name="bench.plain")
    async with streams:
        ready()
        with anyio.fail_after(300):
            await done.wait()
    await engine.dispose()


# -- the publishing process (this one) ---------------------------------------------------------


class Pipeline:
    """One case's publisher (in this process) and its consumer process."""

    def __init__(self, mode: str, redis_url: str, db_url: str | None) -> None:
        self.mode = mode
        self.redis_url = redis_url
        self.db_url = db_url
        self.proc: Any = None
        self.client: Any = None
        self.engine: Any = None
        self.streams: Any = None

    async def __aenter__(self) -> Pipeline:
        from eventbus.backends.redis import make_redis_client

        self.client = make_redis_client(self.redis_url, socket_timeout=10, max_connections=32)
        await self.client.flushall()
        if self.db_url is not None:
            from eventbus.backends.sql import make_engine
            from eventbus.durable import DurableOptions, RedisStreams, create_durable_tables
            from eventbus.durable._tables import inbox, outbox
            from tests.durable.events import REG, effects, test_metadata

            self.engine = make_engine(self.db_url, pool_size=20)
            await create_durable_tables(self.engine)
            async with self.engine.begin() as conn:
                await conn.run_sync(test_metadata.create_all)
                if conn.dialect.name == "postgresql":  # no dead rows left to vacuum mid-case
                    names = ", ".join(t.name for t in (outbox, inbox, effects))
                    await conn.exec_driver_sql(f"TRUNCATE {names}")
                else:
                    for table in (outbox, inbox, effects):
                        await conn.execute(table.delete())
            self.streams = RedisStreams(
                self.client,
                self.engine,
                service="bench-publisher",
                registry=REG,
                options=DurableOptions(poll_interval=1.0),
            )
            await self.streams.__aenter__()
        return self

    async def start_consumer(self, n: int) -> None:
        argv = [sys.executable, __file__, "--worker", self.mode, "--n", str(n)]
        argv += ["--redis", self.redis_url, "--db", self.db_url or ""]
        self.proc = await anyio.open_process(argv, cwd=ROOT, stderr=None)
        line = await self._line()
        assert line == "ready", line

    async def _line(self) -> str:
        buf = b""
        assert self.proc.stdout is not None
        with anyio.fail_after(300):
            while not buf.endswith(b"\n"):
                buf += await self.proc.stdout.receive(1 << 20)
        return buf.decode().strip()

    async def results(self) -> tuple[dict[int, float], float]:
        data = json.loads(await self._line())
        await self.proc.wait()
        return {int(k): v for k, v in data["finished"].items()}, float(data["cpu"])

    async def publish(self, first: int, count: int) -> float:
        """Commit *count* events in one transaction; return the commit's end time (for the
        baseline, the time its ``XADD`` is sent: a consumer may finish before the reply)."""
        from tests.durable.events import OrderPaid

        events = [{"order_id": i} for i in range(first, first + count)]
        if self.streams is None:
            async with self.client.pipeline(transaction=False) as pipe:
                for e in events:
                    pipe.xadd("naive:stream", {"payload": json.dumps(e)})
                sent = time.time()
                await pipe.execute()
            return sent
        async with self.engine.begin() as conn:
            await self.streams.publish_many([OrderPaid(**e) for e in events], conn)
        return time.time()

    async def __aexit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self.streams is not None:
            await self.streams.__aexit__(None, None, None)
        if self.engine is not None:
            await self.engine.dispose()
        await self.client.aclose()


async def run_max(mode: str, redis_url: str, db_url: str | None, n: int) -> dict[str, float]:
    """Publish *n* events as fast as possible; return events/s, and CPU s per event."""
    async with Pipeline(mode, redis_url, db_url) as p:
        await p.start_consumer(n)
        cpu0 = time.process_time()
        start = time.time()
        for first in range(0, n, MAX_TX):
            await p.publish(first, min(MAX_TX, n - first))
        finished, worker_cpu = await p.results()
        cpu = time.process_time() - cpu0 + worker_cpu
    assert sorted(finished) == list(range(n)), f"{mode}: {len(finished)} of {n} finished"
    elapsed = max(finished.values()) - start
    return {"rate": n / elapsed, "wall_per_event": elapsed / n, "cpu_per_event": cpu / n}


async def run_rate(
    mode: str, redis_url: str, db_url: str | None, rate: int, seconds: float
) -> dict[str, Any]:
    """Offer *rate* events/s for *seconds* from up to :data:`PUBLISHERS` concurrent
    transactions (as a server's requests would); return latency percentiles (ms) and the
    rate actually offered."""
    n = int(rate * seconds)
    per_tx = max(1, rate // 1000)
    committed: dict[int, float] = {}
    # SQLite has one writer at a time: concurrent transactions would only queue on its lock.
    limiter = anyio.CapacityLimiter(1 if db_url and "://" not in db_url else PUBLISHERS)
    async with Pipeline(mode, redis_url, db_url) as p:
        await p.start_consumer(n)

        async def one(first: int, count: int) -> None:
            async with limiter:
                at = await p.publish(first, count)
            for i in range(first, first + count):
                committed[i] = at

        start = time.monotonic()
        async with anyio.create_task_group() as tg:
            sent = 0
            while sent < n:
                due = min(n, math.ceil((time.monotonic() - start + TICK) * rate))
                while sent < due:
                    count = min(per_tx, due - sent)
                    tg.start_soon(one, sent, count)
                    sent += count
                await anyio.sleep(max(0.0, start + sent / rate - time.monotonic()))
        offered = n / (time.monotonic() - start)
        finished, _ = await p.results()
    assert sorted(finished) == list(range(n)), f"{mode}: {len(finished)} of {n} finished"
    lat = sorted((finished[i] - committed[i]) * 1000 for i in range(n))
    return {
        "p50": statistics.median(lat),
        "p99": lat[min(len(lat) - 1, int(len(lat) * 0.99))],
        "max": lat[-1],
        "offered": offered,
    }


# -- servers and tables ---------------------------------------------------------------------------


def load() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


async def main(options: Options, options_only: str = "") -> list[Table]:
    from tests.postgres_server import PostgresNotInstalled, PostgresServer
    from tests.redis_server import RedisServer

    n = QUICK_N if options.quick else N
    seconds = QUICK_SECONDS if options.quick else SECONDS
    tmp = Path(tempfile.mkdtemp(prefix="bench-durable-"))
    databases: dict[str, str | None] = {"naive": None, "sqlite": f"{tmp / 'bench.db'}"}
    pg: PostgresServer | None = None
    try:
        pg = PostgresServer(database="bench")
        pg.__enter__()
        databases["postgresql"] = pg.url()
    except (PostgresNotInstalled, RuntimeError) as exc:
        print(f"# PostgreSQL cases skipped: {exc}")
    cases: list[tuple[str, str, str | None]] = [("naive", "naive", None)]
    for db_name, db_url in databases.items():
        if db_url is not None:
            cases.append((f"durable {db_name}", "plain", db_url))
            cases.append((f"durable {db_name}, tx listener (one row), batched", "tx", db_url))
            cases.append(
                (f"durable {db_name}, tx listener (insert().values() per call)", "txv", db_url)
            )
            cases.append((f"durable {db_name}, tx listener (one row), tx_batch=1", "tx1", db_url))
    if options_only:
        cases = [c for c in cases if c[1] == "naive" or options_only in c[0]]
    maxima: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in cases}
    rates: dict[str, dict[str, Any]] = {}
    try:
        with RedisServer() as redis:
            for rnd in range(QUICK_ROUNDS if options.quick else ROUNDS):
                for label, mode, db_url in cases:
                    r = await run_max(
                        mode, redis.url, db_url, n // TX_SHARE if mode == "tx1" else n
                    )
                    maxima[label].append(r)
                    print(f"# round {rnd + 1}, {label}: {r['rate']:,.0f} events/s (load {load()})")
            for label, mode, db_url in cases:
                if mode in ("tx1", "txv"):
                    continue
                for rate in RATES[:1] if mode == "tx" else RATES:
                    r = await run_rate(mode, redis.url, db_url, rate, seconds)
                    rates[f"{label} @ {rate:,}/s"] = r
                    print(
                        f"# {label} @ {rate:,}/s: p50 {r['p50']:.1f} ms, p99 {r['p99']:.1f} ms "
                        f"(offered {r['offered']:,.0f}/s, load {load()})"
                    )
    finally:
        if pg is not None:
            pg.__exit__(None, None, None)
    base = "naive"
    throughput = Table("Max sustained throughput, commit to listener finished", unit="events/s")
    cost = Table("Cost per event of the max case", unit="us/event", ratio_header="vs naive")
    for label, samples in maxima.items():
        shown = "naive (XADD, XREADGROUP, XACK)" if label == base else label
        throughput.add(Row(shown, Stats(tuple(r["rate"] for r in samples))))
        cost.add(
            Row(
                label,
                Stats(
                    tuple(r["wall_per_event"] * 1e6 for r in samples),
                    tuple(r["cpu_per_event"] * 1e6 for r in samples),
                ),
                baseline=None if label == base else base,
                note="(cpu): both processes" if label == base else "",
            )
        )
    latency = Table("Latency at a fixed offered rate, commit to listener finished", unit="ms")
    for label, r in rates.items():
        latency.add(
            Row(
                label,
                Stats((r["p50"], r["p99"], r["max"])),
                note=f"p50 {r['p50']:.1f}, p99 {r['p99']:.1f}, offered {r['offered']:,.0f}/s",
            )
        )
    for table in (throughput, cost, latency):
        print()
        print(table.render())
    return [throughput, cost, latency]


def parse() -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer events, shorter rates")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write results")
    parser.add_argument("--only", default="", metavar="TEXT", help="cases whose label has TEXT")
    parser.add_argument(
        "--worker", choices=["naive", "plain", "tx", "txv", "tx1"], help=argparse.SUPPRESS
    )
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--redis", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    ns = parser.parse_args()
    return Options(quick=bool(ns.quick), json_path=ns.json), ns


if __name__ == "__main__":
    opts, ns = parse()
    if ns.worker:
        ns.mode = ns.worker
        asyncio.run(worker(ns))
    else:
        env = environment()
        print_environment(env)
        tables = anyio.run(main, opts, ns.only, backend="asyncio")
        finish("durable", tables, opts, env)
