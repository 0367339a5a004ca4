"""The pages that read the failure store, while it cannot write: a SQLite file another
connection holds write-locked, a PostgreSQL server paused (``SIGSTOP``)."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from eventbus import EventBus
from eventbus.backends.sql import SqlFailureStore
from tests.console_support import login, text
from tests.eventbus.console.conftest import Invoicer, console_client
from tests.eventbus.helpers import OrderPaid, reg
from tests.postgres_server import PostgresServer

BANNER = "the failure store is unavailable: 3 records waiting"


@pytest.fixture
def sql_bus(tmp_path: Path, invoicer: Invoicer) -> EventBus:
    # a short busy timeout and backoff: the lock is an outage within milliseconds
    store = SqlFailureStore(
        tmp_path / "failures.db", busy_timeout=0.02, retry_backoff=0.01, max_backoff=0.05
    )
    bus = EventBus(reg, store, retry_backoff=0)
    bus.on(OrderPaid, invoicer, name="tests:invoice")
    return bus


async def test_the_pages_answer_with_a_banner_while_the_store_cannot_write(
    sql_bus: EventBus, tmp_path: Path
) -> None:
    """Regression test: the Overview, Failures, failure and Bus pages awaited the store's
    ``flush()``, which waits for the database: while it could not write they never answered.
    Each page is read at the same time, so the test waits for one deadline (2 s), not four."""
    store = sql_bus.failures
    assert isinstance(store, SqlFailureStore)
    async with console_client(sql_bus) as (client, _console):
        sql_bus.emit(OrderPaid(order_id=1, user_id=2))
        [rec] = await store.query()  # written: the table exists
        csrf = await login(client)
        blocker = sqlite3.connect(tmp_path / "failures.db", isolation_level=None)
        try:
            blocker.execute("BEGIN EXCLUSIVE")  # WAL: readers read, no writer writes
            for n in range(2, 5):
                sql_bus.emit(OrderPaid(order_id=n, user_id=2))
            with anyio.fail_after(5):
                while not store.statistics().outage:  # noqa: ASYNC110 - no event for it
                    await anyio.sleep(0.005)
            paths = ["/ops/", "/ops/failures", f"/ops/failures/{rec.id}", "/ops/bus"]
            pages = await _get_all(client, paths)
            with anyio.fail_after(15):  # an action is refused before it does anything
                retried = await client.post("/ops/failures/retry", data={"csrf": csrf})
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert {p: r.status_code for p, r in pages.items()} == {
            "/ops/": 200,
            "/ops/failures": 503,
            f"/ops/failures/{rec.id}": 503,
            "/ops/bus": 200,
        }
        for path, page in pages.items():
            assert BANNER in text(page), path
        assert "Listeners per event" in pages["/ops/bus"].text  # the rest of the page is there
        assert retried.status_code == 503 and BANNER in text(retried)
        assert "No failure matches" not in pages["/ops/failures"].text  # it may well match
        await store.flush()  # the lock is gone: the records are written, the banner too
        for path, page in (await _get_all(client, paths)).items():
            assert page.status_code == 200, path
            assert "unavailable" not in page.text, path
        assert len(await store.query()) == 4


async def test_the_pages_answer_with_a_banner_while_postgresql_is_paused(
    postgres_server: PostgresServer, postgres_url: str, invoicer: Invoicer, tmp_path: Path
) -> None:
    """Regression test: with PostgreSQL stopped, the pages gave no answer in 8 s. Paused,
    the writer's insert and the pages' queries hang on their sockets (no error at all)."""
    store = SqlFailureStore(postgres_url, spill_path=tmp_path / "spill.jsonl")
    bus = EventBus(reg, store, retry_backoff=0)
    bus.on(OrderPaid, invoicer, name="tests:invoice")
    async with console_client(bus) as (client, _console):
        bus.emit(OrderPaid(order_id=1, user_id=2))
        [rec] = await store.query()
        await login(client)
        paths = ["/ops/", "/ops/failures", f"/ops/failures/{rec.id}", "/ops/bus"]
        with paused(postgres_server):
            for n in range(2, 5):
                bus.emit(OrderPaid(order_id=n, user_id=2))
            pages = await _get_all(client, paths)
        assert [pages[p].status_code for p in paths] == [200, 503, 503, 200]
        for path, page in pages.items():
            assert BANNER in text(page), path
        await store.flush()
        assert len(await store.query()) == 4


@contextmanager
def paused(server: PostgresServer) -> Iterator[None]:
    """Every process of *server* stopped (``SIGSTOP``) in the block, as behind a network
    that drops everything; resumed on exit. The postmaster forks nothing meanwhile."""
    master = int((server.data / "postmaster.pid").read_text().split()[0])
    pids = [master] + [
        int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _parent(p) == master
    ]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def _parent(proc: Path) -> int | None:
    try:
        stat = (proc / "stat").read_text()
    except OSError:  # gone meanwhile, or not ours to read
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state


async def _get_all(client: httpx.AsyncClient, paths: list[str]) -> dict[str, httpx.Response]:
    pages: dict[str, httpx.Response] = {}

    async def get(path: str) -> None:
        pages[path] = await client.get(path)

    with anyio.fail_after(15):
        async with anyio.create_task_group() as tg:
            for path in paths:
                tg.start_soon(get, path)
    return pages
