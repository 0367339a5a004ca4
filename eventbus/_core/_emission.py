"""One emission of an event, its place in a chain of causes, and the accessor listeners use.

An event emitted while a listener runs was *caused* by the event that listener handles: it
records that event's id as its ``causation_id``, and the id of the chain's first event as its
``correlation_id``, so that one business transaction's events and failures can be found
together. The chain crosses sync, async, background and nested emits of one bus.

Nothing here is paid by an emit nobody asks about: the ids are random and made on first use
(a failure, :func:`current_emission` and its ids, a child's ids), a child emission refers to
its cause's object until its own ids are asked for, and ``emit()``'s fast path keeps its
emission as the bare event until then (see :mod:`eventbus._core._nesting`).
"""

from __future__ import annotations

import contextvars
import sys
from types import CodeType, FrameType
from typing import TYPE_CHECKING, Protocol

from .._events import Event
from .._failures import new_event_id

__all__ = [
    "Emission",
    "EmitState",
    "Hop",
    "current_emission",
    "hop",
    "is_fast_emit_of",
    "register_emit_frame",
]

_new = object.__new__


class Emission:
    """One emit of one event: what a listener sees through :func:`current_emission`.

    ``event_id`` is shared by every failure record of the emission and is the
    ``causation_id`` of the events its listeners emit; ``correlation_id`` is the event id of
    the first emission of the chain (its own, for an emission nothing caused); ``depth`` is 1
    for an emission nothing caused, its cause's depth plus one otherwise.
    """

    __slots__ = ("_cause", "_causation_id", "_correlation_id", "_event_id", "depth", "event")

    event: Event
    depth: int
    _cause: Emission | None  # the emission whose listener emitted this one (its ids: on use)
    _causation_id: str | None  # the cause's id, when only its id is known (a restored one)
    _event_id: str | None
    _correlation_id: str | None

    def __init__(self, event: Event, depth: int = 1, cause: Emission | None = None) -> None:
        self.event = event
        self.depth = depth
        self._cause = cause
        self._causation_id = None
        self._event_id = None
        self._correlation_id = None

    @classmethod
    def first(cls, event: Event) -> Emission:
        """``Emission(event)`` at half the cost: only ``event`` is set, the other slots read
        their defaults through ``__getattr__`` (``emit_async()`` makes one per call)."""
        em = _new(cls)
        em.event = event
        return em

    @classmethod
    def restored(
        cls, event: Event, event_id: str, causation_id: str | None, correlation_id: str | None
    ) -> Emission:
        """An emission known by its ids only (a failure record's, retried): what its listener
        emits is caused by it, in its chain."""
        em = cls(event)
        em._event_id = event_id
        em._causation_id = causation_id
        em._correlation_id = correlation_id
        return em

    if not TYPE_CHECKING:  # hidden from type checkers, which would accept any attribute

        def __getattr__(self, name: str) -> object:
            """The defaults of the slots an emission made by :meth:`first` leaves unset."""
            if name == "depth":
                return 1
            if name in ("_cause", "_causation_id", "_event_id", "_correlation_id"):
                return None
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def causation_id(self) -> str | None:
        """The event id of the emission whose listener emitted this one (``None``: nothing
        did)."""
        cause = self._cause
        return cause.event_id if cause is not None else self._causation_id

    @property
    def event_id(self) -> str:
        """This emission's id (32 hex digits), made on first use."""
        if self._event_id is None:
            self._event_id = new_event_id()
        return self._event_id

    @property
    def correlation_id(self) -> str:
        """The event id of the first emission in this chain of causes."""
        if self._correlation_id is None:
            cause = self._cause
            self._correlation_id = self.event_id if cause is None else cause.correlation_id
        return self._correlation_id

    def child(self, event: Event) -> Emission:
        """The emission of *event*, emitted while a listener of this one runs."""
        return Emission(event, self.depth + 1, self)

    def __repr__(self) -> str:
        return (
            f"<Emission {self.event.__event_name__!r} event_id={self.event_id} "
            f"causation_id={self.causation_id} correlation_id={self.correlation_id} "
            f"depth={self.depth}>"
        )


class EmitState(Protocol):
    """A bus's nesting state (:class:`~eventbus._core._nesting.Nesting`), as seen from here:
    declared, not imported, so that the two modules do not import each other."""

    def current(self, frame: FrameType | None = None) -> Emission | None: ...


class Hop:
    """One async listener call in progress (a worker's, or one of ``emit_async()``), as the
    context it runs in sees it: :data:`hop` holds it for the call's duration.

    A task the listener starts copies the context, and with it the hop; ``active`` turns
    false when the call ends, so that a task left running is no longer part of the chain.
    """

    __slots__ = ("active", "base", "emission", "nesting", "outer", "token")

    emission: Emission
    #: the bus's nesting state: the call is the cause of that bus's emits only
    nesting: EmitState
    #: the thread's innermost sync emission when the call began (a sync listener may run an
    #: event loop of its own): the call is nested in it
    base: Emission | None
    outer: Hop | None  #: the hop this call began in, if any (of another bus, say)
    active: bool  #: false once the call ended
    token: contextvars.Token[Hop | None]  #: what puts the context's hop back


#: The async listener call (worker or ``emit_async()``) this context runs, if any.
hop: contextvars.ContextVar[Hop | None] = contextvars.ContextVar("eventbus_emission", default=None)

# Code objects of the functions that run sync listeners with a local ``nesting`` (emit()'s),
# and whether it is the fast path's (the emit of the thread holding its bus's slot).
_emit_frames: dict[CodeType, bool] = {}


def register_emit_frame(code: CodeType, *, fast: bool) -> None:
    """Let :func:`current_emission` find sync emits of a bus by this code on the stack."""
    _emit_frames[code] = fast


def is_fast_emit_of(nesting: EmitState, frame: FrameType | None) -> bool:
    """Whether the innermost emit of *nesting*'s bus on the stack from *frame* up is a
    fast-path one (then this thread holds the bus's slot: see :mod:`eventbus._core._nesting`)."""
    while frame is not None:
        fast = _emit_frames.get(frame.f_code)
        if fast is not None and frame.f_locals.get("nesting") is nesting:
            return fast
        frame = frame.f_back
    return False


def current_emission() -> Emission | None:
    """The emission whose listener is running in the caller, or ``None`` outside listeners.

    In a sync listener run by ``emit()`` the emission is found on the caller's own stack (a
    walk up the frames to the innermost emit, a few µs: nothing is stored per emit for it); in
    an async listener, and in a sync one run by ``emit_async()``, it is a context variable.
    A task the listener starts on its own outlives the call, and is not part of the chain.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code in _emit_frames:
            nesting: EmitState | None = frame.f_locals.get("nesting")
            if nesting is not None:
                found = nesting.current(frame)
                if found is not None:
                    return found
            break
        frame = frame.f_back
    call = hop.get()
    return call.emission if call is not None and call.active else None
