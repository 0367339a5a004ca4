"""A consumer group's kill switch: past a failure ratio, stop consuming, wait, start again.

When a listener's dependency (its database, an API) is down, every delivery fails, and with
retries alone every event of that window ends in the dead letters after ``max_deliveries``.
The switch (MassTransit's name) watches the outcomes of the last ``trip_window`` seconds;
once at least ``trip_after`` deliveries were seen and the failures among them reach
``trip_ratio``, the group *trips*: it stops reading and reclaiming for ``pause`` seconds, a
pause that doubles (at most ``max_pause``) while it keeps tripping soon after resuming.

Failures are not charged to their entries from the trip until the next success: those calls
failed because of the outage, not because of their events, and their entries must not be
dead-lettered for it. Pure logic on an injected clock; the consumer drives it.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import time
from collections.abc import Callable

__all__ = ["KillSwitch", "Outcome", "SwitchState"]


class Outcome(enum.Enum):
    """What one listener call did, as the switch counts it."""

    OK = "ok"
    FAILED = "failed"  #: raised an exception the listener's ``trip_on`` counts
    OTHER = "other"  #: raised one it does not count (a payload bug): a delivery, no failure


@dataclasses.dataclass(frozen=True, slots=True)
class SwitchState:
    """A snapshot of one group's switch (for ``statistics()`` and the status hash)."""

    paused: bool
    paused_since: float | None  #: wall-clock time of the episode's first trip
    resumes_at: float | None  #: wall-clock time the current pause ends
    trips: int  #: trips since this process started
    failures: int  #: failures in the window now
    deliveries: int  #: outcomes in the window now


class KillSwitch:
    """The switch of one group in this process (see the module docstring)."""

    def __init__(
        self,
        *,
        trip_after: int,
        trip_ratio: float,
        trip_window: float,
        pause: float,
        max_pause: float,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.trip_after = trip_after
        self.trip_ratio = trip_ratio
        self.trip_window = trip_window
        self.pause = pause
        self.max_pause = max_pause
        self._clock = clock
        self._wall = wall
        self._window: collections.deque[tuple[float, bool]] = collections.deque()
        self._failures = 0
        self._until: float | None = None  # monotonic end of the current pause
        self._last_pause = 0.0
        self._resumed_at: float | None = None
        self._episode_since: float | None = None  # wall time of the episode's first trip
        self._resumes_at_wall: float | None = None
        self.trips = 0
        self.episode_trips = 0  #: trips since the episode's first
        #: failures are charged to their entries; False from a trip until the next success
        self.charging = True

    def __repr__(self) -> str:
        return f"KillSwitch(paused={self.paused}, trips={self.trips})"

    @property
    def paused(self) -> bool:
        return self._until is not None

    @property
    def in_episode(self) -> bool:
        """Tripped, and no call has succeeded since."""
        return self._episode_since is not None

    def remaining(self) -> float:
        """Seconds left in the current pause (0 when not paused)."""
        return 0.0 if self._until is None else max(0.0, self._until - self._clock())

    def record(self, outcome: Outcome) -> bool:
        """Count one call's outcome; ``True`` when it trips the switch (the caller pauses)."""
        now = self._clock()
        if outcome is Outcome.OK:
            self.charging = True
        if self._until is not None:
            return False  # a call that was in flight at the trip: the window starts afresh
        self._expire(now)
        failed = outcome is Outcome.FAILED
        self._window.append((now, failed))
        self._failures += failed
        if (
            not failed
            or len(self._window) < self.trip_after
            or self._failures < self.trip_ratio * len(self._window)
        ):
            return False
        self._trip(now)
        return True

    def ended_episode(self) -> tuple[float, int] | None:
        """Once per episode, at the first success after its last pause: when it began (wall
        clock) and how many times it tripped. ``None`` otherwise."""
        if self._episode_since is None or self._until is not None or not self.charging:
            return None
        since, trips = self._episode_since, self.episode_trips
        self._episode_since, self.episode_trips = None, 0
        return since, trips

    def resume(self) -> None:
        """End the pause (its time is up, or an operator resumed the group early)."""
        if self._until is None:
            return
        self._until = None
        self._resumes_at_wall = None
        self._resumed_at = self._clock()
        self._window.clear()
        self._failures = 0

    def state(self) -> SwitchState:
        self._expire(self._clock())
        return SwitchState(
            paused=self.paused,
            paused_since=self._episode_since,
            resumes_at=self._resumes_at_wall,
            trips=self.trips,
            failures=self._failures,
            deliveries=len(self._window),
        )

    def _trip(self, now: float) -> None:
        again = self._resumed_at is not None and now - self._resumed_at < self.trip_window
        pause = min(self._last_pause * 2, self.max_pause) if again else self.pause
        self._last_pause = pause
        self._until = now + pause
        self.trips += 1
        self.charging = False
        wall = self._wall()
        if self._episode_since is None:
            self._episode_since = wall
        self.episode_trips += 1
        self._resumes_at_wall = wall + pause

    def _expire(self, now: float) -> None:
        horizon = now - self.trip_window
        window = self._window
        while window and window[0][0] < horizon:
            _, failed = window.popleft()
            self._failures -= failed
