"""``await bus.wait_for(...)``: the first matching event emitted after the call.

EventEmitter2's ``waitFor``, for tests and request/response flows. The wait is a sync listener
subscribed for the duration of the call only: it is removed however the call ends (an event,
the timeout, a cancellation), so nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio

from .._events import Event
from ._table import ListenerTable

__all__ = ["wait_for"]


def check_wait_options(where: object, timeout: object) -> None:
    """:raises TypeError: naming *where*; :raises ValueError: naming *timeout*"""
    if where is not None and not callable(where):
        raise TypeError(f"where={where!r} must be a callable taking the event, or None")
    if timeout is not None and (
        not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0
    ):
        raise ValueError(f"timeout={timeout!r} must be a positive number of seconds, or None")


async def wait_for(
    table: ListenerTable,
    event: type[Event] | str,
    where: Callable[[Any], object] | None,
    timeout: float | None,  # noqa: ASYNC109  (the public API's option, checked here)
) -> Event:
    """Subscribe now, wait for the first event *where* accepts, unsubscribe.

    :raises TimeoutError: naming the event, when *timeout* seconds pass first
    :raises Exception: whatever *where* raised (the emit that called it goes on)
    """
    check_wait_options(where, timeout)
    pattern = table.pattern_of(event)
    got: list[Event] = []
    failed: list[Exception] = []
    arrived = anyio.Event()

    def waiter(e: Event) -> None:
        if arrived.is_set():
            return  # a second event in the same emit: the first one won
        try:
            if where is not None and not where(e):
                return
        except Exception as exc:
            failed.append(exc)
        else:
            got.append(e)
        arrived.set()
        table.remove(sub)

    # The lowest number free: a wait per request subscribes a listener of the same name each
    # time, so its event's dispatch compiles once (see eventbus._core._compiler), not per request.
    n = 1
    while table.taken(f"eventbus.wait_for:{pattern}#{n}"):
        n += 1
    sub = table.binder(pattern, name=f"eventbus.wait_for:{pattern}#{n}")(waiter)
    try:
        with anyio.move_on_after(timeout):
            await arrived.wait()
    finally:
        table.remove(sub)
    if failed:
        raise failed[0]
    if not got:
        raise TimeoutError(f"wait_for({pattern!r}): no matching event within {timeout:g}s")
    return got[0]
