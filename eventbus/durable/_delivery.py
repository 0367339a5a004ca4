"""One delivery: call the listener for one stream entry, then acknowledge it, schedule its
retry, or move it to the dead-letter stream and the failure table.

Retries need no extra keys: a failed entry stays pending, and its idle time is set to
``visibility - delay`` (``XCLAIM ... IDLE ... JUSTID``, which leaves the delivery count
alone), so that the reclaim loop of any consumer of the group takes it again after *delay*
with the count one higher. The count is Redis' own: a process killed during the call counts
as a delivery too, so a listener that crashes its process still ends in the dead letters.

Cancellation (shutdown, a cancel scope) never acknowledges: the entry stays pending and comes
back after the visibility time.
"""

from __future__ import annotations

import inspect
import logging
import time
from typing import Any

import anyio

from .._events import Event
from .._exceptions import ListenerTimeoutError
from .._failures import FailureRecord, FailureStatus, safe_str
from .._stored import decode_stored, readable
from ._attempts import Attempts
from ._context import Delivery, delivery_var
from ._envelope import MAX_FIELDS, DeadInfo, Envelope, EnvelopeError, raw_value, shorten
from ._events import DeadLettered
from ._exceptions import DeliveriesExhaustedError
from ._group import Entry, Group, note_call
from ._link import DurableLink, failure_id, link_of
from ._runtime import REDIS_ERRORS, db_deadline, logger, utcnow
from ._scripts import ScriptCall, run_scripts
from ._tx import Patience, call_with_tx, ensure_alive

__all__ = ["deliver", "failed", "hand_back", "prepare", "ready", "succeeded", "undecodable"]


async def deliver(group: Group, entry: Entry) -> None:
    """Handle one entry to its end; never raises but for cancellation: whatever one entry
    does, the consumer and the transport go on with the next."""
    try:
        await _deliver(group, entry)
    except Exception as exc:  # a case not foreseen: this entry goes, the consumer stays
        logger.exception(
            "durable listener %r: entry %s of %r could not be handled; dead-lettering it",
            group.listener.name,
            entry.id,
            entry.stream,
        )
        try:
            await _dead_letter(group, entry, None, None, exc)
        except Exception:  # still pending: it comes back after the visibility time
            logger.exception("could not dead-letter entry %s of %r", entry.id, entry.stream)
    finally:
        group.finish(entry)


def _envelope(group: Group, entry: Entry) -> Envelope:
    """:raises EnvelopeError: for an entry that is not an envelope of the group's event"""
    env = Envelope.from_fields(entry.id, entry.fields)
    wanted = group.listener.event_name
    if env.name != wanted:
        raise EnvelopeError(entry.id, f"it is an event for {shorten(env.name)}, not for {wanted!r}")
    return env


async def ready(group: Group, entry: Entry) -> tuple[Envelope, Event] | None:
    """The start of a delivery: the entry's envelope and decoded event, counted delivered;
    ``None`` when it is not to be called (see :func:`prepare`), or dead for a payload that
    does not decode (the same bytes fail the same way at every delivery: no retry)."""
    env = await prepare(group, entry)
    if env is None:
        return None
    try:
        event = decode(group, env)
    except Exception as exc:
        await undecodable(group, entry, env, exc)
        return None
    group.counters.delivered += 1
    return env, event


async def _deliver(group: Group, entry: Entry) -> None:
    started = await ready(group, entry)
    if started is None:
        return
    env, event = started
    token = delivery_var.set(
        Delivery.of(env, group=group.name, entry_id=entry.id, deliveries=entry.deliveries)
    )
    try:
        ran = await _call(group, event, env)
    except Exception as exc:
        group.counters.failed += 1
        await _failed(group, entry, env, event, exc)
        return
    finally:
        delivery_var.reset(token)
    await succeeded(group, entry, env, ran)


async def prepare(group: Group, entry: Entry) -> Envelope | None:
    """The entry's envelope; ``None`` when it is not to be
    called: dead-lettered (damaged, or out of calls), or a suspect whose call could not be
    recorded (it comes back)."""
    opts = group.rt.options
    try:
        env = _envelope(group, entry)
    except EnvelopeError as exc:  # not ours, or damaged: no listener can take it, ever
        await _dead_letter(group, entry, None, None, exc)
        return None
    if not readable(group.rt.registry, env.name, env.version):
        await _hold(group, entry, env)
        return None
    attempts = entry.attempts
    if (
        attempts is not None
        and attempts.calls >= opts.max_deliveries
        and (attempts.alone or not entry.suspect)  # never for an entry that never ran alone
    ):
        exhausted = DeliveriesExhaustedError(
            group.name,
            entry.deliveries,
            opts.max_deliveries,
            crashes=attempts.crashes,
            failures=attempts.failures,
        )
        await _dead_letter(group, entry, env, None, exhausted)
        return None
    if entry.suspect and not await _start_alone(group, entry):
        return None
    return env


