"""The work the loop starts (fires, skip records, catch-up), counted so that it can be waited
for: by the shutdown grace, and by tests on a virtual clock, which cannot see I/O."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from anyio.abc import TaskGroup

__all__ = ["TaskTracker"]


class TaskTracker:
    """Starts tasks in ``tg`` (set while the scheduler runs) and counts the unfinished."""

    def __init__(self) -> None:
        self.tg: TaskGroup | None = None
        self.busy = 0
        self._quiet: anyio.Event | None = None

    def spawn(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        assert self.tg is not None
        self.busy += 1
        self.tg.start_soon(self._tracked, fn, *args)

    async def _tracked(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        try:
            await fn(*args)
        finally:
            self.busy -= 1
            if not self.busy and self._quiet is not None:
                self._quiet.set()

    async def wait_idle(self) -> None:
        while self.busy:
            if self._quiet is None or self._quiet.is_set():
                self._quiet = anyio.Event()
            await self._quiet.wait()
