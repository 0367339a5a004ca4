"""A failure store written against the Protocol before ``query(until=, offset=)`` and
``purge(ids=)`` existed keeps working wherever those are not used (the bus passes new keywords
only when they are given)."""

from __future__ import annotations

from datetime import datetime

import anyio
from anyio.abc import TaskGroup

from eventbus import EventBus, FailureRecord, FailureStatus, MemoryFailureStore
from eventbus.abc import FailureStore
from tests.eventbus.helpers import Flaky, OrderPaid, reg


class FirstReleaseStore:
    """The Protocol's methods with their first signatures (``correlation`` came with causality)."""

    def __init__(self) -> None:
        self.inner = MemoryFailureStore()

    def record(self, failure: FailureRecord) -> None:
        self.inner.record(failure)

    async def start(self, task_group: TaskGroup) -> None:
        await self.inner.start(task_group)

    async def flush(self) -> None:
        await self.inner.flush()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def query(
        self,
        *,
        status: FailureStatus | None = None,
        event: str | None = None,
        listener: str | None = None,
        since: datetime | None = None,
        limit: int | None = 100,
        correlation: str | None = None,
    ) -> list[FailureRecord]:
        return await self.inner.query(
            status=status,
            event=event,
            listener=listener,
            since=since,
            limit=limit,
            correlation=correlation,
        )

    async def get(self, failure_id: str) -> FailureRecord | None:
        return await self.inner.get(failure_id)

    async def update(self, failure: FailureRecord) -> None:
        await self.inner.update(failure)

    async def purge(
        self, *, status: FailureStatus | None = None, before: datetime | None = None
    ) -> int:
        return await self.inner.purge(status=status, before=before)


async def test_retries_run_on_a_store_of_the_first_protocol() -> None:
    store = FirstReleaseStore()
    assert isinstance(store, FailureStore)
    bus = EventBus(reg, store)  # narrowed by the isinstance() above
    flaky = Flaky()
    bus.on(OrderPaid, flaky, name="flaky")
    with anyio.fail_after(5):
        async with bus:
            bus.emit(OrderPaid(order_id=1, user_id=1))
            bus.emit(OrderPaid(order_id=2, user_id=1))
            newest, oldest = await store.query()
            flaky.failing = False
            by_id = await bus.retry_failures(ids=[oldest.id])
            rest = await bus.retry_failures()
    assert [(i.failure_id, i.result) for i in by_id.items] == [(oldest.id, "resolved")]
    assert [(i.failure_id, i.result) for i in rest.items] == [(newest.id, "resolved")]
