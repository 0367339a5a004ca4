"""How many views per second does one process ingest, and how long does a 100k-id flush take?

Ingestion: N views of distinct viewers over 10,000 articles (every view is fresh, the worst
case for the dedupe), counted four ways against Redis — naive (``SET NX EX`` then ``HINCRBY``,
two awaited round trips per view), pipelined (the same commands in pipelines of 1,000 views),
one Lua script per view (``domain.Counter`` without a window), and pre-aggregated
(``domain.Counter`` with a 200 ms window, batches of 5,000 sent as one script) — plus the
memory store. Flush: 100,000 pending ids staged, applied to SQLite as deltas in one
transaction with the ledger row, and dropped (``ArticleViews.flush``). Targets: at least
100,000 views/s pre-aggregated, and a 100k-id flush under 2 s.

Every case uses viewer keys of its own (a key another case used would be a rejected
duplicate, counting nothing), and every round asserts that all its views were counted: the
pending totals, read outside the timed part, grow by exactly the views it timed.

A throwaway ``redis-server`` is started on a free port; without one, the Redis rows print
``n/a (redis-server not installed)``.

Run::

    .venv/bin/python benchmarks/counters.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from domain.abc import CounterStore
from domain.backends.memory import MemoryCounterStore
from domain.backends.redis import RedisCounterStore
from domain.db import articles, create_tables
from domain.views import ArticleViews
from eventbus.backends.redis import make_redis_client
from tests.redis_server import RedisServer  # the test suite's throwaway server

REPEATS = 7  # samples of ~30 ms each: fewer swing by 1.5x between runs
QUICK_REPEATS = 1
WARMUP = 1
VIEWS = 10_000  # views per sample of the batched cases
VIEWS_PIPELINE = 4_000  # pipelined commands
VIEWS_SLOW = 1_000  # one or two round trips per view
QUICK_VIEWS, QUICK_VIEWS_PIPELINE, QUICK_VIEWS_SLOW = 5_000, 2_000, 500
ARTICLES = 10_000
FLUSH_IDS = 100_000
FLUSH_REPEATS, QUICK_FLUSH_REPEATS = 2, 1
PIPELINE = 1_000
WINDOW, BATCH = 0.2, 5_000
YIELD_EVERY = 100  # view_nowait cases yield to the event loop this often
TARGET_VIEWS_PER_S = 100_000
TARGET_FLUSH_S = 2.0

Sample = Callable[[int, int], Awaitable[None]]  # (round, n) -> runs n views
Count = Callable[[], Awaitable[int]]  # views counted so far (read outside the timing)


@dataclasses.dataclass(frozen=True)
class Case:
    run: Sample
    n: int
    counted: Count


# -- ingestion workloads ------------------------------------------------------------------------


def naive(redis: Redis, n: int) -> Case:
    """Two awaited round trips per view: SET NX EX, then HINCRBY when fresh."""

    async def run(rnd: int, n: int) -> None:
        for i in range(n):
            item = i % ARTICLES
            if await redis.set(f"bn:seen:{item}:r{rnd}v{i}", 1, nx=True, ex=600):
                await redis.hincrby(f"bn:pending:{item % 16}", str(item), 1)

    return Case(run, n, hash_total(redis, "bn:pending:"))


def pipelined(redis: Redis, n: int) -> Case:
    """The same commands in pipelines of PIPELINE views: two round trips per pipeline."""

    async def run(rnd: int, n: int) -> None:
        for start in range(0, n, PIPELINE):
            items = [i % ARTICLES for i in range(start, min(n, start + PIPELINE))]
            async with redis.pipeline(transaction=False) as pipe:
                for k, item in enumerate(items):
                    pipe.set(f"bp:seen:{item}:r{rnd}v{start + k}", 1, nx=True, ex=600)
                fresh = await pipe.execute()
            async with redis.pipeline(transaction=False) as pipe:
                for item, ok in zip(items, fresh, strict=True):
                    if ok:
                        pipe.hincrby(f"bp:pending:{item % 16}", str(item), 1)
                await pipe.execute()

    return Case(run, n, hash_total(redis, "bp:pending:"))


def counter_nowait(store: CounterStore, engine: AsyncEngine, n: int, *, tag: str) -> Case:
    """``ArticleViews.view_nowait`` per view (a request handler yields on its own)."""

    async def run(rnd: int, n: int) -> None:
        views = ArticleViews(store, engine, window=WINDOW, max_batch=BATCH)
        async with views:
            for i in range(n):
                views.view_nowait(i % ARTICLES, f"{tag}{rnd}-{i}")
                if i % YIELD_EVERY == 0:
                    await asyncio.sleep(0)

    return Case(run, n, pending_total(store))


def counter(
    store: CounterStore, engine: AsyncEngine, window: float | None, n: int, *, tag: str
) -> Case:
    """``ArticleViews.view`` per view; with a window, sent in batches and on close."""

    async def run(rnd: int, n: int) -> None:
        views = ArticleViews(store, engine, window=window, max_batch=BATCH)
        async with views:
            for i in range(n):
                await views.view(i % ARTICLES, f"{tag}{rnd}-{i}")

    return Case(run, n, pending_total(store))


def pending_total(store: CounterStore) -> Count:
    async def count() -> int:
        return sum((await store.pending("views")).values())

    return count


def hash_total(redis: Redis, prefix: str) -> Count:
    async def count() -> int:
        async with redis.pipeline(transaction=False) as pipe:
            for b in range(16):
                pipe.hvals(f"{prefix}{b}")
            shards = await pipe.execute()
        return sum(int(v) for shard in shards for v in shard)

    return count


def build_cases(
    client: Redis | None, engine: AsyncEngine, mem: CounterStore, fast: int, pipe: int, slow: int
) -> dict[str, Case | None]:
    """Every ingestion case, each with viewer keys of its own (``tag``); Redis ones need
    *client* (``None``: not measured). *fast*, *pipe*, *slow*: views per round."""
    cases: dict[str, Case | None] = dict.fromkeys(
        [
            "redis naive (2 RTT/view)",
            "redis pipelined (1000/pipe)",
            "redis script per view",
            "redis pre-aggregated, await view",
            "redis pre-aggregated, view_nowait",
        ]
    )
    if client is not None:
        rs = RedisCounterStore(client)
        cases = {
            "redis naive (2 RTT/view)": naive(client, slow),
            "redis pipelined (1000/pipe)": pipelined(client, pipe),
            "redis script per view": counter(rs, engine, None, slow, tag="rs"),
            "redis pre-aggregated, await view": counter(rs, engine, WINDOW, fast, tag="ra"),
            "redis pre-aggregated, view_nowait": counter_nowait(rs, engine, fast, tag="rn"),
        }
    return cases | {
        "memory per view": counter(mem, engine, None, fast, tag="ms"),
        "memory pre-aggregated, await view": counter(mem, engine, WINDOW, fast, tag="ma"),
        "memory pre-aggregated, view_nowait": counter_nowait(mem, engine, fast, tag="mn"),
    }


async def measure(cases: dict[str, Case | None], repeats: int) -> dict[str, list[float] | None]:
    """Views per second of each case, round-robin over the rounds (the first is a warm-up).

    :raises AssertionError: if a round counted fewer (or more) views than it timed
    """
    out: dict[str, list[float] | None] = {k: (None if c is None else []) for k, c in cases.items()}
    for rnd in range(WARMUP + repeats):
        for label, case in cases.items():
            if case is None:
                continue
            before = await case.counted()
            start = time.perf_counter()
            await case.run(rnd, case.n)
            rate = case.n / (time.perf_counter() - start)
            counted = await case.counted() - before
            assert counted == case.n, f"{label}: round {rnd} counted {counted:,} of {case.n:,}"
            samples = out[label]
            if rnd >= WARMUP and samples is not None:
                samples.append(rate)
    return out


# -- flush ------------------------------------------------------------------------------------


async def flush_seconds(store: CounterStore, engine: AsyncEngine, repeats: int) -> list[float]:
    """Seconds to flush FLUSH_IDS pending ids (the fill is not timed)."""
    views = ArticleViews(store, engine)
    times = []
    for _ in range(repeats):
        for start in range(0, FLUSH_IDS, 20_000):
            hits = [(str(i), None) for i in range(start + 1, start + 20_001)]
            await store.record("views", hits, dedupe_ttl=600)
        start_t = time.perf_counter()
        report = await views.flush()
        times.append(time.perf_counter() - start_t)
        assert (report.applied, report.items, report.total) == (1, FLUSH_IDS, FLUSH_IDS), report
    return times


# -- output -----------------------------------------------------------------------------------


def render(title: str, unit: str, rows: list[dict[str, Any]]) -> str:
    head = f"{'case':<34} {'median':>12} {'min':>12} {'max':>12} {'ratio':>8}"
    lines = [f"== {title} ({unit}) ==", head, "-" * len(head)]
    for r in rows:
        if r["median"] is None:
            lines.append(f"{r['label']:<34} {'n/a (' + r['note'] + ')':>12}")
            continue
        ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
        fmt = "{:>12,.0f}" if unit == "views/s" else "{:>12.3f}"
        cells = " ".join(fmt.format(r[k]) for k in ("median", "min", "max"))
        lines.append(f"{r['label']:<34} {cells} {ratio:>8}")
    return "\n".join(lines)


def row(
    label: str, samples: list[float] | None, base: list[float] | None, note: str = ""
) -> dict[str, Any]:
    if samples is None:
        return {
            "label": label,
            "median": None,
            "min": None,
            "max": None,
            "ratio": None,
            "note": note,
        }
    med = statistics.median(samples)
    ratio = None if base is None else med / statistics.median(base)
    return {"label": label, "median": med, "min": min(samples), "max": max(samples),
            "ratio": ratio, "samples": samples, "note": note}  # fmt: skip


async def main_async(quick: bool) -> dict[str, Any]:
    repeats = QUICK_REPEATS if quick else REPEATS
    n_fast, n_pipe, n_slow = (
        (QUICK_VIEWS, QUICK_VIEWS_PIPELINE, QUICK_VIEWS_SLOW)
        if quick
        else (VIEWS, VIEWS_PIPELINE, VIEWS_SLOW)
    )
    tmp = tempfile.mkdtemp(prefix="bench-counters-")
    engine = create_async_engine(f"sqlite+aiosqlite:///{tmp}/bench.db")
    await create_tables(engine)
    async with engine.begin() as conn:
        await conn.execute(
            insert(articles), [{"id": i, "title": "t"} for i in range(FLUSH_IDS + 1)]
        )
    server = RedisServer() if shutil.which("redis-server") else None
    if server is not None:
        server.start()
    client = (
        None
        if server is None
        else make_redis_client(server.url, decode_responses=True, socket_timeout=10)
    )
    na = "redis-server not installed"
    try:
        cases = build_cases(client, engine, MemoryCounterStore(), n_fast, n_pipe, n_slow)
        rates = await measure(cases, repeats)
        if client is not None:
            await client.flushall()
        base = rates["redis naive (2 RTT/view)"]
        ingest = [row(k, v, base, "" if v is not None else na) for k, v in rates.items()]
        f_repeats = QUICK_FLUSH_REPEATS if quick else FLUSH_REPEATS
        mem_flush = await flush_seconds(MemoryCounterStore(), engine, f_repeats)
        # a new store after the FLUSHALL above (the old one would report its counts as lost)
        red_flush = (
            None
            if client is None
            else await flush_seconds(RedisCounterStore(client), engine, f_repeats)
        )
        flush = [
            row("memory store -> SQLite", mem_flush, None),
            row("redis store -> SQLite", red_flush, mem_flush, "" if red_flush else na),
        ]
    finally:
        if client is not None:
            await client.aclose()
        if server is not None:
            server.cleanup()
        await engine.dispose()
        shutil.rmtree(tmp, ignore_errors=True)
    print(render(f"ingestion: views/s in one process ({repeats} rounds)", "views/s", ingest))
    print()
    print(render(f"flush of {FLUSH_IDS:,} pending ids ({f_repeats} rounds)", "s", flush))
    pre = rates["redis pre-aggregated, view_nowait"] or rates["memory pre-aggregated, view_nowait"]
    rate_ok = pre is not None and statistics.median(pre) >= TARGET_VIEWS_PER_S
    worst = max(statistics.median(red_flush or mem_flush), statistics.median(mem_flush))
    print(f"\ntarget >= {TARGET_VIEWS_PER_S:,} views/s pre-aggregated: {_verdict(rate_ok)}")
    print(f"target 100k-id flush < {TARGET_FLUSH_S} s: {_verdict(worst < TARGET_FLUSH_S)}")
    return {"ingestion": ingest, "flush": flush}


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer and smaller samples")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    args = parser.parse_args()
    started = time.monotonic()
    print(f"# {datetime.now(UTC):%Y-%m-%d %H:%M} UTC | {platform.processor() or platform.machine()}"
          f", {os.cpu_count()} cores | Python {platform.python_version()}")  # fmt: skip
    tables = asyncio.run(main_async(args.quick))
    took = time.monotonic() - started
    print(f"# counters: {took:.1f} s{' (--quick)' if args.quick else ''}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        data = {"script": "counters", "quick": args.quick, "seconds": round(took, 1), **tables}
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
