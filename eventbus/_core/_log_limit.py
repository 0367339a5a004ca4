"""Rate-limited logging for storms: a few lines per kind of message, then one summary with counts.

A failure storm (a listener that raises on every event, a database that falls behind) must not
turn the log into the bottleneck or bury the first, useful lines. Records are never dropped by
this: the failure table keeps every one; only the log lines are counted instead of written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable

__all__ = ["LogLimiter"]


class _Window:
    __slots__ = ("logged", "started", "suppressed", "what")

    def __init__(self, started: float, what: str) -> None:
        self.started = started
        self.logged = 0
        self.suppressed = 0
        self.what = what


class LogLimiter:
    """Lets *burst* lines per key through in each *interval*, then counts the rest.

    The suppressed count of a key is logged as one summary line when its next line is allowed
    (the interval rolled over) and by :meth:`summarize` (call it at close). Beyond *max_keys*
    distinct keys in play, further keys share one overflow key, so a storm of distinct messages
    stays bounded too.

    :param logger: where the summary lines go
    :param level: the level of the summary lines
    :param burst: lines allowed per key and interval
    :param interval: seconds of one window
    :param max_keys: distinct keys tracked before they share one
    :param clock: a monotonic clock in seconds (tests inject one)
    """

    OVERFLOW: Hashable = ("<other>",)

    def __init__(
        self,
        logger: logging.Logger,
        *,
        level: int = logging.ERROR,
        burst: int = 5,
        interval: float = 60.0,
        max_keys: int = 100,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if burst < 1 or interval <= 0 or max_keys < 1:
            raise ValueError("burst and max_keys must be >= 1 and interval > 0")
        self.logger = logger
        self.level = level
        self.burst = burst
        self.interval = interval
        self.max_keys = max_keys
        self.clock = clock
        self._windows: dict[Hashable, _Window] = {}
        self.suppressed_total = 0

    def allow(self, key: Hashable, what: str) -> bool:
        """Whether to log this line of kind *key* (described as *what* in summaries) now."""
        now = self.clock()
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self.max_keys:
                self._expire(now)
            if len(self._windows) >= self.max_keys:
                key, what = self.OVERFLOW, "other messages"
                window = self._windows.get(key)
            if window is None:
                window = self._windows[key] = _Window(now, what)
        elif now - window.started >= self.interval:
            self._report(window, now)
            window.started, window.logged = now, 0
        if window.logged < self.burst:
            window.logged += 1
            return True
        window.suppressed += 1
        self.suppressed_total += 1
        return False

    def summarize(self) -> None:
        """Log the pending summary of every key (at close, or from a periodic task)."""
        now = self.clock()
        for window in self._windows.values():
            self._report(window, now)
        self._windows.clear()

    def _expire(self, now: float) -> None:
        for key, window in list(self._windows.items()):
            if now - window.started >= self.interval:
                self._report(window, now)
                del self._windows[key]

    def _report(self, window: _Window, now: float) -> None:
        if window.suppressed:
            self.logger.log(
                self.level,
                "%d more log line(s) of %s suppressed in the last %.0f s (%d suppressed in all)",
                window.suppressed,
                window.what,
                now - window.started,
                self.suppressed_total,
            )
            window.suppressed = 0
