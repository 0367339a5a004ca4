"""The streams page: the Redis streams of durable events, per consumer group (lag, pending,
dead letters, paused processes), the replay of a dead letter to the group that gave up on it,
the early resume of a group a kill switch paused; with a transport that schedules events, the
delayed events not yet due, each with a Cancel button.

Built on the durable transport's public operations (``status()``, ``dead_letters()``,
``replay()``, ``resume_group()``: what ``python -m eventbus streams status|dead|replay|resume``
runs), so the page imports
neither redis nor the durable package; :func:`eventbus.console.bus_pages` adds it when the bus
has a transport that offers them.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from starlette.responses import Response

from eventbus import EventBus

from ._pages import Action, ActionError, Done, PageRequest, Panel, View

if TYPE_CHECKING:
    from eventbus.durable import DeadLetter, ScheduledRow, StreamStatus

__all__ = ["DurableOperations", "ScheduledOperations", "StreamsPage"]

MAX_EVENT = 300
#: an event id as the outbox writes them (32 hex digits); at most 64 characters
EVENT_ID = re.compile(r"[A-Za-z0-9_.:-]{1,64}")
#: a stream entry id: milliseconds, a dash, a sequence number
ENTRY_ID = re.compile(r"\d{1,20}-\d{1,20}")


@runtime_checkable
class DurableOperations(Protocol):
    """**Protocol:** what the streams page needs of the bus's durable transport
    (:class:`eventbus.durable.RedisStreams` has it)."""

    async def status(self, events: Sequence[str] | None = None) -> list[StreamStatus]:
        """Length, groups and dead letters of each event's stream."""
        ...

    async def dead_letters(
        self, event: str, *, group: str | None = None, limit: int | None = 100
    ) -> list[DeadLetter]:
        """Dead letters of *event*, oldest first."""
        ...

    async def replay(
        self, event: str, *, group: str | None = None, ids: Sequence[str] | None = None
    ) -> list[str]:
        """Hand dead letters back to their group; the new entry ids."""
        ...

    async def resume_group(self, event: str, group: str) -> int:
        """Resume a group its kill switch paused, in every process; how many were told."""
        ...


