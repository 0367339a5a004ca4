"""The background side of the bus: a bounded queue of async calls, its workers, and the drain.

``emit()`` hands each async listener to :meth:`WorkerPool.submit`, which never waits: a full
queue (or a closing bus) records the call as dropped. A fixed number of worker tasks run the
calls, each in a copy of the publisher's context taken when it was queued (as
``asyncio.create_task`` would), so context variables set before ``emit()`` (a request id) are
seen by the listener. Closing waits ``grace`` seconds for queued work, then cancels it and
records what was cut short.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .._exceptions import ListenerDroppedError, ListenerShutdownError
from ._calls import QueuedCall, call_async
from ._emission import Emission
from ._listeners import Listener
from ._nesting import Nesting
from ._sink import FailureSink

__all__ = ["QueuedCall", "WorkerPool", "run_in_context"]

T = TypeVar("T")


@types.coroutine
def run_in_context(
    context: contextvars.Context, coro: Coroutine[Any, Any, T]
) -> Generator[Any, Any, T]:
    """Await *coro* with each of its steps run inside *context* (the worker's task stays).

    The event loop drives a coroutine with ``send()`` and ``throw()``; this forwards both,
    and whatever the coroutine yields back, so it works the same on asyncio and trio.
    """
    step: Any = coro.send
    arg: Any = None
    while True:
        try:
            yielded = context.run(step, arg)
        except StopIteration as stop:
            result: T = stop.value
            return result
        try:
            arg = yield yielded
            step = coro.send
        except GeneratorExit:
            context.run(coro.close)
            raise
        except BaseException as exc:
            arg = exc
            step = coro.throw


class WorkerPool:
    """Queue, workers and drain of one bus; see the module docstring.

    :param sink: records drops, failures and what the drain cut short
    :param nesting: the bus's nesting state; each call runs one hop deeper than its emit
    """

    def __init__(self, sink: FailureSink, nesting: Nesting, *, backoff: float) -> None:
        self.sink = sink
        self.nesting = nesting
        self.backoff = backoff
        self.accepting = False  # running: submit() queues
        self.closing = False  # draining: submit() records a drop
        self.size = 0
        self.dropped = 0
        self._send: MemoryObjectSendStream[QueuedCall] | None = None
        self._leftovers: MemoryObjectReceiveStream[QueuedCall] | None = None
        self._in_flight: set[QueuedCall] = set()
        self._done: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None

    @property
    def queued(self) -> int:
        return 0 if self._send is None else self._send.statistics().current_buffer_used

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def submit(self, sub: Listener, emission: Emission) -> None:
        """Queue one call, or record it as dropped; never waits."""
        if self._send is None or not self.accepting:
            self._drop(sub, emission, "the bus is shutting down")
            return
        try:
            self._send.send_nowait(QueuedCall(sub, emission))
        except anyio.WouldBlock:
            self._drop(sub, emission, f"queue full ({self.size} waiting)")

    def _drop(self, sub: Listener, emission: Emission, reason: str) -> None:
        self.dropped += 1
        err = ListenerDroppedError(sub.name, reason)
        self.sink.capture(emission, sub, err, 0)

    def start(self, tg: TaskGroup, *, size: int, workers: int) -> None:
        """Open a queue of *size* calls and start *workers* tasks in *tg*."""
        send, recv = anyio.create_memory_object_stream[QueuedCall](max_buffer_size=size)
        self.size = size
        self._send = send
        self._leftovers = recv.clone()
        self._done = anyio.Event()
        self._scope = anyio.CancelScope()
        tg.start_soon(self._run_workers, recv, workers)
        self.accepting = True
        self.closing = False

    async def drain(self, grace: float, *, within: float | None = None) -> None:
        """Stop accepting, run what is queued for up to *grace* seconds, record the rest.

        Calls submitted from now until :meth:`stopped` are recorded as dropped.

        :param within: seconds left of the grace period, when part of it was spent already
            (records still name the whole *grace*)
        """
        assert self._send is not None and self._done is not None and self._scope is not None
        self.accepting = False
        self.closing = True
        self._send.close()  # workers finish what is queued, then see the end of stream
        with anyio.move_on_after(grace if within is None else within):
            await self._done.wait()
        if not self._done.is_set():
            for job in list(self._in_flight):
                if job.scope is not None:
                    job.scope.cancel()
            self._scope.cancel()
            await self._done.wait()
        self._record_unfinished(grace)

    def stopped(self) -> None:
        """The bus is closed: a later submit is an error of the publisher's, not a drop."""
        self.accepting = self.closing = False
        self._send = None

    async def _run_workers(self, recv: MemoryObjectReceiveStream[QueuedCall], n: int) -> None:
        assert self._scope is not None and self._done is not None
        try:
            with recv, self._scope:  # closed even when the drain cancels the workers
                async with anyio.create_task_group() as tg:
                    for _ in range(n):
                        tg.start_soon(self._worker, recv.clone())
        finally:
            self._done.set()

    async def _worker(self, recv: MemoryObjectReceiveStream[QueuedCall]) -> None:
        async with recv:
            async for job in recv:
                self._in_flight.add(job)
                ctx = job.context
                # The hop and the listener run in the job's copy of the publisher's context.
                hopping = ctx.run(self.nesting.enter_hop, job.emission)
                try:
                    # Its own scope, cancelled by the drain: a job cut short is recorded as such
                    # even if the listener swallowed the cancellation and returned.
                    with anyio.CancelScope() as job.scope:
                        call = call_async(
                            job.listener, job.emission, self.sink, self.backoff, job, own_task=True
                        )
                        await run_in_context(ctx, call)
                except anyio.get_cancelled_exc_class():
                    raise  # a scope of ours (the drain records the job), or the bus's group
                except BaseException:
                    self._in_flight.discard(job)  # it propagates, crashing the bus: not ours
                    raise
                finally:
                    ctx.run(self.nesting.leave_hop, hopping)
                if not job.scope.cancel_called:
                    self._in_flight.discard(job)  # else the drain records it

    def _record_unfinished(self, grace: float) -> None:
        for job in list(self._in_flight):
            err = ListenerShutdownError(
                job.listener.name, grace, started=True, last_error=job.last_error
            )
            err.__cause__ = job.last_error
            self.sink.capture(job.emission, job.listener, err, max(job.attempts, 1))
        self._in_flight.clear()
        leftovers, self._leftovers = self._leftovers, None
        if leftovers is None:
            return
        while True:
            try:
                job = leftovers.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                break
            err = ListenerShutdownError(job.listener.name, grace, started=False)
            self.sink.capture(job.emission, job.listener, err, 0)
        leftovers.close()
