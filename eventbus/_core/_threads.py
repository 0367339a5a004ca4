"""Emits from other threads: refused by ``emit()``, handed to the bus's loop by
``emit_threadsafe()``.

The bus is not thread-safe: its listeners, its queue and its nesting state belong to the
event loop that runs it. While the bus runs, :class:`LoopThread` knows that loop's thread, so
that an emit from another thread is refused with an error naming the fix, and
``emit_threadsafe()`` hands the emit to the loop (anyio's ``from_thread`` machinery, with the
loop's token: asyncio and trio alike) as a task of the bus's task group, returning a
:class:`concurrent.futures.Future` of its outcomes.

Nothing is lost without a trace: a call that cannot be handed over (the bus is not running, or
closed meanwhile, even as the loop ends) raises in the calling thread, and never waits for
good; one handed over always completes its future, because closing the bus waits for those
calls (up to the grace period) before it drains the queue and closes the failure store. One
still running after the grace period is cancelled: its future is cancelled and a WARNING
names the event.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel
from anyio.abc import TaskGroup

from .._exceptions import BusNotRunningError, WrongThreadError

__all__ = ["LoopThread", "get_ident", "thread_mark"]

T = TypeVar("T")

get_ident = threading.get_ident
logger = logging.getLogger("eventbus")


def thread_mark() -> threading.local:
    """A mark of the calling thread: a ``threading.local`` whose ``__dict__`` is non-empty in
    this thread only, and empty in any other.

    ``emit()`` checks ``mark.__dict__`` on a running bus: the interpreter finds the thread's
    own dict of a local in C, without the call and the new int of ``get_ident() == ident``
    (about 18 ns against 24 ns). Another thread's first read makes its own, empty, dict. A
    new mark per start: a thread that ran the bus before is not its loop's thread now.
    """
    mark = threading.local()
    mark.here = True
    return mark


class LoopThread:
    """The thread of the running bus's event loop, and the way into that loop."""

    __slots__ = (
        "_handovers",
        "_idle",
        "_running",
        "_tg",
        "_token",
        "accepting",
        "ident",
        "mark",
    )

    def __init__(self) -> None:
        self.ident: int | None = None  #: the loop's thread while the bus runs
        self.mark: threading.local | None = None  #: its :func:`thread_mark`, meanwhile
        self.accepting = False
        self._token: anyio.lowlevel.EventLoopToken | None = None
        self._tg: TaskGroup | None = None
        self._running: set[anyio.CancelScope] = set()
        self._idle: anyio.Event | None = None  # set when _running empties
        #: asyncio: calls from threads waiting to be started (:meth:`forget` fails them)
        self._handovers: set[Future[None]] = set()

    def open(self, tg: TaskGroup) -> None:
        """Note this thread and its loop (in the task that enters the bus)."""
        self._token = anyio.lowlevel.current_token()
        self._tg = tg
        self.ident = get_ident()
        self.mark = thread_mark()
        self.accepting = True

    async def close(self, grace: float) -> None:
        """Refuse new calls from threads; wait up to *grace* seconds for the ones handed
        over, then cancel the rest (their futures are cancelled) and wait for them."""
        self.accepting = False
        with anyio.move_on_after(grace):
            await self._until_idle()
        if self._running:
            for scope in list(self._running):
                scope.cancel()
            await self._until_idle()

    async def _until_idle(self) -> None:
        while self._running:
            self._idle = idle = anyio.Event()
            await idle.wait()

    def forget(self) -> None:
        """The bus is closed: any thread may emit again (to a bus that is not running).

        A call from a thread still waiting to be started fails now: on asyncio, its callback
        may have come in after the loop's last iteration, and would never run.
        """
        self.ident = self._token = self._tg = self.mark = None
        for handed in list(self._handovers):
            if not handed.done():
                handed.set_exception(_not_running(handed))

    def check(self, call: str, event: object) -> None:
        """:raises WrongThreadError: naming *call* and *event* (an event, a type or a name), if
        the bus runs and this is not its loop's thread"""
        ident = self.ident
        if ident is not None and ident != get_ident():
            raise WrongThreadError(call, _event_name(event), _name(get_ident()), _name(ident))

    def submit(self, fn: Callable[[Any], Awaitable[T]], arg: Any, event: str) -> Future[T]:
        """Start ``fn(arg)`` as a task in the loop, from another thread; its future.

        :raises BusNotRunningError: if the bus does not run, or closed before the call got in
        :raises WrongThreadError: if called from the loop's own thread (it would deadlock)
        """
        future: Future[T] = Future()
        handed: Future[None] = Future()
        handed.event = event  # type: ignore[attr-defined]  # for forget()'s error
        # Registered before the bus's state is read: a forget() after the read fails it.
        self._handovers.add(handed)
        try:
            token, ident = self._token, self.ident
            if ident is not None and ident == get_ident():
                raise WrongThreadError("emit_threadsafe", event, _name(ident), _name(ident))
            if token is None or not self.accepting:
                raise BusNotRunningError(event, call="emit_threadsafe")
            start = functools.partial(self._start, fn, arg, future, event, handed)
            loop = token.native_token
            try:
                if isinstance(loop, asyncio.AbstractEventLoop):
                    # Not anyio's run_sync, which waits for a callback that a loop ending
                    # now never runs; forget() ends this wait instead.
                    loop.call_soon_threadsafe(_in_a_task, loop, start, handed)
                else:  # trio runs every callback it accepted, or refuses it
                    anyio.from_thread.run_sync(start, token=token)
            except (anyio.RunFinishedError, RuntimeError) as exc:  # the loop is gone/closed
                raise BusNotRunningError(event, call="emit_threadsafe") from exc
            handed.result()
        finally:
            self._handovers.discard(handed)
        return future

    def _start(
        self,
        fn: Callable[[Any], Awaitable[T]],
        arg: Any,
        future: Any,
        event: str,
        handed: Future[None],
    ) -> None:
        """In the loop's thread: start the task, unless the bus stopped accepting meanwhile;
        *handed* tells the calling thread which."""
        if handed.done():  # forget() failed it: the bus closed before this ran
            return
        if not self.accepting or self._tg is None:
            handed.set_exception(_not_running(handed))
            return
        scope: anyio.CancelScope | None = None
        try:
            scope = anyio.CancelScope()
            self._running.add(scope)
            self._tg.start_soon(self._run, fn, arg, future, event, scope)
        except BaseException as exc:
            if scope is not None:
                self._running.discard(scope)
            handed.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            handed.set_result(None)

    async def _run(
        self,
        fn: Callable[[Any], Awaitable[T]],
        arg: Any,
        future: Future[T],
        event: str,
        scope: anyio.CancelScope,
    ) -> None:
        token, ident = self._token, self.ident

        def cancelled_by_caller(f: Future[T]) -> None:
            if not f.cancelled():
                return
            if get_ident() == ident:
                scope.cancel()
                return
            try:
                anyio.from_thread.run_sync(scope.cancel, token=token)
            except anyio.RunFinishedError:
                pass  # the loop is gone: nothing left to cancel

        future.add_done_callback(cancelled_by_caller)
        try:
            with scope:
                result = await fn(arg)
            if scope.cancelled_caught:
                if not future.cancelled():
                    logger.warning(
                        "emit_threadsafe(%r) was still running when the bus closed; cancelled",
                        event,
                    )
                future.cancel()
            elif future.set_running_or_notify_cancel():
                future.set_result(result)
        except BaseException as exc:
            if future.set_running_or_notify_cancel():
                future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self._running.discard(scope)
            if not self._running and self._idle is not None:
                self._idle.set()


def _in_a_task(
    loop: asyncio.AbstractEventLoop, start: Callable[[], None], handed: Future[None]
) -> None:
    """In the loop's thread: run *start* in a task of its own (anyio finds its event loop
    from the current task), unless the wait for it already ended."""
    if handed.done():
        return

    async def starting() -> None:
        start()

    loop.create_task(starting())


def _not_running(handed: Future[None]) -> BusNotRunningError:
    return BusNotRunningError(handed.event, call="emit_threadsafe")  # type: ignore[attr-defined]


def _event_name(event: object) -> str:
    """The event name an error message shows for what an emit was given."""
    if isinstance(event, str):
        return event
    return getattr(event, "__event_name__", None) or type(event).__name__


def _name(ident: int) -> str:
    for thread in threading.enumerate():
        if thread.ident == ident:
            return thread.name
    return f"thread {ident}"
