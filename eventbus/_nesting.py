"""Which emission is in progress, for the recursion guard (``max_depth``) and causality.

Sync emits nest on the stack: between two awaits they always unwind, so a plain attribute,
:attr:`Nesting.top`, holds the innermost one. An async listener call (a worker's, or one of
``emit_async()``) crosses awaits, so the emission it runs for lives in a context variable
(:data:`eventbus._emission.hop`), and :attr:`Nesting.hops` counts the calls in progress.

``emit()``'s fast path reads one attribute: ``top is None`` means "at the top, and no async
call in progress", the only state in which the new emission is known to have no cause and
depth 1. It then stores the bare event in ``top`` (no object is made per emit), and restores
``None`` when done. While the bus runs, the idle value is :data:`RUNNING` instead of ``None``:
the fast path then also checks the thread (an emit from another thread than the loop's is an
error), and a bus that does not run pays nothing for that check. Anything else takes the exact
path, which asks :meth:`Nesting.current` for the cause; a bare event becomes an
:class:`~eventbus._emission.Emission` the first time something needs one (a failure, a child
emit, :func:`~eventbus.current_emission`).
"""

from __future__ import annotations

import contextvars

from ._emission import Emission, hop

__all__ = ["HOPPING", "RUNNING", "Nesting"]


class _State:
    """A value of :attr:`Nesting.top` that is no emission."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: ``top`` while async calls are in progress and no sync emit is
HOPPING = _State("HOPPING")
#: ``top`` at rest while the bus runs (its idle value; ``None`` while it does not)
RUNNING = _State("RUNNING")


class Nesting:
    """The nesting state of one bus, shared by its emit paths and its workers.

    :param max_depth: how deeply emits may nest, sync and async hops together
    """

    __slots__ = ("hops", "idle", "max_depth", "top")

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        #: the innermost sync emission (an Event until something needs its Emission), else
        #: HOPPING while async calls are in progress, else ``idle`` (``object``: emit() stores
        #: what it was given, known to be an Event only by its dispatch entry)
        self.top: object = None
        #: ``top`` at rest: None, or RUNNING while the bus runs
        self.idle: _State | None = None
        #: async listener calls in progress
        self.hops = 0

    def running(self, yes: bool) -> None:
        """The bus starts (or stops) running: the fast path checks the thread (or not)."""
        old, self.idle = self.idle, RUNNING if yes else None
        if self.top is old:
            self.top = self.idle

    def current(self) -> Emission | None:
        """The emission in progress here: the innermost sync one, else the async call's."""
        top = self.top
        if top is None or top is self.idle:
            return None
        if top is HOPPING:
            return hop.get()
        if type(top) is Emission:
            return top  # type() is cheaper than isinstance() here
        em = self.top = Emission(top)  # type: ignore[arg-type]  # the fast path's bare event
        return em

    def emission(self) -> Emission:
        """The Emission of the sync emit in progress (made now if it was a bare event)."""
        em = self.current()
        assert em is not None, "no emit in progress"
        return em

    def enter_hop(self, emission: Emission) -> contextvars.Token[Emission | None]:
        """Mark an async listener call for *emission* as running (in the current context)."""
        self.hops += 1
        if self.top is self.idle:
            self.top = HOPPING
        return hop.set(emission)

    def leave_hop(self, token: contextvars.Token[Emission | None]) -> None:
        """Undo :meth:`enter_hop`, in the context it was entered in."""
        hop.reset(token)
        self.hops -= 1
        if not self.hops and self.top is HOPPING:
            self.top = self.idle
