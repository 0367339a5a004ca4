"""Re-running recorded failures: rehydrate the payload, call the listener by its stable name.

The listener runs in the chain of the failed emission: ``current_emission()`` gives that
emission's ids, and what the listener emits is caused by it. A ``once``/``times`` listener
that unsubscribed itself as its last call started is still called for the failures recorded
for it (the latest :data:`~eventbus._core._table.SPENT_KEPT` such listeners are kept, until those
rows are resolved or dead), unless another listener was subscribed under that name since:
that one is called. A used-up listener is never called for another listener's row.

A row that cannot be retried (its listener is gone, its event type is no longer declared,
its payload was not encodable or no longer fits) stays ``pending`` with the reason in its
``note``, and is reported as skipped: an operator can fix the code and retry again.

A dead row of a durable listener (:func:`is_durable`) is not called
here: it is handed back to its consumer group (``redelivered``), whose consumers in the
service's processes run it again; its row stays ``pending`` until one of them succeeds.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from .._codec import decode_payload
from .._exceptions import PayloadError, UnknownEventError
from .._failures import FailureRecord, FailureStatus, check_failure_ids, qualified_type, safe_str
from .._patterns import matches
from ._calls import call_once
from ._emission import Emission

if TYPE_CHECKING:
    from ..abc import DurableTransport, FailureStore
    from ._listeners import Listener
    from ._nesting import Nesting
    from ._table import ListenerTable

__all__ = ["DURABLE_NOTE", "RetryItem", "RetryParts", "RetryReport", "is_durable", "retry_failures"]

logger = logging.getLogger("eventbus.retry")

RetryResult = Literal["resolved", "failed", "dead", "skipped", "redelivered"]

#: how the note of a durable listener's failure row begins (``durable group=... entry=...``)
DURABLE_NOTE = "durable "


def is_durable(rec: FailureRecord) -> bool:
    """A durable listener's row: its ``durable_group`` column, or (a row written before the
    column existed) its note."""
    return rec.durable_group is not None or (rec.note or "").startswith(DURABLE_NOTE)


@dataclasses.dataclass(frozen=True, slots=True)
class RetryParts:
    """What a retry run uses of a bus (taken when the run starts)."""

    table: ListenerTable  #: finds listeners by name, spent ones too; knows the registry
    nesting: Nesting  #: puts the call in the failed emission's chain
    store: FailureStore  #: where the rows are read and updated
    transport: DurableTransport | None  #: hands durable listeners' dead rows back


@dataclasses.dataclass(frozen=True, slots=True)
class RetryItem:
    """What happened to one failure row in a retry run."""

    failure_id: str
    event_name: str
    listener: str
    result: RetryResult
    attempts: int
    reason: str | None = None  #: why it failed again or was skipped


@dataclasses.dataclass(frozen=True, slots=True)
class RetryReport:
    """The outcome of :meth:`EventBus.retry_failures`, one :class:`RetryItem` per row tried."""

    items: tuple[RetryItem, ...] = ()

    def _count(self, result: RetryResult) -> int:
        return sum(1 for i in self.items if i.result == result)

    @property
    def resolved(self) -> int:
        """Rows whose listener succeeded; now ``resolved``."""
        return self._count("resolved")

    @property
    def failed(self) -> int:
        """Rows whose listener failed again; still ``pending``, one attempt more."""
        return self._count("failed")

    @property
    def dead(self) -> int:
        """Rows that failed again and reached ``max_attempts``; now ``dead``."""
        return self._count("dead")

    @property
    def redelivered(self) -> int:
        """Dead rows of durable listeners handed back to their consumer group."""
        return self._count("redelivered")

    @property
    def skipped(self) -> int:
        """Rows that could not be retried; still ``pending``, with the reason in ``note``."""
        return self._count("skipped")

    def __str__(self) -> str:
        redelivered = f", {self.redelivered} redelivered" if self.redelivered else ""
        return (
            f"{len(self.items)} retried: {self.resolved} resolved, {self.failed} failed again, "
            f"{self.dead} dead, {self.skipped} skipped{redelivered}"
        )


async def retry_failures(
    parts: RetryParts,
    *,
    event: str | None = None,
    listener: str | None = None,
    limit: int | None = None,
    max_attempts: int = 5,
    correlation: str | None = None,
    ids: Sequence[str] | None = None,
) -> RetryReport:
    """:meth:`EventBus.retry_failures` (which documents it) over the bus's *parts*."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts={max_attempts!r} must be >= 1")
    if correlation is not None and (not isinstance(correlation, str) or not correlation):
        raise ValueError(f"correlation={correlation!r} must be a correlation id (a string)")
    if ids is not None:
        wanted = check_failure_ids(ids, call="retry_failures")
        given = [n for n, v in (("event", event), ("listener", listener), ("limit", limit),
                                ("correlation", correlation)) if v is not None]  # fmt: skip
        if given:
            raise ValueError(
                "retry_failures(ids=...) names the failures itself; drop "
                + ", ".join(f"{name}=" for name in given)
            )
        return await _retry_ids(parts, wanted, max_attempts)
    query = functools.partial(
        parts.store.query, status=FailureStatus.PENDING, event=event, listener=listener
    )
    # correlation= only when given: a store written before it existed works without it.
    rows = await (
        query(limit=limit) if correlation is None else query(limit=limit, correlation=correlation)
    )
    if parts.transport is not None:
        dead_query = functools.partial(
            parts.store.query, status=FailureStatus.DEAD, event=event, listener=listener
        )
        dead = await (
            dead_query(limit=limit)
            if correlation is None
            else dead_query(limit=limit, correlation=correlation)
        )
        rows += [r for r in dead if is_durable(r)]
        rows.sort(key=lambda r: r.last_failed_at, reverse=True)
    return RetryReport(tuple([await _retry_logged(parts, rec, max_attempts) for rec in rows[::-1]]))


