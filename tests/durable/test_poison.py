"""Poison isolation with real processes: a listener that ends (or stalls) its process on one
event among 20 read together. Its batch-mates must not be charged for its crashes: each is
handled once and none is dead-lettered; the poison is dead after ``max_deliveries`` calls,
and its dead letter says why."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from eventbus import FailureStatus
from eventbus.backends.sql import SqlFailureStore
from eventbus.durable import DeliveriesExhaustedError
from tests.durable.conftest import App, call_rows, effect_rows

pytestmark = pytest.mark.slow

Apps = Callable[..., Awaitable[App]]
POISON = 5


async def _dead_rows(store: SqlFailureStore) -> int:
    try:
        return len(await store.query(status=FailureStatus.DEAD))
    except sa.exc.OperationalError:  # the table is created with the first record
        return 0


@pytest.mark.parametrize("kind", ["poison", "hang"])
async def test_a_crash_looping_entry_dies_alone_and_its_batch_mates_are_handled_once(
    apps: Apps, engine: AsyncEngine, db_url: str, calls_file: Path, kind: str
) -> None:
    """Regression test: each restart reclaimed the whole batch, so the batch-mates' delivery
    counts grew with the poison's and they ended dead without ever failing."""
    common = (
        "--listener", f"grant={kind}:{POISON}", "--max-deliveries", "3",
        "--concurrency", "8", "--visibility", "1",
    )  # fmt: skip
    store = SqlFailureStore(db_url, create_table=False)
    current = await apps(*common, "--publish", "20", ready=None)
    started = 1
    try:
        with anyio.fail_after(90):
            while True:
                poison_calls = _calls_of(calls_file, POISON)
                if await _dead_rows(store) and len(await effect_rows(engine)) >= 19:
                    break
                if poison_calls >= started:  # it hit the poison (ended, or stalls): a
                    current = await apps(*common, ready=None)  # supervisor starts another
                    started += 1
                await anyio.sleep(0.05)
        dead = await store.query(status=FailureStatus.DEAD)
    finally:
        await store.aclose()
    if current.proc.returncode is None:
        await current.stop()
    [rec] = dead
    assert rec.event_id == _event_of(calls_file, POISON)
    assert _calls_of(calls_file, POISON) == 3
    effects = Counter(row.order_id for row in await effect_rows(engine))
    assert effects == Counter(i for i in range(20) if i != POISON)  # each once
    assert rec.error_type.endswith(DeliveriesExhaustedError.__qualname__)
    assert rec.attempts == 3
    assert "while it ran, 3 times" in rec.message


def _calls_of(path: Path, order_id: int) -> int:
    return sum(1 for c in call_rows(path) if c.order_id == order_id)


def _event_of(path: Path, order_id: int) -> str:
    return next(c.event_id for c in call_rows(path) if c.order_id == order_id)
