"""How deeply emits are nested, for the recursion guard (``max_depth``).

The depth of an emit is the number of sync emits already on the stack, plus the *async hop
depth*: a listener run by a worker or by ``emit_async()`` that emits again nests one level deeper
than the emission that started it. Sync nesting is a plain counter (between two awaits it always
returns to zero); the hop depth crosses awaits, so it lives in a context variable.

``emit()``'s fast path reads one integer, :attr:`Nesting.level`: zero means "at the top, and no
async call in progress", the only state in which the depth is known to be zero without reading
the context variable. Anything else sends the emit to the exact check.
"""

from __future__ import annotations

import contextvars

__all__ = ["HOP", "Nesting", "async_depth"]

#: The hop depth of the running async listener call (0 outside any).
async_depth: contextvars.ContextVar[int] = contextvars.ContextVar("eventbus_depth", default=0)

#: What one async call in progress adds to :attr:`Nesting.level`; sync nesting stays far below
#: it (Python's own recursion limit stops a sync emit loop long before).
HOP = 1 << 20


class Nesting:
    """The nesting state of one bus, shared by its emit paths and its workers.

    :param max_depth: how deeply emits may nest, sync and async hops together
    """

    __slots__ = ("level", "max_depth")

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        #: sync emits on the stack, plus :data:`HOP` per async listener call in progress
        self.level = 0

    def depth(self) -> int:
        """The depth of an emit starting now: sync nesting plus the current hop depth."""
        return self.level % HOP + async_depth.get()

    def enter_hop(self, depth: int) -> contextvars.Token[int]:
        """Mark an async listener call at *depth* as running (in the current context)."""
        self.level += HOP
        return async_depth.set(depth)

    def leave_hop(self, token: contextvars.Token[int]) -> None:
        """Undo :meth:`enter_hop`, in the context it was entered in."""
        async_depth.reset(token)
        self.level -= HOP
