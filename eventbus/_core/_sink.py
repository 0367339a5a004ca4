"""Where a failed listener call goes: one record, a log line, the store, the ``on_failure`` hook.

The sink is the only part of the bus that turns an exception into a :class:`FailureRecord`. It
never raises to its caller: a failure must not break the publisher, and must never be lost
to a failing store, hook or payload. Log lines are rate-limited per (listener, error type) by
a :class:`LogLimiter`, so a storm of failures keeps the log readable and cheap; the store still
gets every record, and the suppressed lines are summed up in a summary line.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from .._failures import FailureRecord
from ..abc import FailureStore
from ._emission import Emission
from ._listeners import Listener, is_async_callable
from ._log_limit import LogLimiter

if TYPE_CHECKING:
    from ._counting import CallCounts

__all__ = ["AWAITABLE_HINT", "FailureSink", "awaitable_error", "logger"]

logger = logging.getLogger("eventbus")

AWAITABLE_HINT = "returned an awaitable; declare it async def or subscribe the coroutine function"

# Lines per (listener, error type) and interval before the rest are counted instead of logged.
LOG_BURST = 5
LOG_INTERVAL = 60.0


def awaitable_error(name: str, value: object) -> TypeError:
    """Close what a sync-looking listener returned and say how to subscribe it properly."""
    close = getattr(value, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            logger.exception("closing the awaitable of %r raised", name)
    return TypeError(f"listener {name!r} {AWAITABLE_HINT}")


class FailureSink:
    """Records failures of one bus; counts them for ``statistics()``.

    :param store: where records go (``bus.failures``)
    :param hook: ``on_failure``, called with each record
    """

    __slots__ = (
        "_hook",
        "_in_hook",
        "count",
        "counts",
        "limited",
        "limiter",
        "observers",
        "store",
    )

    def __init__(
        self, store: FailureStore, hook: Callable[[FailureRecord], object] | None = None
    ) -> None:
        self.store = store
        self.hook = hook
        self._in_hook = False  # inside the hook: failures it causes do not call it again
        self.count = 0
        self.limiter = LogLimiter(logger, burst=LOG_BURST, interval=LOG_INTERVAL)
        #: told of each record before the store (instrumentation); must not raise
        self.observers: list[Callable[[FailureRecord], object]] = []
        #: per-listener counters, while the bus counts calls (``count_calls``)
        self.counts: CallCounts | None = None
        #: told of each record of a ``once``/``times`` listener, by record id (the listener
        #: table keeps such a listener for retries of those records only)
        self.limited: Callable[[Listener, str], object] | None = None

    @property
    def hook(self) -> Callable[[FailureRecord], object] | None:
        return self._hook

    @hook.setter
    def hook(self, hook: Callable[[FailureRecord], object] | None) -> None:
        if hook is not None and (not callable(hook) or is_async_callable(hook)):
            raise TypeError(
                f"on_failure={hook!r} must be a sync callable: the bus calls it inline and "
                "never awaits it; to alert asynchronously, start a task or emit an event from it"
            )
        self._hook = hook

    def capture(
        self, emission: Emission, sub: Listener, exc: BaseException, attempts: int
    ) -> FailureRecord:
        """Build, log, store and announce one failure of *sub*'s delivery (counted, if the bus
        counts calls); nothing here raises to the caller."""
        listener = sub.name
        event = emission.event
        event_id = emission.event_id
        cause, chain = emission.causation_id, emission.correlation_id
        try:
            rec = FailureRecord.from_exception(
                event=event,
                event_id=event_id,
                listener=listener,
                exc=exc,
                attempts=attempts,
                causation_id=cause,
                correlation_id=chain,
            )
        except Exception:
            logger.exception("building the failure record of %r failed; keeping less", listener)
            rec = FailureRecord.minimal(
                event_name=event.__event_name__,
                event_id=event_id,
                listener=listener,
                exc=exc,
                attempts=attempts,
                causation_id=cause,
                correlation_id=chain,
            )
        if self.counts is not None:
            self.counts.failed(rec.event_name, listener)
        if sub.times is not None and self.limited is not None:
            self.limited(sub, rec.id)
        self.add(rec, exc)
        return rec

    def add(
        self, rec: FailureRecord, exc: BaseException | None = None, *, log: bool = True
    ) -> None:
        """Count, log (rate-limited), store and announce a record built elsewhere (a durable
        consumer's dead delivery); nothing here raises to the caller.

        :param exc: the exception, for the log line's traceback
        :param log: ``False`` when the caller logs the failure its own way
        """
        self.count += 1
        for observer in self.observers:
            try:
                observer(rec)
            except Exception:
                logger.exception("failure observer %r raised", observer)
        listener = rec.listener
        if log and self.limiter.allow(
            (listener, rec.error_type), f"listener {listener!r} failing with {rec.error_type}"
        ):
            # A bus-made error (dropped, shutdown) has no frames worth formatting again.
            framed = exc is not None and (
                exc.__traceback__ is not None or exc.__cause__ is not None
            )
            logger.error(
                "listener %r failed for %r (event_id=%s, attempts=%d): %s: %s",
                listener,
                rec.event_name,
                rec.event_id,
                rec.attempts,
                rec.error_type,
                rec.message,
                exc_info=exc if framed else None,
            )
        try:
            self.store.record(rec)
        except Exception:
            logger.exception("failure store %r refused a record; its content: %r", self.store, rec)
        hook = self._hook
        if hook is not None and not self._in_hook:
            # Failures the hook causes (it emits, say) are recorded, but do not re-enter it:
            # a hook that alerts through a failing bus would otherwise multiply them.
            self._in_hook = True
            try:
                result = hook(rec)
                if result is not None and inspect.isawaitable(result):
                    awaitable_error("on_failure", result)
                    logger.error("on_failure hook %r %s", hook, AWAITABLE_HINT)
            except Exception:
                logger.exception("on_failure hook %r raised", hook)
            finally:
                self._in_hook = False

    def close(self) -> None:
        """Log the summary of every log line the rate limit held back (the bus's close)."""
        self.limiter.summarize()
