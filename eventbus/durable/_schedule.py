"""When a scheduled durable event falls due: ``publish(..., deliver_at=...)`` or
``delay=...``, checked before anything is written.

A time a little in the past is taken as "now" (the caller computed it a moment ago, or its
clock is a little ahead of ours); further back it is almost surely a mistake (a naive local
time read as UTC, a stale value), refused rather than delivered at once.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["PAST_TOLERANCE", "due_time"]

#: how far in the past ``deliver_at`` may be and still mean "now"
PAST_TOLERANCE = timedelta(seconds=5)


def due_time(
    deliver_at: datetime | None, delay: timedelta | None, *, now: datetime
) -> datetime | None:
    """The UTC time the event falls due, or ``None`` (publish now).

    :raises ValueError: naming the argument: both given, a naive ``deliver_at``, one more than
        :data:`PAST_TOLERANCE` in the past, or a negative ``delay``
    :raises TypeError: if ``deliver_at`` is not a datetime or ``delay`` not a timedelta
    """
    if deliver_at is not None and delay is not None:
        raise ValueError("publish: give deliver_at= or delay=, not both")
    if delay is not None:
        if not isinstance(delay, timedelta):
            raise TypeError(f"publish: delay must be a datetime.timedelta, not {delay!r}")
        if delay < timedelta(0):
            raise ValueError(f"publish: delay={delay!r} is negative; a delay is >= 0")
        return now + delay if delay else None
    if deliver_at is None:
        return None
    if not isinstance(deliver_at, datetime):
        raise TypeError(f"publish: deliver_at must be a datetime, not {deliver_at!r}")
    if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
        raise ValueError(
            f"publish: deliver_at={deliver_at.isoformat()} is naive; give an aware datetime "
            "(e.g. datetime.now(timezone.utc) + timedelta(hours=1))"
        )
    if deliver_at < now - PAST_TOLERANCE:
        raise ValueError(
            f"publish: deliver_at={deliver_at.isoformat()} is {(now - deliver_at)} in the past "
            f"(more than {PAST_TOLERANCE.total_seconds():g} s); publish without deliver_at to "
            "deliver now"
        )
    deliver_at = deliver_at.astimezone(UTC)
    return deliver_at if deliver_at > now else None
