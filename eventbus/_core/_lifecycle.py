"""Starting and stopping a bus: its parts in order, in a task group opened by the task that
enters the bus and closed by it alone.

Background work (the workers, a store's batch writer, the durable transport) runs in this
group. Closing runs the bus's drain shielded from cancellation, then cancels what still runs
in the group and leaves it; the exception that ended the ``async with`` block is not handed to
the group (which would wrap it in an ``ExceptionGroup``): it propagates as raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING

import anyio
from anyio.abc import TaskGroup

if TYPE_CHECKING:
    from ._bus import EventBus

__all__ = ["TaskGroupHost", "drain", "start"]


async def start(bus: EventBus, tg: TaskGroup) -> None:
    """Start the bus's parts in *tg*: the failure store, the workers, the way in from other
    threads, then the durable transport (whose refusal undoes the rest)."""
    await bus.failures.start(tg)
    bus._pool.start(tg, size=bus.queue_size, workers=bus.workers)
    bus._loop.open(tg)
    bus._thread = bus._loop.mark
    bus._nesting.running(True)
    if bus.durable is not None:
        try:
            await bus.durable.start(tg)
        except BaseException:  # refused (an evicting Redis, say): undo what started
            with anyio.CancelScope(shield=True):
                await drain(bus)
            raise


async def drain(bus: EventBus) -> None:
    """Stop the parts in the order that loses nothing: the durable transport (its dead
    deliveries go to the store), calls handed over from threads, the queue (the two within
    one grace period), then the failure store."""
    try:
        if bus.durable is not None:
            await bus.durable.aclose()
        deadline = anyio.current_time() + bus.shutdown_grace
        await bus._loop.close(bus.shutdown_grace)
        await bus._pool.drain(bus.shutdown_grace, within=max(0.0, deadline - anyio.current_time()))
        bus._sink.close()
        await bus.failures.aclose()
    finally:
        bus._pool.stopped()
        bus._nesting.running(False)  # first: emit() reads the mark only while running
        bus._loop.forget()
        bus._thread = None


class TaskGroupHost:
    """Holds the task group between ``__aenter__`` and ``__aexit__`` of its owner."""

    def __init__(self) -> None:
        self._stack: AsyncExitStack | None = None
        self._tg: TaskGroup | None = None
        self._owner: object = None  # id of the task that opened it

    @property
    def is_open(self) -> bool:
        return self._stack is not None

    async def open(self, start: Callable[[TaskGroup], Awaitable[None]]) -> None:
        """Open the group and run *start* with it; if *start* fails, cancel what it started
        already (the workers, a store's writer) and close the group again."""
        stack = AsyncExitStack()
        await stack.__aenter__()
        tg: TaskGroup | None = None
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            await start(tg)
        except BaseException:
            if tg is not None:
                tg.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)
            raise
        self._stack, self._tg = stack, tg
        self._owner = anyio.get_current_task().id

    def check_closer(self, owner: object) -> None:
        """:raises RuntimeError: if the current task is not the one that opened the group"""
        if anyio.get_current_task().id != self._owner:
            raise RuntimeError(
                f"aclose() of {owner!r} from another task than the one that entered it; "
                "close the bus in the task that entered it (its task group lives there)"
            )

    async def close(self, drain: Callable[[], Awaitable[None]]) -> None:
        """Run *drain* shielded, then cancel what is left in the group and leave it."""
        stack, self._stack = self._stack, None
        tg, self._tg = self._tg, None
        assert stack is not None and tg is not None
        try:
            with anyio.CancelScope(shield=True):
                await drain()
        finally:
            tg.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)