def decode(group: Group, env: Envelope) -> Event:
    """A stored payload as this process's type reads it: upcast to the declared version, read
    tolerantly where the type says so (each ignored field counted).

    :raises Exception: whatever decoding raises (the same bytes fail the same way every time)
    """
    rt = group.rt
    stored = decode_stored(rt.registry, env.name, env.payload, env.version)
    for field in stored.ignored:
        rt.ignored[env.name, field] += 1
    return stored.event


async def undecodable(group: Group, entry: Entry, env: Envelope, exc: Exception) -> None:
    """A payload that does not decode: dead at once (every delivery would fail the same)."""
    group.counters.failed += 1
    await _dead_letter(group, entry, env, None, exc)


async def succeeded(group: Group, entry: Entry, env: Envelope, ran: bool) -> None:
    """A call returned (or the inbox showed it ran before): acknowledge the entry."""
    if not ran:
        group.counters.duplicates += 1
    else:
        group.counters.succeeded += 1
        if group.switch is not None:
            group.succeeded()
    group.ack_later(entry)
    dead = _handed_back(group, entry)
    if dead is not None:
        await _resolve(group, dead, env)


async def _start_alone(group: Group, entry: Entry) -> bool:
    """Record a suspect's call as a crash before it begins (a normal outcome takes it back);
    ``False`` if the record could not be written: the entry comes back after visibility."""
    rt = group.rt
    rec = (entry.attempts or Attempts()).starting_alone(entry.deliveries)
    try:
        await rt.scripts.record(
            keys=[group.runs], args=[group.field(entry), rec.encode(), _record_ttl_ms(group)]
        )
    except REDIS_ERRORS as err:
        rt.log(
            logging.WARNING,
            ("record", group.name),
            "could not record the call of suspect entry %s of group %r (%s); it comes back "
            "after the visibility time",
            entry.id,
            group.name,
            safe_str(err),
        )
        return False
    entry.attempts, entry.recorded = rec, True
    rt.log(
        logging.WARNING,
        ("alone", group.name),
        "entry %s of group %r came back after its consumer ended or stalled (delivery %d, "
        "%d calls so far): running it alone",
        entry.id,
        group.name,
        entry.deliveries,
        rec.calls - 1,
    )
    return True


def _record_ttl_ms(group: Group) -> int:
    return int(group.rt.options.retention.total_seconds() * 1000)


def _handed_back(group: Group, entry: Entry) -> DeadInfo | None:
    """The ``dead_*`` fields of an entry handed back to this group, which name its failure
    row; ``None`` for any other entry. Fields on the event's own stream, or naming another
    group, are ignored: whoever can write to Redis could otherwise resolve or overwrite any
    failure row (:func:`_owns` checks the row itself)."""
    if entry.stream != group.restream:
        return None
    dead = DeadInfo.from_fields(entry.fields)
    if dead is None or dead.group != group.name or not dead.failure_id:
        return None
    return dead


def _owns(group: Group, row: FailureRecord | None) -> bool:
    """Whether *row* is a failure row of this group (one it may resolve or update); a row
    written before the ``durable_*`` columns existed says so in its note."""
    link = link_of(row) if row is not None else None
    return link is not None and link.group == group.name


async def _call(group: Group, event: Event, env: Envelope) -> bool:
    """Call the listener within ``call_timeout``; ``False`` when the inbox shows the event
    was processed already.

    :raises ListenerTimeoutError: if an async call ran past ``call_timeout`` (cancelled: its
        transaction, if it takes ``tx``, rolls back)
    """
    limit, listener = group.rt.options.call_timeout, group.listener
    if limit is None or not listener.is_async:
        return await _run(group, event, env)
    with anyio.move_on_after(limit):  # only its own deadline: a stop still cancels
        return await _run(group, event, env)
    raise ListenerTimeoutError(listener.name, limit)


