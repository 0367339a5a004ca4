"""The tasks of a started durable transport: a consumer per durable listener, the relay and
the janitor (its sweeps and its inbox purge), run in a task group of their own inside the
caller's, and stopped in order.

Split from :mod:`eventbus.durable._streams`: ``RedisStreams`` checks, creates and announces;
:class:`Tasks` runs and stops.
"""

from __future__ import annotations

from collections.abc import Iterable

import anyio
from anyio.abc import TaskGroup, TaskStatus

from ._consumer import Consumer
from ._group import Group
from ._janitor import Janitor
from ._listener import DurableListener
from ._relay import Relay
from ._runtime import Runtime

__all__ = ["Tasks"]


class Tasks:
    """Runs one transport's consumers, relay and janitor between :meth:`start` and
    :meth:`stop`; what they counted stays readable after (``statistics()``)."""

    def __init__(self, rt: Runtime, relay: Relay | None) -> None:
        self.rt = rt
        self.relay = relay
        self.consumers: list[Consumer] = []
        self.janitor = Janitor(rt, [])
        self._tg: TaskGroup | None = None
        self._scope: anyio.CancelScope | None = None
        self._stopped = anyio.Event()

    async def start(self, task_group: TaskGroup, listeners: Iterable[DurableListener]) -> None:
        """Start a consumer for each of *listeners*, then the relay and the janitor, in
        *task_group*; return once every consumer reads."""
        self._stopped = anyio.Event()
        self.consumers.clear()  # statistics() keeps reporting the last run's until now
        self.janitor.groups.clear()
        await task_group.start(self._run, listeners)

    async def _run(
        self, listeners: Iterable[DurableListener], *, task_status: TaskStatus[None]
    ) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with anyio.create_task_group() as tg:
                    self._tg = tg
                    for listener in listeners:
                        await self.add(listener)
                    if self.relay is not None:
                        tg.start_soon(self.relay.run)
                    tg.start_soon(self.janitor.run)
                    tg.start_soon(self.janitor.purge_inbox_loop)
                    task_status.started()
        finally:
            self._stopped.set()

    def add_soon(self, listener: DurableListener) -> None:
        """Start a consumer for a listener subscribed while running."""
        assert self._tg is not None
        self._tg.start_soon(self.add, listener)

    async def add(self, listener: DurableListener) -> None:
        assert self._tg is not None
        group = Group(self.rt, listener)
        consumer = Consumer(group)
        await consumer.prepare()
        self.consumers.append(consumer)
        self.janitor.groups.append(group)
        await self._tg.start(consumer.run)

    async def stop(self, grace: float) -> int:
        """Stop reading; calls in flight get *grace*, then are cancelled without
        acknowledgement; the relay finishes its batch (within the same grace); then every task
        is cancelled. Return how many calls were cut short."""
        unfinished = 0

        async def stop(consumer: Consumer) -> None:
            nonlocal unfinished
            unfinished += await consumer.stop(grace)

        async with anyio.create_task_group() as tg:
            for consumer in self.consumers:
                tg.start_soon(stop, consumer)
        if self.relay is not None:
            await self.relay.stop(grace)
        assert self._scope is not None
        self._scope.cancel()
        await self._stopped.wait()
        return unfinished
