"""The pre-aggregation window of :class:`domain.counters.Counter`: closing and a store that fails.

These tests do no SQL or Redis I/O (the engine is only built, never connected), so they run on
trio with a mock clock: windows pass in virtual time.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import anyio
import pytest
from anyio import wait_all_tasks_blocked
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from trio.testing import MockClock

from domain.abc import Hit
from domain.backends.memory import MemoryCounterStore
from domain.counters import Counter
from domain.db import articles


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, object]]:
    return ("trio", {"clock": MockClock(autojump_threshold=0)})


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[AsyncEngine]:
    """Built for its dialect only: a counter compiles its SQL at construction."""
    yield create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/never-opened.db")


class GatedStore(MemoryCounterStore):
    """A memory store whose ``record`` waits for :attr:`release`, then fails while ``down``."""

    def __init__(self, *, gated: bool = False, down: bool = False) -> None:
        super().__init__()
        self.gated = gated
        self.down = down
        self.entered = anyio.Event()
        self.release = anyio.Event()
        self.calls = 0

    async def record(self, counter: str, hits: Sequence[Hit], *, dedupe_ttl: float) -> int:
        self.calls += 1
        if self.gated:
            self.entered.set()
            await self.release.wait()
        if self.down:
            raise ConnectionError("store down")
        return await super().record(counter, hits, dedupe_ttl=dedupe_ttl)


def counter(store: GatedStore, engine: AsyncEngine, **options: float) -> Counter:
    return Counter(store, engine, name="views", column=articles.c.view_count, **options)  # type: ignore[arg-type]


async def test_closing_while_a_send_is_in_progress_keeps_the_batch(engine: AsyncEngine) -> None:
    """Regression test: closing the counter cancelled the window task inside ``store.record``
    and the batch being sent vanished without being counted in ``lost``."""
    store = GatedStore(gated=True)
    views = counter(store, engine, window=3600, max_batch=5)

    async def release_once_closing() -> None:
        await wait_all_tasks_blocked()  # __aexit__ is now waiting for the send
        store.release.set()

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            async with views:
                for _ in range(5):
                    views.hit_nowait(1)  # a full batch: sent at once
                await store.entered.wait()
                views.hit_nowait(2)  # buffered while the send is in progress
                tg.start_soon(release_once_closing)
    assert await store.pending("views") == {"1": 5, "2": 1}
    assert views.lost == 0


async def test_a_failed_send_is_kept_and_retried_at_the_next_window(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: one failed send dropped its whole batch although ``max_buffer``
    promised to keep hits while the store is unreachable."""
    store = GatedStore(down=True)
    views = counter(store, engine, window=1.0)
    with anyio.fail_after(60):
        async with views:
            for _ in range(3):
                views.hit_nowait(1)
            await anyio.sleep(1.5)  # one window: the send failed
            assert store.calls == 1
            assert await store.pending("views") == {}
            views.hit_nowait(2)
            store.down = False
            await anyio.sleep(2.0)  # the back-off window, then the retry
            assert await store.pending("views") == {"1": 3, "2": 1}
    assert views.lost == 0
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


async def test_a_down_store_is_retried_once_per_window_even_when_the_buffer_is_full(
    engine: AsyncEngine,
) -> None:
    """Regression test: a requeued full batch must not make every new hit resend at once."""
    store = GatedStore(down=True)
    views = counter(store, engine, window=1.0, max_batch=2)
    with anyio.fail_after(60):
        async with views:
            for _ in range(100):
                views.hit_nowait(1)
                await anyio.sleep(0.1)  # 10 s of hits, each over a full buffer
            # one failed send, then one window of back-off: about one send a second, not one
            # per hit
            assert store.calls <= 11
            store.down = False
    assert await store.pending("views") == {"1": 100}
    assert views.lost == 0


async def test_what_exceeds_max_buffer_after_a_failed_send_is_lost_and_logged(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    """Regression test: the failed batch goes back in front, capped at ``max_buffer``."""
    store = GatedStore(gated=True, down=True)
    views = counter(store, engine, window=3600, max_batch=3, max_buffer=5)
    with anyio.fail_after(5):
        async with views:
            for _ in range(3):
                views.hit_nowait(1)  # a full batch: sent at once, and it will fail
            await store.entered.wait()
            for _ in range(4):
                views.hit_nowait(2)  # arrived during the send: the buffer holds 4 of 5
            store.release.set()
            await wait_all_tasks_blocked()
            assert views.lost == 2  # room for 1 of the 3 failed hits
            store.down = False
    assert await store.pending("views") == {"1": 1, "2": 4}
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "lost 2 hits" in error.getMessage()


async def test_closing_while_the_store_is_down_counts_the_rest_as_lost(
    engine: AsyncEngine, caplog: pytest.LogCaptureFixture
) -> None:
    store = GatedStore(down=True)
    views = counter(store, engine, window=3600)
    with anyio.fail_after(5):
        async with views:
            for _ in range(4):
                views.hit_nowait(1)
    assert views.lost == 4
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "lost 4 hits" in error.getMessage()