async def _retry_ids(parts: RetryParts, ids: list[str], max_attempts: int) -> RetryReport:
    """``retry_failures(ids=...)``: each row named, oldest first; the others reported."""
    rows: list[FailureRecord] = []
    items: list[RetryItem] = []
    for fid in dict.fromkeys(ids):
        rec = await parts.store.get(fid)
        if rec is None:
            items.append(RetryItem(fid, "", "", "skipped", 0, "no failure has this id"))
        elif rec.status is FailureStatus.PENDING or (
            parts.transport is not None and rec.status is FailureStatus.DEAD and is_durable(rec)
        ):
            rows.append(rec)
        else:
            reason = f"it is {rec.status.value}; only pending failures are retried"
            items.append(
                RetryItem(rec.id, rec.event_name, rec.listener, "skipped", rec.attempts, reason)
            )
    rows.sort(key=lambda r: r.last_failed_at)
    items += [await _retry_logged(parts, rec, max_attempts) for rec in rows]
    return RetryReport(tuple(items))


async def _retry_logged(parts: RetryParts, rec: FailureRecord, max_attempts: int) -> RetryItem:
    item = await _retry_one(parts, rec, max_attempts)
    log = logger.info if item.result == "resolved" else logger.warning
    log(
        "retry of %s (%r for %r): %s%s",
        rec.id,
        rec.listener,
        rec.event_name,
        item.result,
        f": {item.reason}" if item.reason else "",
    )
    return item


