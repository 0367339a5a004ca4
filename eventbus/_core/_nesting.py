"""Which emission is in progress, for the recursion guard (``max_depth``) and causality.

Each thread has its own emits in progress: a bus that is not running takes emits from any
thread, several at once. What one thread's emits need, they keep in :attr:`Nesting.local`
(a ``threading.local``), and an async listener call (a worker's, or one of ``emit_async()``)
keeps its emission in a context variable, as a :class:`~eventbus._core._emission.Hop` that ends
with the call. Only ``emit()``'s fast path, which must cost next to nothing, shares a slot:

* :attr:`Nesting.top` is "at rest" (``None``; :data:`RUNNING` while the bus runs, whose fast
  path also checks the thread) when no emit and no async call is in progress anywhere. Then
  an emit with no cause and depth 1 takes the slot: it stores its bare event there (no object
  is made per emit), runs its listeners, and puts back :attr:`Nesting.rest`. Its emission
  becomes an :class:`~eventbus._core._emission.Emission` the first time something needs one (a
  failure, a nested emit, :func:`~eventbus.current_emission`); that thread *holds* the slot.
* Anything else (a nested emit, an emit by name, an async call, an emit while another thread
  holds the slot) takes the exact path, which uses the thread's own state, and *parks* the
  slot meanwhile (:meth:`Nesting.park`): at :data:`SLOW` when at rest, and ``rest`` too, so
  that no emit anywhere takes the fast path until the last such activity ended.

The slot is shared without a lock: taking it (``if top is None: top = event``) and each of
:meth:`Nesting.park`, :meth:`Nesting.unpark` and :meth:`Nesting.held` contain no call and no
loop, and CPython (3.11 and later, with its GIL) switches threads only at a call, a backward
jump or a function's start, so each runs as one step. A trace function written in Python
(pdb and other debuggers, coverage's PyTracer) is a call at each new line, where another
thread may run; so each check of the slot shares one line with what it decides (the fast
path's take, parking's ``if top is idle: top = SLOW``, unparking's ``if not busy: rest =
idle; top = idle if top is SLOW``), and the steps on lines of their own (the ``busy``
counter, ``rest = SLOW``) are right in any order. A free-threaded build offers no such step:
there, emit to a bus that is not running from one thread at a time.

Who holds the slot is known without a per-emit cost: a running bus's fast path is its loop
thread's alone; otherwise the thread that finds this bus's fast-path ``emit()`` frame on its
own stack holds it (a walk of a few frames, once per emission that needs its Emission).
"""

from __future__ import annotations

import sys
import threading
from types import FrameType

from ._emission import Emission, Hop, hop, is_fast_emit_of

__all__ = ["RUNNING", "SLOW", "Nesting"]

_get_ident = threading.get_ident
_new = object.__new__