async def _run(group: Group, event: Event, env: Envelope) -> bool:
    """:raises TimeoutError: if the transport's own part of a ``tx`` call (the connection,
    the inbox's row, the commit) waited on the database past ``db_timeout``"""
    rt, listener = group.rt, group.listener
    if listener.takes_tx:
        patience = Patience(rt.options.db_timeout)  # on our waits, not on the listener's
        with patience.scope:
            async with rt.engine.begin() as conn:
                if not await rt.inbox.claim(
                    conn, group=group.name, event_id=env.event_id, now=utcnow()
                ):
                    return False
                began = time.perf_counter()
                try:
                    with patience.paused():  # the listener's own work: call_timeout bounds it
                        await call_with_tx(listener, event, conn)
                finally:  # then the commit, or the rollback after the listener raised
                    note_call(group, time.perf_counter() - began)
                await ensure_alive(conn, listener)  # a silent rollback is not a success
        if patience.scope.cancelled_caught:  # committed or not: a retry finds the inbox row
            raise patience.error()
        return True
    if listener.is_async:
        value: Any = listener.fn(event)
        if inspect.isawaitable(value):
            await value
        return True
    await anyio.to_thread.run_sync(listener.fn, event, abandon_on_cancel=True)
    return True


async def failed(
    group: Group, entry: Entry, env: Envelope, event: Event | None, exc: Exception
) -> None:
    """A call raised: schedule its retry, or dead-letter it at its last call."""
    group.counters.failed += 1
    await _failed(group, entry, env, event, exc)


async def _hold(group: Group, entry: Entry, env: Envelope) -> None:
    """An entry of a newer event version than this process reads: left pending, its
    delivery not counted, for a process that declares the version (a rolling deploy that
    upgrades consumers after publishers loses nothing); one WARNING per (group, version)."""
    rt = group.rt
    group.counters.held += 1
    if env.version not in group.unreadable_versions:
        group.unreadable_versions.add(env.version)
        known = rt.registry.get(env.name).__event_version__
        logger.warning(
            "durable listener %r (group %r): event %r (%s) is stored at version %d, but this "
            "process declares version %d with unknown_fields='reject'; left pending, not dead, "
            "until a process that declares version %d takes it: deploy that version "
            "(logged once per group and version)",
            group.listener.name,
            group.name,
            env.name,
            env.event_id,
            env.version,
            known,
            env.version,
        )
    group.finish(entry)  # no renewal from now on: it would reset the idle time set below
    try:
        async with group.idle_lock:
            await rt.scripts.hold(
                keys=[entry.stream],
                args=[group.name, rt.consumer, 0, max(0, entry.deliveries - 1), entry.id],
            )
    except REDIS_ERRORS as err:  # still pending: it comes back after the visibility time
        rt.log(logging.WARNING, ("hold", group.name), "could not hold an entry: %s", err)


async def hand_back(group: Group, entries: list[Entry]) -> None:
    """Entries whose call never began here (a stop): pending for any consumer's next reclaim
    at once, their delivery not counted: they come back as they were, not as suspects."""
    rt = group.rt
    mine = [e for e in entries if not (f := group.in_flight.get(e.key)) or not f.lost]
    for entry in entries:
        group.finish(entry)  # no renewal from now on: it would reset the idle time set below
    idle_ms = int(rt.options.visibility * 1000)
    calls: list[ScriptCall] = [
        (
            rt.scripts.hold,
            [entry.stream],
            [group.name, rt.consumer, str(idle_ms), str(max(0, entry.deliveries - 1)), entry.id],
        )
        for entry in mine
    ]
    if not calls:
        return
    try:
        async with group.idle_lock:
            replies = await run_scripts(rt.client, calls)
    except REDIS_ERRORS as err:  # still pending: they come back after the visibility time
        replies = [err]
    for reply in replies:
        if isinstance(reply, Exception):
            rt.log(logging.WARNING, ("hold", group.name), "could not hand back: %s", reply)
            return