async def _retry_one(parts: RetryParts, rec: FailureRecord, max_attempts: int) -> RetryItem:
    if is_durable(rec):
        return await _redeliver(parts, rec)
    reason = _why_not_retryable(parts, rec)
    if reason is None:
        try:
            event = decode_payload(parts.table.registry, rec.event_name, rec.payload)
        except UnknownEventError:
            reason = f"event type {rec.event_name!r} is no longer declared in the bus's registry"
        except PayloadError as exc:
            reason = f"stored payload no longer fits the event type: {exc}"
    if reason is not None:
        await parts.store.update(rec.replace(note=f"not retried: {reason}"))
        return RetryItem(rec.id, rec.event_name, rec.listener, "skipped", rec.attempts, reason)

    sub = _listener(parts, rec)
    assert sub is not None  # checked by _why_not_retryable
    # In the failed emission's chain, as the first call was: what the listener emits is caused
    # by that event, and current_emission() gives its ids.
    emission = Emission.restored(event, rec.event_id, rec.causation_id, rec.correlation_id)
    hopping = parts.nesting.enter_hop(emission)
    try:
        outcome = await call_once(sub, event)
    finally:
        parts.nesting.leave_hop(hopping)
    now = datetime.now(UTC)
    attempts = rec.attempts + 1
    if outcome.error is None:
        await parts.store.update(
            rec.replace(
                status=FailureStatus.RESOLVED,
                attempts=attempts,
                resolved_at=now,
                note="resolved by retry",
            )
        )
        parts.table.settled(sub, rec.id)
        return RetryItem(rec.id, rec.event_name, rec.listener, "resolved", attempts)
    err = outcome.error
    dead = attempts >= max_attempts
    if dead:
        parts.table.settled(sub, rec.id)
    await parts.store.update(
        rec.replace(
            status=FailureStatus.DEAD if dead else FailureStatus.PENDING,
            attempts=attempts,
            last_failed_at=now,
            error_type=qualified_type(err),
            message=safe_str(err),
            traceback="".join(traceback.format_exception(err)),
            note=f"dead after {attempts} attempts (max_attempts={max_attempts})" if dead else None,
        )
    )
    reason = f"{qualified_type(err)}: {safe_str(err)}"
    return RetryItem(
        rec.id, rec.event_name, rec.listener, "dead" if dead else "failed", attempts, reason
    )


def _why_not_retryable(parts: RetryParts, rec: FailureRecord) -> str | None:
    if not rec.payload_ok:
        return "its payload could not be encoded when the failure was recorded (see payload)"
    sub = _listener(parts, rec)
    if sub is None:
        return f"no listener named {rec.listener!r} is subscribed on this bus"
    if not matches(sub.pattern, rec.event_name):
        return f"listener {rec.listener!r} is subscribed to {sub.pattern!r}, not {rec.event_name!r}"
    return None


def _listener(parts: RetryParts, rec: FailureRecord) -> Listener | None:
    """The listener subscribed under *rec*'s name; else the ``once``/``times`` listener whose
    failure *rec* is, if its calls are all taken (it unsubscribed itself as its last call
    started) and it is kept."""
    sub = parts.table.get(rec.listener)
    return sub if sub is not None else parts.table.get_spent(rec.listener, rec.id)


async def _redeliver(parts: RetryParts, rec: FailureRecord) -> RetryItem:
    """A durable listener's row: dead ones go back to their group; pending ones are there
    already (redelivered before, awaiting the outcome) and are left as they are."""
    durable = parts.transport
    if rec.status is not FailureStatus.DEAD or durable is None:
        reason = (
            "a durable delivery redelivered to its group, awaiting the outcome (if that "
            f"redelivery was lost: python -m eventbus streams redrive {rec.id})"
        )
        if durable is None:
            reason = "a durable listener's failure, and this bus has no durable transport"
        return RetryItem(rec.id, rec.event_name, rec.listener, "skipped", rec.attempts, reason)
    try:
        entry = await durable.redeliver(rec)
    except Exception as exc:
        reason = f"could not redeliver: {qualified_type(exc)}: {safe_str(exc)}"
        return RetryItem(rec.id, rec.event_name, rec.listener, "skipped", rec.attempts, reason)
    return RetryItem(
        rec.id, rec.event_name, rec.listener, "redelivered", rec.attempts, f"as entry {entry}"
    )
