"""The background side of the bus: the bounded queue, its worker tasks, and shutdown.

``emit()`` hands async listeners to the queue; ``async with bus:`` starts the workers and, on
exit, waits ``shutdown_grace`` for queued work, then cancels it and records what was cut short.
"""

from __future__ import annotations

import contextvars
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ._dispatch import Emission
from ._events import Event
from ._exceptions import ListenerDroppedError, ListenerShutdownError
from ._failures import FailureRecord
from ._listeners import Listener

if TYPE_CHECKING:
    from .abc import FailureStore

__all__ = ["Job", "Workers"]


class Job:
    """A queued async call; its attempts and last error survive a shutdown that cuts it short."""

    __slots__ = ("attempts", "emission", "last_error", "listener", "scope")

    def __init__(self, listener: Listener, emission: Emission) -> None:
        self.listener = listener
        self.emission = emission
        self.attempts = 0
        self.last_error: BaseException | None = None
        self.scope: anyio.CancelScope | None = None


class Workers:
    """Queue, workers and shutdown of the bus (a mixin of :class:`EventBus`)."""

    if TYPE_CHECKING:
        failures: FailureStore
        queue_size: int
        workers: int
        shutdown_grace: float
        _running: bool
        _closing: bool
        _owner: object
        _send: MemoryObjectSendStream[Job] | None
        _leftovers: MemoryObjectReceiveStream[Job] | None
        _in_flight: set[Job]
        _stack: AsyncExitStack | None
        _workers_done: anyio.Event | None
        _worker_scope: anyio.CancelScope | None
        _tg: TaskGroup | None
        _dropped: int

        def _record(
            self, event: Event, event_id: str, listener: str, exc: BaseException, attempts: int
        ) -> FailureRecord: ...

        def _enter_hop(self, depth: int) -> contextvars.Token[int]: ...

        def _leave_hop(self, token: contextvars.Token[int]) -> None: ...

        async def _call_async(
            self, sub: Listener, emission: Emission, job: Job | None = None
        ) -> tuple[BaseException | None, Any, FailureRecord | None]: ...

    def _enqueue(self, sub: Listener, emission: Emission) -> None:
        if self._send is None or not self._running:
            self._dropped += 1
            self._record(
                emission.event,
                emission.event_id,
                sub.name,
                ListenerDroppedError(sub.name, "the bus is shutting down"),
                0,
            )
            return
        try:
            self._send.send_nowait(Job(sub, emission))
        except anyio.WouldBlock:
            self._dropped += 1
            self._record(
                emission.event,
                emission.event_id,
                sub.name,
                ListenerDroppedError(sub.name, f"queue full ({self.queue_size} waiting)"),
                0,
            )

    async def __aenter__(self) -> Self:
        if self._running or self._stack is not None:
            raise RuntimeError("this bus is already running; enter 'async with bus:' once")
        stack = AsyncExitStack()
        await stack.__aenter__()
        try:
            tg = await stack.enter_async_context(anyio.create_task_group())
            self._tg = tg
            await self.failures.start(tg)
            send, recv = anyio.create_memory_object_stream[Job](max_buffer_size=self.queue_size)
            self._send = send
            self._leftovers = recv.clone()
            self._workers_done = anyio.Event()
            self._worker_scope = anyio.CancelScope()
            tg.start_soon(self._run_workers, recv)
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        self._running = True
        self._closing = False
        self._owner = anyio.get_current_task().id
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        stack, self._stack = self._stack, None
        tg, self._tg = self._tg, None
        assert stack is not None and tg is not None
        assert self._send is not None and self._workers_done is not None
        self._running = False
        self._closing = True
        try:
            with anyio.CancelScope(shield=True):
                self._send.close()  # workers finish what is queued, then see the end of stream
                with anyio.move_on_after(self.shutdown_grace):
                    await self._workers_done.wait()
                if not self._workers_done.is_set():
                    assert self._worker_scope is not None
                    for job in list(self._in_flight):
                        if job.scope is not None:
                            job.scope.cancel()
                    self._worker_scope.cancel()
                    await self._workers_done.wait()
                self._record_unfinished()
                await self.failures.aclose()
        finally:
            self._closing, self._send = False, None
            # The body's exception (or cancellation) is not handed to the task group, which
            # would wrap it in an ExceptionGroup: it propagates as raised. What still runs in
            # the group after the drain and the store's close is ours, and is cancelled.
            tg.cancel_scope.cancel()
            await stack.__aexit__(None, None, None)

    async def aclose(self) -> None:
        """Leave the running state as ``async with`` would, draining with the grace period.

        :raises RuntimeError: if called from another task than the one that entered the bus
        """
        if self._stack is not None:
            if anyio.get_current_task().id != self._owner:
                raise RuntimeError(
                    f"aclose() of {self!r} from another task than the one that entered it; "
                    "close the bus in the task that entered it (its task group lives there)"
                )
            await self.__aexit__(None, None, None)

    async def _run_workers(self, recv: MemoryObjectReceiveStream[Job]) -> None:
        assert self._worker_scope is not None and self._workers_done is not None
        try:
            with recv, self._worker_scope:  # closed even when shutdown cancels the workers
                async with anyio.create_task_group() as tg:
                    for _ in range(self.workers):
                        tg.start_soon(self._worker, recv.clone())
        finally:
            self._workers_done.set()

    async def _worker(self, recv: MemoryObjectReceiveStream[Job]) -> None:
        async with recv:
            async for job in recv:
                self._in_flight.add(job)
                # Its own scope, cancelled by shutdown: a job cut short is recorded as such even
                # if the listener swallowed the cancellation and returned.
                token = self._enter_hop(job.emission.depth)
                try:
                    with anyio.CancelScope() as job.scope:
                        await self._call_async(job.listener, job.emission, job)
                except anyio.get_cancelled_exc_class():
                    raise  # the worker scope: shutdown records the job
                except BaseException:
                    self._in_flight.discard(job)  # it propagates, crashing the bus: not ours
                    raise
                finally:
                    self._leave_hop(token)
                if not job.scope.cancel_called:
                    self._in_flight.discard(job)  # else shutdown records it

    def _record_unfinished(self) -> None:
        for job in list(self._in_flight):
            err = ListenerShutdownError(
                job.listener.name, self.shutdown_grace, started=True, last_error=job.last_error
            )
            err.__cause__ = job.last_error
            self._record(
                job.emission.event,
                job.emission.event_id,
                job.listener.name,
                err,
                max(job.attempts, 1),
            )
        self._in_flight.clear()
        leftovers, self._leftovers = self._leftovers, None
        if leftovers is None:
            return
        while True:
            try:
                job = leftovers.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            self._record(
                job.emission.event,
                job.emission.event_id,
                job.listener.name,
                ListenerShutdownError(job.listener.name, self.shutdown_grace, started=False),
                0,
            )
        leftovers.close()
