"""Reading the failure store without hanging on it.

A store that cannot write (its database down, locked or paused) makes ``flush()`` wait until
it can, and a SQL store's queries flush first: unbounded, a console page waited with it and
never answered. Pages read the store within a deadline instead, and past it say so, with the
number of records the store holds back when it tells (``statistics().waiting``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import anyio

from eventbus.abc import FailureStore

from ._pages import ActionError

__all__ = ["DEFAULT_STORE_TIMEOUT", "StoreUnavailable", "store_deadline", "unavailable_message"]

#: seconds a page waits for the failure store before it shows what it has, with a banner
DEFAULT_STORE_TIMEOUT = 2.0


class StoreUnavailable(ActionError):
    """The failure store did not answer in time: a 503 that says how much it holds back."""

    def __init__(self, message: str) -> None:
        super().__init__(message, status=503)


@contextmanager
def store_deadline(store: FailureStore, seconds: float) -> Iterator[None]:
    """Cancel the block after *seconds*, and then raise :class:`StoreUnavailable`."""
    with anyio.move_on_after(seconds) as scope:
        yield
    if scope.cancelled_caught:
        raise StoreUnavailable(unavailable_message(store, seconds))


def unavailable_message(store: FailureStore, seconds: float) -> str:
    """``the failure store is unavailable: N records waiting`` (or how long it was given)."""
    statistics = getattr(store, "statistics", None)
    waiting = getattr(statistics(), "waiting", None) if callable(statistics) else None
    if isinstance(waiting, int):
        noun = "record" if waiting == 1 else "records"
        return f"the failure store is unavailable: {waiting:,} {noun} waiting"
    return f"the failure store is unavailable: no answer in {seconds:g} s"