async def _failed(
    group: Group, entry: Entry, env: Envelope, event: Event | None, exc: Exception
) -> None:
    rt, opts = group.rt, group.rt.options
    charged = group.failed(exc)
    flight = group.in_flight.get(entry.key)
    if flight is not None and flight.lost:
        return  # another consumer has it now; its outcome counts
    before = entry.attempts or Attempts()
    rec = before.failed(entry.deliveries) if charged else before.excused(entry.deliveries)
    if charged and rec.calls >= opts.max_deliveries:
        await _dead_letter(group, entry, env, event, exc)
        return
    delay = opts.retry_delay(rec.calls)
    rt.log(
        logging.WARNING,
        ("failed", group.name, type(exc)),
        "durable listener %r failed for %r (event %s, call %d of %d%s): %s: %s; retrying in %.2f s",
        group.listener.name,
        env.name,
        env.event_id,
        rec.calls,
        opts.max_deliveries,
        "" if charged else ", not charged: its group's kill switch tripped",
        type(exc).__name__,
        safe_str(exc),
        delay,
    )
    group.finish(entry)  # no renewal from now on: it would reset the idle time set below
    idle_ms = max(0, int((opts.visibility - delay) * 1000))
    try:
        async with group.idle_lock:
            await rt.scripts.retry(
                keys=[entry.stream, group.runs],
                args=[
                    group.name,
                    rt.consumer,
                    idle_ms,
                    entry.id,
                    group.field(entry),
                    rec.encode(),
                    _record_ttl_ms(group),
                ],
            )
    except REDIS_ERRORS as err:  # it comes back after the full visibility time instead
        rt.log(logging.WARNING, ("retry", group.name), "could not schedule a retry: %s", err)
        return
    group.counters.retried += 1
    group.retry_at(time.monotonic() + delay)


async def _dead_letter(
    group: Group,
    entry: Entry,
    env: Envelope | None,
    event: Event | None,
    exc: BaseException,
) -> None:
    """Write the failure row (and wait until it is stored), then move the entry to the
    dead-letter stream and acknowledge it, atomically (the ``DEAD_LETTER`` script)."""
    rt, opts = group.rt, group.rt.options
    previous = await _previous_row(group, entry, env)
    fid = previous.id if previous else failure_id(group.name, entry.stream, entry.id)
    rec = _record(group, entry, env, event, exc, fid)
    await _store(group, rec, previous, exc)
    error = f"{rec.error_type}: {rec.message}"
    info = DeadInfo(
        group=group.name,
        entry_id=entry.id,
        deliveries=entry.deliveries,
        error=error,
        failure_id=fid,
    )
    args: list[str | bytes] = [group.name, entry.id, str(opts.dead_maxlen)]
    kept = [f for f in entry.fields.items() if not f[0].startswith("dead_")][:MAX_FIELDS]
    for field, value in kept:  # at most MAX_FIELDS: an entry with more was refused for it
        args += (raw_value(field), raw_value(value))  # a damaged entry's bytes as they were
    for field, value in info.fields().items():
        args += (field, value)
    await rt.fault("dead-letter")
    try:
        moved = await rt.scripts.dead_letter(keys=[entry.stream, group.dead_stream], args=args)
    except REDIS_ERRORS as err:  # still pending: dead-lettered again (same row) after visibility
        rt.log(logging.WARNING, ("dead", group.name), "could not dead-letter: %s", err)
        return
    if not moved:  # another consumer took the entry over and finished it: its outcome counts
        rt.log(
            logging.WARNING,
            ("dead-gone", group.name),
            "entry %s of group %r was no longer pending when this consumer dead-lettered it "
            "(another consumer reclaimed it after a stall); failure row %s may be stale",
            entry.id,
            group.name,
            fid[:12],
        )
        return
    group.counters.dead += 1
    if entry.recorded:
        await group.forget([group.field(entry)])
    name = env.name if env else group.listener.event_name
    event_id = env.event_id if env else ""
    rt.log(
        logging.ERROR,
        ("dead", group.name),
        "durable listener %r: event %r (%s) is dead after %d calls in group %r: %s; "
        "see 'python -m eventbus failures show %s' and 'streams dead'",
        group.listener.name,
        name,
        event_id,
        rec.attempts,
        group.name,
        error,
        fid[:12],
    )
    rt.notify(
        DeadLettered(
            event_name=name,
            event_id=event_id,
            group=group.name,
            deliveries=entry.deliveries,
            error=error,
            failure_id=fid,
        )
    )