@runtime_checkable
class ScheduledOperations(Protocol):
    """**Protocol:** what the page needs to list and cancel delayed events
    (:class:`eventbus.durable.RedisStreams` has it)."""

    @property
    def engine(self) -> Any:
        """The database of the outbox (an ``AsyncEngine``)."""
        ...

    async def scheduled(self, *, limit: int = 100) -> list[ScheduledRow]:
        """Events published for later and not yet due, soonest first."""
        ...

    async def cancel_scheduled(self, event_id: str, conn: Any) -> bool:
        """Remove one in *conn*'s transaction; ``False`` if already published or unknown."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class StreamView:
    status: StreamStatus
    dead_by_group: dict[str, int]
    capped: bool  #: more dead letters than were counted
    letters: list[DeadLetter]  #: the oldest ones, each with its Replay button


class StreamsPage:
    """The streams of *bus*'s durable transport (``bus.durable``).

    :param dead_shown: dead letters listed per event (the oldest ones)
    :param count_limit: dead letters read per event to count them by group; beyond it a
        count shows as ``N+``
    :raises TypeError: if the bus has no durable transport with the operations the page needs
    """

    slug = "streams"
    title = "Streams"
    templates: tuple[str, str] | None = None

    def __init__(self, bus: EventBus, *, dead_shown: int = 50, count_limit: int = 10_000) -> None:
        if not isinstance(bus.durable, DurableOperations):
            raise TypeError(
                f"StreamsPage needs a bus with a durable transport such as RedisStreams, not "
                f"{bus.durable!r}"
            )
        self.bus: EventBus = bus
        self.transport: DurableOperations = bus.durable
        self.dead_shown: int = dead_shown
        self.count_limit: int = count_limit
        #: delayed events listed (the soonest ones)
        self.scheduled_shown: int = 100

    def __repr__(self) -> str:
        return f"StreamsPage(bus={self.bus!r})"

    def routes(self) -> Sequence[View | Action]:
        return [
            View("", self.index, "streams.list"),
            Action("/replay", self.replay, "streams.replay"),
            Action("/cancel", self.cancel, "streams.cancel"),
            Action("/resume", self.resume, "streams.resume"),
        ]

    async def panel(self, request: PageRequest) -> Panel:
        try:
            streams = await self.transport.status()
        except Exception as exc:  # Redis down: the overview still shows, and says so
            return Panel(
                self.title, request.url("/streams"), rows=[("error", _why(exc))], alert=True
            )
        pending = sum(g.pending + g.redelivery_pending for s in streams for g in s.groups)
        dead = sum(s.dead for s in streams)
        return Panel(
            title=self.title,
            href=request.url("/streams"),
            rows=[("streams", len(streams)), ("pending", pending), ("dead letters", dead)],
            alert=dead > 0,
        )

    async def index(self, request: PageRequest) -> Response:
        try:
            views = [await self._view(s) for s in await self.transport.status()]
        except Exception as exc:
            message = f"Could not read the streams: {_why(exc)}"
            return request.render(
                "streams.html",
                status=503,
                errors=[message],
                streams=[],
                scheduled=None,
                refresh=True,
            )
        scheduled: list[ScheduledRow] | None = None
        errors: list[str] = []
        if isinstance(self.transport, ScheduledOperations):
            try:
                scheduled = await self.transport.scheduled(limit=self.scheduled_shown)
            except Exception as exc:  # the database down: the streams still show
                errors.append(f"Could not read the scheduled events: {_why(exc)}")
        return request.render(
            "streams.html", errors=errors, streams=views, scheduled=scheduled, refresh=True
        )

    async def _view(self, status: StreamStatus) -> StreamView:
        letters = (
            await self.transport.dead_letters(status.event, limit=self.count_limit)
            if status.dead
            else []
        )
        return StreamView(
            status=status,
            dead_by_group=dict(Counter(d.group for d in letters)),
            capped=len(letters) >= self.count_limit,
            letters=letters[: self.dead_shown],
        )

    async def replay(self, request: PageRequest) -> Done:
        event = request.field("event", max_length=MAX_EVENT)
        dead_id = request.field("dead_id", max_length=60)
        if not event:
            raise ActionError("Give the event of the dead letter (the field 'event' is empty).")
        if not ENTRY_ID.fullmatch(dead_id):
            raise ActionError(
                f"dead_id must be a stream entry id such as 1700000000000-0, not {dead_id!r}."
            )
        new = await self.transport.replay(event, ids=[dead_id])
        if not new:
            raise ActionError(
                f"There is no dead letter {dead_id} of {event!r}: it was replayed already, or "
                "its stream was trimmed.",
                status=404,
            )
        return Done(
            f"Replayed dead letter {dead_id} of {event} to its group (new entry {new[0]}).",
            target=f"{event} {dead_id}",
            back=request.url("/streams"),
        )

    async def cancel(self, request: PageRequest) -> Done:
        event_id = request.field("event_id", max_length=64)
        if not EVENT_ID.fullmatch(event_id):
            raise ActionError(f"event_id must be an event id from the list, not {event_id!r}.")
        transport = self.transport
        if not isinstance(transport, ScheduledOperations):
            raise ActionError("This bus's durable transport does not schedule events.")
        async with transport.engine.begin() as conn:
            cancelled = await transport.cancel_scheduled(event_id, conn)
        if not cancelled:
            raise ActionError(
                f"Event {event_id} was not cancelled: it is not a scheduled event, was "
                "published already (or handed to a relay once, whose publish may still land), "
                "cancelled before, or is unknown.",
                status=409,
            )
        return Done(
            f"Cancelled scheduled event {event_id}: it will not be delivered.",
            target=event_id,
            back=request.url("/streams"),
        )

    async def resume(self, request: PageRequest) -> Done:
        event = request.field("event", max_length=MAX_EVENT)
        group = request.field("group", max_length=MAX_EVENT)
        if not event or not group:
            raise ActionError("Give the event and the group to resume (a field is empty).")
        told = await self.transport.resume_group(event, group)
        if not told:
            raise ActionError(
                f"Group {group!r} of {event!r} is paused nowhere (it resumed already).",
                status=404,
            )
        plural = "es" if told != 1 else ""
        return Done(
            f"Told {told} paused process{plural} of group {group} to resume (each does within "
            "about a second).",
            target=f"{event} {group}",
            back=request.url("/streams"),
        )


def _why(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