class _State:
    """A value of :attr:`Nesting.top` that is no emission."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: ``top`` at rest while the bus runs (its at-rest value; ``None`` while it does not)
RUNNING = _State("RUNNING")
#: ``top`` while emits or async calls use their threads' own state: every emit is exact
SLOW = _State("SLOW")


class _ThreadState(threading.local):
    """What one thread's emits of one bus share (class attributes: each thread's defaults)."""

    #: the innermost emission of this thread's exact path (``None``: none in progress)
    sync: Emission | None = None


class Nesting:
    """The nesting state of one bus, shared by its emit paths and its workers.

    :param max_depth: how deeply emits may nest, sync and async hops together
    """

    __slots__ = ("busy", "holder", "idle", "local", "max_depth", "rest", "top")

    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        #: the fast path's emission (an Event until something needs its Emission), else
        #: ``idle`` (at rest) or SLOW (``object``: emit() stores what it was given, known to
        #: be an Event only by its dispatch entry)
        self.top: object = None
        #: ``top`` at rest: None, or RUNNING while the bus runs
        self.idle: _State | None = None
        #: what the fast path puts back in ``top``: ``idle``, or SLOW while ``busy``
        self.rest: object = None
        #: emits and async calls in progress that use their threads' own state
        self.busy = 0
        #: the thread that made ``top``'s Emission (the one holding the slot)
        self.holder = 0
        self.local = _ThreadState()

    def running(self, yes: bool) -> None:
        """The bus starts (or stops) running: the fast path checks the thread (or not)."""
        old, self.idle = self.idle, RUNNING if yes else None
        if self.rest is old:
            self.rest = self.idle
        if self.top is old:
            self.top = self.idle

    # -- the shared slot (no call, no loop in these: see the module docstring) -------------

    def park(self) -> None:
        """An emit or async call that uses its thread's own state begins: no fast path."""
        self.busy += 1
        self.rest = SLOW
        if self.top is self.idle: self.top = SLOW  # noqa: E701  # fmt: skip

    def unpark(self) -> None:
        """Undo :meth:`park`; the last one lets the fast path back in."""
        self.busy -= 1
        idle = self.idle
        if not self.busy: self.rest = idle; self.top = idle if self.top is SLOW else self.top  # noqa: E701, E702  # fmt: skip

    def held(self) -> Emission:
        """The Emission of the fast-path emit this thread holds the slot for (made now if it
        was a bare event)."""
        top = self.top
        if type(top) is Emission:
            return top
        if top is None or top.__class__ is _State:
            raise AssertionError(f"no emit in progress (top={top!r})")
        em = Emission(top)  # type: ignore[arg-type]  # the fast path's bare event
        self.holder = _get_ident()
        self.top = em
        return em

    # -- the emission in progress ------------------------------------------------------------

    def current(self, frame: FrameType | None = None) -> Emission | None:
        """The emission in progress in this thread and task, or ``None``: the innermost sync
        emit's, or the async listener call's, whichever began later.

        :param frame: where a look for this bus's fast-path emit on the stack starts
            (default: the caller's frame)
        """
        sync = self.local.sync
        call = hop.get()
        while call is not None and call.active and call.nesting is not self:
            call = call.outer  # an async call of another bus
        if call is not None and call.active and call.base is sync:
            return call.emission  # it began inside the sync emit (or with none in progress)
        if sync is not None:
            return sync
        top = self.top
        if top is None or top.__class__ is _State:
            return None
        if type(top) is Emission:
            return top if self.holder == _get_ident() else None
        if self.idle is RUNNING or is_fast_emit_of(self, frame or sys._getframe(1)):
            return self.held()
        return None  # another thread's fast-path emit

    def emission(self) -> Emission:
        """The Emission of the sync emit this thread runs the listeners of (a generated
        function, and a lone listener's failure, are inside it)."""
        sync = self.local.sync
        return sync if sync is not None else self.held()

    # -- async listener calls ----------------------------------------------------------------

    def enter_hop(self, emission: Emission) -> Hop:
        """Mark an async listener call for *emission* as running (in the current context);
        what :meth:`leave_hop` takes. (Once per ``emit_async()`` and per worker call: written
        out, without :meth:`park` or :class:`Hop`'s ``__init__``.)"""
        call: Hop = _new(Hop)
        call.emission = emission
        call.nesting = self
        call.outer = hop.get()
        call.active = True
        # At rest, no emit is in progress anywhere. While the bus runs, no sync emit of this
        # (the loop's) thread is: none can run a task, as a sync listener of a bus that does
        # not run may (it runs an event loop of its own).
        idle = self.idle
        call.base = None if self.top is idle or idle is RUNNING else self.local.sync
        self.busy += 1  # park(), inline
        self.rest = SLOW
        if self.top is self.idle: self.top = SLOW  # noqa: E701  # fmt: skip
        call.token = hop.set(call)
        return call

    def leave_hop(self, call: Hop) -> None:
        """Undo :meth:`enter_hop`, in the context it was entered in. The call is over: a task
        it started and left running sees no emission any more."""
        call.active = False
        hop.reset(call.token)
        self.busy -= 1  # unpark(), inline
        idle = self.idle
        if not self.busy: self.rest = idle; self.top = idle if self.top is SLOW else self.top  # noqa: E701, E702  # fmt: skip