def _record(
    group: Group,
    entry: Entry,
    env: Envelope | None,
    event: Event | None,
    exc: BaseException,
    fid: str,
) -> FailureRecord:
    name = env.name if env else group.listener.event_name
    event_id = env.event_id if env else entry.id
    # As for an in-process failure: the correlation id of the first event of a chain is its
    # own id; failures of one business transaction are then found (and retried) together.
    causation = env.causation_id if env else None
    correlation = (env.correlation_id or env.event_id) if env else None
    if event is not None:
        base = FailureRecord.from_exception(
            event=event,
            event_id=event_id,
            listener=group.listener.name,
            exc=exc,
            causation_id=causation,
            correlation_id=correlation,
        )
    else:
        base = FailureRecord.minimal(
            event_name=name,
            event_id=event_id,
            listener=group.listener.name,
            exc=exc,
            attempts=entry.deliveries,
            causation_id=causation,
            correlation_id=correlation,
        )
    link = DurableLink(
        group=group.name,
        stream=entry.stream,
        entry=entry.id,
        deliveries=entry.deliveries,
        seq=env.seq if env else None,
        occurred_at=env.occurred_at if env else None,
        version=env.version if env else None,
    )
    return base.replace(
        id=fid,
        payload=env.payload if env else base.payload,
        payload_ok=env is not None,
        attempts=_calls_made(entry, env, exc),
        status=FailureStatus.DEAD,
        note=link.note(),
        **link.columns(),
    )


def _calls_made(entry: Entry, env: Envelope | None, exc: BaseException) -> int:
    """The calls a dead letter reports: none ran for a damaged entry (its deliveries are
    shown), the charged ones for an exhausted entry, else those before plus the last."""
    if env is None:
        return entry.deliveries
    if isinstance(exc, DeliveriesExhaustedError):
        return exc.crashes + exc.failures
    return (entry.attempts or Attempts()).failed(entry.deliveries).calls


async def _previous_row(group: Group, entry: Entry, env: Envelope | None) -> FailureRecord | None:
    """The failure row of an entry handed back to this group (it dies again: the row is
    updated); ``None`` for a first death, or when the row named is not this group's row of
    this event (as :func:`_resolve` checks: a forged entry naming a real row id of the group
    would otherwise overwrite another event's failure)."""
    dead = _handed_back(group, entry)
    if dead is None:
        return None
    try:
        with db_deadline(group.rt.options.db_timeout):
            row = await group.rt.failures.get(dead.failure_id)
    except Exception as err:  # a row of its own then: never one that may not be ours
        logger.error("could not read the failure row %s: %s", dead.failure_id, safe_str(err))
        return None
    if row is not None and not (_owns(group, row) and _same_event(row, dead, env)):
        logger.warning(
            "entry %s of %r names failure row %s, which is not a row of group %r for its "
            "event: ignored",
            entry.id,
            entry.stream,
            dead.failure_id[:12],
            group.name,
        )
        return None
    return row


def _same_event(row: FailureRecord, dead: DeadInfo, env: Envelope | None) -> bool:
    """Whether *row* is the failure of the event *env* (or, for an entry that does not
    decode, the row of the damaged entry it was handed back from: such a row's event id is
    its first entry's id, and it has no payload that decoded)."""
    if env is None:
        return not row.payload_ok and row.event_id == dead.entry_id
    return row.event_id == env.event_id


async def _store(
    group: Group, rec: FailureRecord, old: FailureRecord | None, exc: BaseException
) -> None:
    """Store the row (an update of *old*, this group's row of a redelivered event that died
    again), waiting until it is written: the dead letter and the acknowledgement come after
    it."""
    rt = group.rt
    try:
        if old is not None:
            with db_deadline(rt.options.db_timeout):  # a database gone silent: logged below
                await rt.failures.update(
                    rec.replace(
                        attempts=old.attempts + rec.attempts, first_failed_at=old.first_failed_at
                    )
                )
        else:
            rt.record_failure(rec, exc)
        with anyio.move_on_after(rt.options.visibility / 2):
            await rt.failures.flush()
    except Exception as err:
        logger.error("could not store the failure row %s: %s", rec.id, safe_str(err))


async def _resolve(group: Group, dead: DeadInfo, env: Envelope) -> None:
    """A redelivered dead event succeeded: its failure row becomes ``resolved``."""
    rt = group.rt
    try:
        with db_deadline(rt.options.db_timeout):
            old = await rt.failures.get(dead.failure_id)
        if old is None or old.status is FailureStatus.RESOLVED:
            return
        if not _owns(group, old) or old.event_id != env.event_id:
            logger.warning(
                "event %s succeeded in group %r, but failure row %s is not its row: left as is",
                env.event_id,
                group.name,
                dead.failure_id[:12],
            )
            return
        with db_deadline(rt.options.db_timeout):
            await rt.failures.update(
                old.replace(status=FailureStatus.RESOLVED, resolved_at=utcnow())
            )
    except Exception as exc:
        logger.warning(
            "event %s succeeded on redelivery but its failure row %s could not be resolved: %s",
            env.event_id,
            dead.failure_id,
            safe_str(exc),
        )
