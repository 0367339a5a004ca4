"""The task group of a running bus, opened by the task that enters the bus and closed by it
alone (``EventBus._start`` and ``_drain`` start and stop the bus's parts in it, in order).

Background work (the workers, a store's batch writer, the durable transport) runs in this
group. Closing runs the bus's drain shielded from cancellation, then cancels what still runs
in the group and leaves it; the exception that ended the ``async with`` block is not handed to
the group (which would wrap it in an ``ExceptionGroup``): it propagates as raised.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack

import anyio
from anyio.abc import TaskGroup

__all__ = ["TaskGroupHost"]


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
