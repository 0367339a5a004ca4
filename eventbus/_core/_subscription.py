"""A subscription scoped to a block: ``with bus.subscribed(E, fn):`` (blinker's
``connected_to``), so that a listener added for one request or one test cannot leak."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ._listeners import Listener

if TYPE_CHECKING:
    from ._table import ListenerTable

__all__ = ["Subscription"]


class Subscription:
    """Subscribes on entering the block, unsubscribes on leaving it (sync or async ``with``).

    Entered once: the listener it made is :attr:`listener` from then on. Leaving removes that
    subscription only (not another one of the same function), and finds nothing to remove if
    ``times=``/``once`` already did.
    """

    __slots__ = ("_fn", "_subscribe", "_table", "listener")

    def __init__(
        self,
        table: ListenerTable,
        subscribe: Callable[[Callable[[Any], Any]], Listener],
        fn: Callable[[Any], Any],
    ) -> None:
        self._table = table
        self._subscribe = subscribe
        self._fn = fn
        self.listener: Listener | None = None

    def __repr__(self) -> str:
        state = "not entered" if self.listener is None else repr(self.listener)
        return f"<Subscription {state}>"

    def __enter__(self) -> Listener:
        if self.listener is not None:
            raise RuntimeError(f"{self!r} was entered already; call bus.subscribed() again")
        self.listener = self._subscribe(self._fn)
        return self.listener

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.listener is not None:
            self._table.remove(self.listener)

    async def __aenter__(self) -> Listener:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
