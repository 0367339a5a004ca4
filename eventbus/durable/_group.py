"""The state one consumer group shares in this process: its streams, its entries in flight,
its counters, the acknowledgements waiting to be sent, and recovery from a missing group.

A group reads two streams: the event's stream, and its own redelivery stream, where replayed
dead letters and retried dead failures come back to this group only.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
import time

import anyio
from redis.exceptions import ResponseError

from .._failures import safe_str
from ._attempts import Attempts, field_of
from ._events import GroupPaused, GroupRecreated, GroupResumed
from ._held import HeldConnection
from ._kill_switch import KillSwitch, Outcome
from ._listener import DurableListener
from ._registry import create_group, register_group
from ._runtime import REDIS_ERRORS, Runtime, logger
from ._stats import GroupCounters, GroupStatistics

__all__ = [
    "Entry",
    "Group",
    "InFlight",
    "batch_limit",
    "is_missing_group",
    "note_call",
    "shares_transactions",
]

#: pauses after a missing group: the first, the longest, and quiet seconds that reset them
NOGROUP_BACKOFF = 0.2
NOGROUP_MAX_BACKOFF = 10.0
NOGROUP_RESET = 60.0
#: the longest a shielded acknowledgement may hold up a stop
ACK_PATIENCE = 5.0
#: how long the ack task lets the acknowledgements of the next moments join its ``XACK``:
#: a caught-up consumer reads a few entries at a time, and one ``XACK`` per read was a
#: third of its round trips. A delayed ack only delays; a stop flushes what is queued.
ACK_LINGER = 0.005


def is_missing_group(exc: BaseException) -> bool:
    """A reply saying the stream or the group is gone (flushed, evicted, destroyed, a restart
    without persistence), as opposed to a server that is unreachable."""
    text = str(exc)
    return isinstance(exc, ResponseError) and (
        text.startswith("NOGROUP") or text.startswith("UNBLOCKED")
    )


@dataclasses.dataclass(slots=True)
class Entry:
    """One stream entry handed to this process, with Redis' delivery count for it and what
    its record says of its calls so far (see ``_attempts``)."""

    stream: str
    id: str
    fields: dict[str, str]
    deliveries: int
    attempts: Attempts | None = None  #: ``None``: a first delivery, no record
    suspect: bool = False  #: its consumer ended or stalled with it: it runs alone
    recorded: bool = False  #: a record of it is stored (forgotten when it ends)

    @property
    def key(self) -> tuple[str, str]:
        return (self.stream, self.id)

    @property
    def calls(self) -> int:
        """Calls before this one that did not succeed (failed, or their process ended)."""
        return 0 if self.attempts is None else self.attempts.calls


@dataclasses.dataclass(eq=False, slots=True)
class InFlight:
    """An entry whose listener call runs in this process; its lease is renewed until done."""

    entry: Entry
    lost: bool = False  #: another consumer reclaimed it (a renewal found it no longer ours)
    started: bool = False  #: its call began (else it waits in the queue or at the gate)


class Group:
    """One durable listener's consumer group, as this process takes part in it."""

    def __init__(self, rt: Runtime, listener: DurableListener) -> None:
        self.rt = rt
        self.listener = listener
        self.name = listener.group
        self.stream = rt.keys.stream(listener.event_name)
        self.restream = rt.keys.redeliver(listener.event_name, listener.group)
        self.dead_stream = rt.keys.dead(listener.event_name)
        self.runs = rt.keys.runs(listener.event_name, listener.group)
        self.counters = GroupCounters()
        self.in_flight: dict[tuple[str, str], InFlight] = {}
        self._changed = anyio.Event()
        self._waiting = 0  # tasks in wait_finished(): finish() signals only when there are
        self._retries: list[float] = []  # monotonic times at which scheduled retries fall due
        self.reclaim_wakeup = anyio.Event()
        #: serialises lease renewals and retry scheduling (both set an entry's idle time)
        self.idle_lock = anyio.Lock()
        self._acks: dict[str, list[str]] = {}
        self._forget: list[str] = []  # attempt records of acknowledged entries
        #: suspects queued or running: while there are any, nothing new is read or reclaimed
        self.suspects = 0
        #: ordinary calls running now; a suspect waits until there are none
        self.running = 0
        #: a suspect waits for its turn or runs: ordinary calls wait until it is done
        self.alone = 0
        self.alone_lock = anyio.Lock()
        #: a listener call's usual length (seconds, a moving average of the batched and lone
        #: ``tx`` calls): a batch runs its calls one after another, so it holds only as many
        #: as fit in ``BATCH_SECONDS``; a slow listener's entries run side by side instead
        self.call_seconds: float | None = None
        #: transactions of a group taking ``tx`` running now (see :meth:`tx_slots`)
        self.tx_running = 0
        #: transaction slots taken by workers (waiting for an entry, or running a batch)
        self.tx_reserved = 0
        #: the free transaction slots' connections, kept between batches (``_held``)
        self.connections: list[HeldConnection] = []
        self._gate = anyio.Event()
        opts = rt.options
        self.switch = (
            KillSwitch(
                trip_after=opts.trip_after,
                trip_ratio=opts.trip_ratio,
                trip_window=opts.trip_window,
                pause=opts.pause,
                max_pause=opts.max_pause,
            )
            if opts.kill_switch
            else None
        )
        self.tripped = anyio.Event()  #: set while paused: the pause task holds the pause
        self.resume_asked = anyio.Event()  #: an early resume asked in this process
        self._resumed = anyio.Event()
        self._resumed.set()
        self._ack_ready = anyio.Event()
        self._nogroup_backoff = NOGROUP_BACKOFF
        self._last_nogroup = -NOGROUP_RESET
        self._recovering = anyio.Lock()
        #: event versions this group met and could not read (warned about once each)
        self.unreadable_versions: set[int] = set()

    def __repr__(self) -> str:
        return f"Group({self.name!r}, stream={self.stream!r})"

    @property
    def streams(self) -> tuple[str, str]:
        return (self.stream, self.restream)

    def statistics(self) -> GroupStatistics:
        c = self.counters
        state = self.switch.state() if self.switch is not None else None
        return GroupStatistics(
            group=self.name,
            event=self.listener.event_name,
            listener=self.listener.name,
            in_flight=len(self.in_flight),
            paused=bool(state and state.paused),
            paused_since=state.paused_since if state else None,
            resumes_at=state.resumes_at if state else None,
            trips=state.trips if state else 0,
            **dataclasses.asdict(c),
        )

    def free_slots(self) -> int:
        """How many more entries to read: ``concurrency`` calls in flight; for a group whose
        calls share transactions, as many as its transactions at once can hold."""
        if self.suspects:  # a suspect runs alone: whatever is read now would wait beside it
            return 0
        limit = batch_limit(self)
        room = self.rt.options.concurrency if limit == 1 else self.tx_slots() * limit
        return max(0, room - len(self.in_flight))

    def tx_slots(self) -> int:
        """Transactions at once for a group whose calls share them: a few (``TX_SLOTS``), each
        holding a batch, while calls are quick; as many as ``concurrency`` when they are slow
        (a batch of one each). More transactions at once than the few that keep the database
        busy only make batches smaller: more commits, more connections, less throughput."""
        concurrency = self.rt.options.concurrency
        return min(concurrency, max(TX_SLOTS, -(-concurrency // batch_limit(self))))

    def take_connection(self) -> HeldConnection:
        """A free transaction slot's connection (kept from its last batch, if any)."""
        self.tx_running += 1
        if self.connections:
            return self.connections.pop()
        return HeldConnection(self.rt.engine, self.rt.keep)

    def give_back(self, held: HeldConnection) -> None:
        held.idle_since = time.monotonic()
        self.connections.append(held)  # the most recently used is taken first
        self.tx_running -= 1
        self.gate_changed()

    async def release_connections(self, *, idle_only: bool) -> None:
        """Give the free slots' kept connections back to the pool (those unused for
        ``HOLD_IDLE`` seconds, or all of them at stop)."""
        if not idle_only:  # at stop: side by side, each close bounded
            async with anyio.create_task_group() as tg:
                for held in self.connections:
                    tg.start_soon(held.release)
            return
        for held in list(self.connections):
            # checked again after each await: a worker may have taken it meanwhile
            if held in self.connections and held.idle():
                await held.release()

    def finish(self, entry: Entry) -> None:
        """Forget an entry this process no longer works on (done, retried later, or cancelled)."""
        flight = self.in_flight.pop(entry.key, None)
        if flight is None:
            return
        if flight.entry.suspect:
            self.suspects -= 1
            self.retry_at(time.monotonic())  # a reclaim pass now: the next suspect's turn
        if self._waiting:
            self._changed.set()  # replaced by the next wait: not one new event per entry

    def field(self, entry: Entry) -> str:
        """The field of *entry*'s attempt record in the group's hash."""
        return field_of(entry.id, entry.stream == self.restream)

    # -- running alone ---------------------------------------------------------------------------

    def gate_changed(self) -> None:
        """Wake the calls waiting at the gate (a suspect or an ordinary call ended)."""
        self._gate.set()

    async def wait_gate(self) -> None:
        """Return after the next change at the gate (callers check again in a loop)."""
        if self._gate.is_set():
            self._gate = anyio.Event()
        await self._gate.wait()

    async def wait_finished(self) -> None:
        """Return after the next entry in flight finished (callers check again in a loop)."""
        if self._changed.is_set():
            self._changed = anyio.Event()
        self._waiting += 1
        try:
            await self._changed.wait()
        finally:
            self._waiting -= 1

    def retry_at(self, when: float) -> None:
        """Have the reclaim loop look again at *when* (monotonic): a retry falls due then."""
        heapq.heappush(self._retries, when)
        self.reclaim_wakeup.set()

    def next_retry(self) -> float | None:
        return self._retries[0] if self._retries else None

    def retries_due(self, now: float) -> None:
        """Forget the retry times up to *now* (the reclaim pass that follows takes them)."""
        while self._retries and self._retries[0] <= now:
            heapq.heappop(self._retries)

    # -- the kill switch -------------------------------------------------------------------------

    @property
    def paused(self) -> bool:
        return self.switch is not None and self.switch.paused

    async def wait_resumed(self) -> None:
        while self.paused:
            await self._resumed.wait()

    def succeeded(self) -> None:
        """Count a call that returned (the kill switch's window; the end of an episode)."""
        switch = self.switch
        if switch is None:
            return
        switch.record(Outcome.OK)
        if switch.in_episode and (ended := switch.ended_episode()) is not None:
            self._episode_over(*ended)

    def failed(self, exc: BaseException) -> bool:
        """Count a call that raised; whether the failure is charged to its entry (not when
        the kill switch has tripped: the outage's fault, not the event's)."""
        switch = self.switch
        if switch is None:
            return True
        counted = self.listener.trips(exc)
        if switch.record(Outcome.FAILED if counted else Outcome.OTHER):
            self._trip(switch, exc)
        return switch.charging or not counted

    def _trip(self, switch: KillSwitch, exc: BaseException) -> None:
        state = switch.state()
        pause = switch.remaining()
        if switch.episode_trips == 1:  # one alarm per episode
            logger.error(
                "consumer group %r paused by its kill switch: %d of the last %d deliveries "
                "failed (last: %s: %s); no reading or reclaiming for %.1f s (doubling while "
                "it keeps failing, at most %.0f s); failures meanwhile are not charged to their "
                "entries. Resume early with 'python -m eventbus streams resume %s'",
                self.name,
                state.failures,
                state.deliveries,
                type(exc).__name__,
                safe_str(exc),
                pause,
                self.rt.options.max_pause,
                self.name,
            )
            self.rt.notify(
                GroupPaused(
                    group=self.name,
                    consumer=self.rt.consumer,
                    failures=state.failures,
                    deliveries=state.deliveries,
                    pause=pause,
                    resumes_at=state.resumes_at or 0.0,
                )
            )
        else:
            self.rt.log(
                logging.WARNING,
                ("paused", self.name),
                "consumer group %r still failing after its pause (%s: %s): paused again for %.1f s",
                self.name,
                type(exc).__name__,
                safe_str(exc),
                pause,
            )
        self._resumed = anyio.Event()
        self.tripped.set()
        self.gate_changed()

    def resume(self) -> None:
        """End the pause now (its time is up, or an operator asked)."""
        if self.switch is None or not self.switch.paused:
            return
        self.switch.resume()
        self.tripped = anyio.Event()
        self.resume_asked = anyio.Event()
        self._resumed.set()
        self.gate_changed()
        self.retry_at(time.monotonic())  # a reclaim pass now: the retries held meanwhile
        logger.warning("consumer group %r resumes reading after its pause", self.name)

    def _episode_over(self, since: float, trips: int) -> None:
        paused_for = max(0.0, time.time() - since)
        self.rt.notify(
            GroupResumed(
                group=self.name, consumer=self.rt.consumer, trips=trips, paused_for=paused_for
            )
        )
        logger.warning(
            "consumer group %r delivers again, %.1f s after its kill switch first tripped "
            "(%d pauses)",
            self.name,
            paused_for,
            trips,
        )

    # -- groups ----------------------------------------------------------------------------------

    async def ensure(self) -> None:
        """Create the group on both streams if missing (``MKSTREAM``; BUSYGROUP is fine).

        A new group starts at the stream's first entry (``0``), never at ``$``: events
        published before this service first started are delivered too; ``start="latest"``
        opts out. The redelivery stream always starts at ``0``. The group is registered for
        the stream first, so that the janitor keeps its entries should it vanish.
        """
        first = "0" if self.listener.start == "first" else "$"
        await register_group(self.rt, self.listener.event_name, self.name)
        for stream, start in ((self.stream, first), (self.restream, "0")):
            await create_group(self.rt.client, stream, self.name, start)

    async def recover(self, exc: BaseException) -> None:
        """The group (or its stream) is gone: recreate it at ``0``, raise the alarm, and pause
        with a growing backoff, so that a group that keeps vanishing cannot spin a loop.

        Several loops of the group may see the same loss; one recovers, the others wait.
        """
        if self._recovering.locked():
            async with self._recovering:
                return
        async with self._recovering:
            now = time.monotonic()
            if now - self._last_nogroup > NOGROUP_RESET:
                self._nogroup_backoff = NOGROUP_BACKOFF
            self._last_nogroup = now
            self.counters.recreated += 1
            logger.error(
                "consumer group %r of stream %r is missing (%s): recreating it at id 0. Entries "
                "added and not yet read before it vanished are lost to this group unless "
                "republished (RedisStreams.republish(since=...), 'streams republish')",
                self.name,
                self.stream,
                safe_str(exc),
            )
            self.rt.notify(GroupRecreated(stream=self.stream, group=self.name, error=str(exc)))
            try:
                await self.ensure()
            except REDIS_ERRORS as again:
                self.rt.log(
                    logging.ERROR,
                    ("recreate", self.name),
                    "could not recreate consumer group %r: %s",
                    self.name,
                    safe_str(again),
                )
            await anyio.sleep(self._nogroup_backoff)
            self._nogroup_backoff = min(self._nogroup_backoff * 2, NOGROUP_MAX_BACKOFF)

    # -- acknowledgements ------------------------------------------------------------------------

    def ack_later(self, entry: Entry) -> None:
        """Queue an acknowledgement; the ack task sends what accumulated in one ``XACK``."""
        self._acks.setdefault(entry.stream, []).append(entry.id)
        if entry.recorded:
            self._forget.append(self.field(entry))
        self._ack_ready.set()

    async def ack_loop(self) -> None:
        while True:
            await self._ack_ready.wait()
            await anyio.sleep(ACK_LINGER)
            await self.flush_acks()

    async def flush_acks(self) -> None:
        """Send the queued acknowledgements. One that fails leaves its entries pending: they
        come back after the visibility time, and the inbox (or the listener) absorbs them.

        Shielded (for a few seconds at most): a stop must not cancel acknowledgements of
        calls that succeeded."""
        self._ack_ready = anyio.Event()
        batch, self._acks = self._acks, {}
        forget, self._forget = self._forget, []
        for stream, ids in batch.items():
            try:
                with anyio.CancelScope(shield=True), anyio.move_on_after(ACK_PATIENCE):
                    await self.rt.client.xack(stream, self.name, *ids)
            except REDIS_ERRORS as exc:
                self.rt.log(
                    logging.WARNING,
                    ("ack", self.name),
                    "could not acknowledge %d entries of group %r (%s); they will be redelivered",
                    len(ids),
                    self.name,
                    safe_str(exc),
                )
        if forget:
            await self.forget(forget)

    async def forget(self, fields: list[str]) -> None:
        """Delete attempt records of entries that ended. One left behind does no harm: its
        entry is gone, and the hash expires after the retention period without writes."""
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(ACK_PATIENCE):
                await self.rt.client.hdel(self.runs, *fields)
        except REDIS_ERRORS as exc:
            self.rt.log(
                logging.WARNING,
                ("forget", self.name),
                "could not delete %d attempt records of group %r (%s)",
                len(fields),
                self.name,
                safe_str(exc),
            )


#: how long one batch of ``tx`` calls may take, by the calls' usual length: the latency a
#: batch adds to its last call, and the point past which calls one after another in one
#: transaction would be slower than the same calls in transactions side by side
BATCH_SECONDS = 0.05
#: the largest batch before a call was timed
FIRST_BATCH = 4
#: transactions at once of a group whose calls share them (while a batch holds several):
#: enough to keep the database and this process busy while one waits on a round trip
TX_SLOTS = 4


def note_call(group: Group, seconds: float) -> None:
    """Fold one ``tx`` call's length into the group's moving average."""
    old = group.call_seconds
    group.call_seconds = seconds if old is None else old + (seconds - old) / 8


def shares_transactions(group: Group) -> bool:
    """Whether the group's calls run in shared transactions (``_batch``): a listener taking
    ``tx``, without ``call_timeout`` (which cuts each call short on its own)."""
    return group.listener.takes_tx and not group.rt.options.call_timeout


def batch_limit(group: Group) -> int:
    """How many entries one transaction may hold now: ``FIRST_BATCH`` until a call was
    timed, then as many calls as fit in ``BATCH_SECONDS``, ``tx_batch`` at most; 1 (the lone
    path) for listeners not taking ``tx`` and with ``call_timeout`` (each call is cut short
    on its own)."""
    opts = group.rt.options
    if not shares_transactions(group):
        return 1
    if group.call_seconds is None:  # a slow listener's first batch must not hold many
        return min(opts.tx_batch, FIRST_BATCH)
    return max(1, min(opts.tx_batch, int(BATCH_SECONDS / max(group.call_seconds, 1e-6))))
