"""Rolling deploys with real processes on one Redis and one SQLite file: publishers and
consumers that declare different versions of ``order.paid`` (``tests.durable.versions_app``).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus.durable._tables import outbox
from tests.durable.conftest import ROOT, App, wait_until

pytestmark = pytest.mark.slow

STREAM = "eventbus:evt:{order.paid}"
Start = Callable[..., Awaitable[App]]


@pytest.fixture
async def start(
    redis_url: str, db_url: str, calls_file: Path, tmp_path: Path
) -> AsyncIterator[Start]:
    """Start ``versions_app`` processes (stderr to ``tmp_path/<n>.err``); killed at the end."""
    started: list[App] = []

    async def run(*args: str) -> App:
        argv = [sys.executable, "-m", "tests.durable.versions_app", "--redis", redis_url]
        argv += ["--db", db_url, "--calls", str(calls_file), *args]
        err = tmp_path / f"{len(started)}.err"
        with err.open("wb") as stderr:
            proc = await anyio.open_process(argv, cwd=ROOT, stderr=stderr)
        app = App(proc, argv)
        app.err = err  # type: ignore[attr-defined]
        started.append(app)
        await app.expect("ready", within=30)
        return app

    yield run
    for app in started:
        app.kill()
        with anyio.move_on_after(10):
            await app.proc.wait()
        await app.proc.aclose()


def calls(path: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def handled_once(path: Path, n: int) -> bool:
    seen = Counter(c["event_id"] for c in calls(path))
    return len(seen) == n


def assert_once_none_dead(path: Path, n: int, stats: dict[str, Any]) -> None:
    seen = Counter(c["event_id"] for c in calls(path))
    assert len(seen) == n and set(seen.values()) == {1}
    assert [g["dead"] for g in stats["groups"]] == [0]


@pytest.mark.parametrize(("publisher", "consumer"), [(2, 1), (1, 2)])
async def test_a_rolling_deploy_in_either_order_loses_nothing(
    start: Start, calls_file: Path, publisher: int, consumer: int
) -> None:
    reader = await start("--version", str(consumer), "--listener", "grant")
    writer = await start("--version", str(publisher), "--publish", "10")
    await wait_until(lambda: handled_once(calls_file, 10), what="10 events handled")
    await writer.stop()
    stats = await reader.stop()
    assert_once_none_dead(calls_file, 10, stats)
    fields = [c["fields"] for c in calls(calls_file)]
    if consumer == 1:  # the new field is ignored, and counted
        assert all(f.keys() == {"order_id"} for f in fields)
        assert stats["ignored_fields"] == [
            {"event": "order.paid", "field": "currency", "count": 10}
        ]
    else:  # the missing field takes its default
        assert all(f["currency"] == "EUR" for f in fields)
        assert stats["ignored_fields"] == []


async def test_a_v3_consumer_reads_v1_rows_replayed_from_the_outbox(
    start: Start, calls_file: Path, engine: AsyncEngine, client: Redis
) -> None:
    writer = await start("--version", "1", "--publish", "6")

    async def all_published() -> bool:
        async with engine.connect() as conn:
            rows = (await conn.execute(sa.select(outbox.c.published_at))).all()
        return len(rows) == 6 and all(r[0] is not None for r in rows)

    await wait_until(all_published, what="the outbox rows published")
    await writer.stop()
    async with engine.begin() as conn:  # half of them written before versions existed
        await conn.execute(sa.update(outbox).where(outbox.c.id <= 3).values(event_version=None))
    await client.delete(STREAM)  # trimmed long ago: only the outbox holds them
    reader = await start("--version", "3", "--listener", "audit", "--backfill", "audit")
    await wait_until(lambda: handled_once(calls_file, 6), what="6 replayed events handled")
    stats = await reader.stop()
    assert_once_none_dead(calls_file, 6, stats)
    got = sorted((c["fields"]["order_id"], c["fields"]["currency"], c["fields"]["cents"])
                 for c in calls(calls_file))  # fmt: skip
    assert got == [(i, "EUR", i * 100) for i in range(6)]  # through both upcasters


async def test_a_version_it_cannot_read_stays_pending_until_a_new_consumer_takes_it(
    start: Start, calls_file: Path, client: Redis
) -> None:
    old = await start(
        "--version", "1", "--strict", "--listener", "grant", "--max-deliveries", "1",
        "--progress", "0.1",
    )  # fmt: skip
    writer = await start("--version", "2", "--strict", "--publish", "3")
    await writer.stop()

    async def held_twice_each() -> bool:  # came back after a reclaim, held again, not dead
        line = await old.line()
        if not line.startswith("progress "):
            return False
        [group] = json.loads(line[9:])["groups"]
        assert group["dead"] == 0 and group["succeeded"] == 0
        return bool(group["held"] >= 6)

    await wait_until(held_twice_each, what="each entry held twice", within=20)
    await old.stop()
    pending = await client.xpending(STREAM, "svc:grant")
    assert pending["pending"] == 3
    warnings = [ln for ln in old.err.read_text().splitlines() if "stored at version 2" in ln]  # type: ignore[attr-defined]
    assert len(warnings) == 1 and "deploy that version" in warnings[0]
    assert calls(calls_file) == []

    new = await start("--version", "2", "--strict", "--listener", "grant")
    await wait_until(lambda: handled_once(calls_file, 3), what="the held events handled")
    stats = await new.stop()
    assert_once_none_dead(calls_file, 3, stats)
    assert {c["fields"]["currency"] for c in calls(calls_file)} == {"USD"}
