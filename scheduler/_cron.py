"""Cron expressions: parse once, then compute fire times after a given instant.

Pure: no I/O and no clock reads; the loop owns time and passes ``after`` in.

Dialect: six fields ``second minute hour day-of-month month day-of-week``, or the classic
five (second = 0), or a preset (``@yearly``/``@annually``, ``@monthly``, ``@weekly``,
``@daily``/``@midnight``, ``@hourly``). Each field takes ``*``, numbers, ``a-b``, ``*/n``,
``a-b/n``, ``a/n`` (= ``a-max/n``) and comma lists of these; three-letter month names in
the month field and weekday names in the day-of-week field (0 and 7 are Sunday, and
``sat-sun`` reads as 6-7). When day-of-month and day-of-week are both restricted, a day
matches when either does (classic cron); a field listing its whole range counts as
unrestricted, so ``1-31`` is ``*`` but ``*/2`` is not.

Time zones and DST. Matching is on wall-clock time in the expression's zone (zoneinfo).
The search walks wall-clock dates and times, resolves each candidate with both ``fold``
values, and compares instants in UTC:

* a wall time that does not exist (spring forward): if the hour field covers all 24 hours
  the missing times are skipped; otherwise (a job pinned to hours, such as 02:30 daily) the
  job fires once, at the transition instant, so a daily job is never silently lost;
* a wall time that happens twice (fall back): if the hour field covers all 24 hours the job
  fires at both occurrences; otherwise only at the first, never twice.

Fire times are aware datetimes in the expression's zone; a sequence of them never goes
backwards and never repeats an instant.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from datetime import UTC, date, datetime, timedelta
from typing import cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ._cron_fields import CronFields, parse_cron
from ._exceptions import CronSyntaxError

__all__ = ["CronExpression", "min_interval", "validate_cron"]

_SECOND = timedelta(seconds=1)
_DAYS_IN_MONTH = (0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _next_table(values: frozenset[int], size: int) -> tuple[int, ...]:
    """``table[i]`` is the smallest allowed value >= i, or -1; one extra -1 slot for carries."""
    table = [-1] * (size + 1)
    following = -1
    for i in range(size - 1, -1, -1):
        if i in values:
            following = i
        table[i] = following
    return tuple(table)


class CronExpression:
    """A parsed cron expression bound to a time zone.

    :param expr: 5 or 6 fields, or an ``@preset``
    :param tz: IANA zone name or :class:`~zoneinfo.ZoneInfo`; matching is on its wall clock
    :raises CronSyntaxError: if the expression is malformed or can never fire
    :raises zoneinfo.ZoneInfoNotFoundError: if the zone is unknown
    """

    __slots__ = (
        "_day_cache",
        "_fields",
        "_first_time",
        "_hour_next",
        "_minute_next",
        "_month_next",
        "_second_next",
        "_tz",
        "expr",
    )

    def __init__(self, expr: str, tz: str | ZoneInfo = "UTC") -> None:
        self.expr = expr
        self._fields = parse_cron(expr)
        self._tz = tz if isinstance(tz, ZoneInfo) else _zone(tz)
        f = self._fields
        self._second_next = _next_table(f.second, 60)
        self._minute_next = _next_table(f.minute, 60)
        self._hour_next = _next_table(f.hour, 24)
        self._month_next = _next_table(f.month, 13)
        self._day_cache: dict[int, tuple[int, ...]] = {}
        self._first_time = (min(f.hour), min(f.minute), min(f.second))

    @property
    def tz(self) -> ZoneInfo:
        """The zone whose wall clock the expression is matched against."""
        return self._tz

    @property
    def fields(self) -> CronFields:
        """The allowed values of each field (day-of-week 0-6, Sunday 0)."""
        return self._fields

    @property
    def covers_all_hours(self) -> bool:
        """Whether the hour field allows all 24 hours; this selects the DST policy."""
        return len(self._fields.hour) == 24

    def __repr__(self) -> str:
        return f"CronExpression({self.expr!r}, tz={self._tz.key!r})"

    def __eq__(self, other: object) -> bool:
        # Equal when they fire at the same instants: '@daily' == '0 0 * * *'.
        if not isinstance(other, CronExpression):
            return NotImplemented
        return self._fields == other._fields and self._tz.key == other._tz.key

    def __hash__(self) -> int:
        return hash((self._fields, self._tz.key))

    # -- public queries -------------------------------------------------------------------

    def next_after(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (sub-second part ignored).

        :param after: an aware datetime, in any zone
        :return: an aware datetime in the expression's zone
        :raises ValueError: if ``after`` is naive
        :raises OverflowError: if no fire time fits before year 9999 ends
        """
        return next(self._iter_after(after))

    def next_times(self, n: int, *, after: datetime) -> list[datetime]:
        """The next ``n`` fire times strictly after ``after``, in increasing order.

        :param n: how many, at least 0
        :param after: an aware datetime, in any zone; its sub-second part is ignored
        :raises ValueError: if ``after`` is naive or ``n`` is negative
        """
        if n < 0:
            raise ValueError(f"n={n!r} must be at least 0")
        it = self._iter_after(after)
        return [next(it) for _ in range(n)]

    def iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``after``, lazily, until year 9999 ends."""
        it = self._iter_after(after)
        while True:
            try:
                yield next(it)
            except OverflowError:
                return

    def matches(self, dt: datetime) -> bool:
        """Whether ``dt`` (sub-second part ignored) is a fire time under the DST policy.

        :raises ValueError: if ``dt`` is naive
        """
        instant = _to_utc(dt, "dt")
        local = instant.replace(tzinfo=UTC).astimezone(self._tz)
        wall = local.replace(tzinfo=None, fold=0)
        if self._wall_matches(wall):
            off0, off1 = self._offsets(wall)
            # The second occurrence of a repeated wall time fires only for all-hours jobs.
            return not (local.fold == 1 and off0 != off1 and not self.covers_all_hours)
        if self.covers_all_hours:
            return False
        # A pinned job fires at a spring-forward instant when a skipped wall time matched.
        before = (instant - _SECOND).replace(tzinfo=UTC).astimezone(self._tz)
        jump = local.utcoffset() - before.utcoffset()  # type: ignore[operator]
        if jump <= timedelta(0):
            return False
        gap_start = wall - jump
        candidate = self._next_wall(gap_start)
        return candidate < wall

    def min_interval(self) -> timedelta:
        """The shortest nominal gap between two fire times, on the wall clock.

        A DST change can make one real gap shorter by at most the size of the change
        (one hour in most zones). Used to hold user-supplied expressions to a floor.
        """
        f = self._fields
        times = sorted(h * 3600 + m * 60 + s for h in f.hour for m in f.minute for s in f.second)
        best = min((b - a for a, b in zip(times, times[1:], strict=False)), default=None)
        across_days = 86400 - times[-1] + times[0]
        if best is not None and best <= across_days:
            return timedelta(seconds=best)
        day_gap = self._min_day_gap()
        across = day_gap * 86400 - times[-1] + times[0]
        return timedelta(seconds=across if best is None else min(best, across))

    # -- wall-clock search ----------------------------------------------------------------

    def _days(self, year: int, month: int) -> tuple[int, ...]:
        """``table[d]`` is the first matching day >= d in that month, or -1 (d up to 32)."""
        key = year * 16 + month
        table = self._day_cache.get(key)
        if table is None:
            if len(self._day_cache) > 512:
                self._day_cache.clear()
            f = self._fields
            length = _DAYS_IN_MONTH[month]
            if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
                length = 29
            # date.weekday() is Monday=0; cron is Sunday=0.
            first_dow = (date(year, month, 1).weekday() + 1) % 7
            dom_r, dow_r = f.dom_restricted, f.dow_restricted
            allowed = set()
            for day in range(1, length + 1):
                dom_ok = day in f.day_of_month
                dow_ok = (first_dow + day - 1) % 7 in f.day_of_week
                if (dom_ok or dow_ok) if (dom_r and dow_r) else (dom_ok and dow_ok):
                    allowed.add(day)
            table = _next_table(frozenset(allowed), 33)
            self._day_cache[key] = table
        return table

    def _time_from(self, h: int, mi: int, s: int) -> tuple[int, int, int] | None:
        """The first allowed time of day at or after h:mi:s, or None (closed form, no loop)."""
        hour_next, minute_next, second_next = self._hour_next, self._minute_next, self._second_next
        h2 = hour_next[h]
        if h2 == h:
            m2 = minute_next[mi]
            if m2 == mi:
                s2 = second_next[s]
                if s2 >= 0:
                    return h, mi, s2
                m2 = minute_next[mi + 1]
            if m2 >= 0:
                return h, m2, second_next[0]
            h2 = hour_next[h + 1]
        if h2 < 0:
            return None
        return h2, minute_next[0], second_next[0]

    def _next_wall(self, start: datetime) -> datetime:
        """The first matching wall-clock time at or after ``start`` (naive, local)."""
        y, mo, d = start.year, start.month, start.day
        month_next = self._month_next
        if month_next[mo] == mo and self._days(y, mo)[d] == d:
            t = self._time_from(start.hour, start.minute, start.second)
            if t is not None:
                return datetime(y, mo, d, *t)
        d += 1
        while True:
            m2 = month_next[mo]
            if m2 < 0:
                y += 1
                if y > 9999:
                    raise OverflowError(f"{self!r} has no fire time before year 10000")
                mo, d = 1, 1
                continue
            if m2 != mo:
                mo, d = m2, 1
            d2 = self._days(y, mo)[d]
            if d2 >= 0:
                return datetime(y, mo, d2, *self._first_time)
            mo, d = mo + 1, 1

    def _wall_matches(self, wall: datetime) -> bool:
        f = self._fields
        return (
            wall.second in f.second
            and wall.minute in f.minute
            and wall.hour in f.hour
            and wall.month in f.month
            and self._days(wall.year, wall.month)[wall.day] == wall.day
        )

    def _min_day_gap(self) -> int:
        """Fewest days between two consecutive fire days, over one 400-year cycle."""
        previous: int | None = None
        best = 146097
        base = date(2000, 1, 1).toordinal()
        for year in range(2000, 2400):
            for month in sorted(self._fields.month):
                table = self._days(year, month)
                first = date(year, month, 1).toordinal() - base - 1
                day = table[1]
                while day > 0:
                    ordinal = first + day
                    if previous is not None and ordinal - previous < best:
                        best = ordinal - previous
                        if best == 1:
                            return 1
                    previous = ordinal
                    day = table[day + 1]
        return best

    # -- resolution to instants -----------------------------------------------------------

    def _offsets(self, wall: datetime) -> tuple[timedelta, timedelta]:
        tz = self._tz
        return tz.utcoffset(wall), tz.utcoffset(wall.replace(fold=1))  # type: ignore[return-value]

    def _transition(self, lo: datetime, hi: datetime) -> datetime:
        """The first UTC instant in ``(lo, hi]`` at which the offset is already the later one."""
        tz = self._tz
        after = hi.replace(tzinfo=UTC).astimezone(tz).utcoffset()
        low, high = 0, int((hi - lo).total_seconds())
        while high - low > 1:
            mid = (low + high) // 2
            probe = (lo + timedelta(seconds=mid)).replace(tzinfo=UTC).astimezone(tz)
            if probe.utcoffset() == after:
                high = mid
            else:
                low = mid
        return lo + timedelta(seconds=high)

    def _iter_after(self, after: datetime) -> Iterator[datetime]:
        """Fire instants after ``after`` in increasing UTC order, as aware local datetimes.

        Wall times are walked in order; around a fall back the first and second
        occurrences interleave, so candidates wait in a heap until no later wall time
        can produce an earlier instant (every later wall maps to at least
        ``wall - max(offsets)``).
        """
        last = _to_utc(after, "after")
        tz = self._tz
        all_hours = self.covers_all_hours
        local = last.replace(tzinfo=UTC).astimezone(tz)
        wall = local.replace(tzinfo=None, fold=0)
        off0, off1 = self._offsets(wall)
        if local.fold == 0 and off0 > off1:
            # 'after' is in the first pass of a repeated hour: the second pass of earlier
            # wall times is still to come.
            wall -= off0 - off1
        pending: list[datetime] = []
        wall = self._next_wall(wall)
        # A ZoneInfo always knows the offset of a datetime; the stub says Optional.
        utcoffset = cast("Callable[[datetime], timedelta]", tz.utcoffset)
        while True:
            off0 = utcoffset(wall)
            off1 = utcoffset(wall.replace(fold=1))
            if off0 == off1:
                instant = wall - off0
                if not pending:  # the common case: no DST change in sight
                    if instant > last:
                        last = instant
                        yield wall.replace(tzinfo=tz)
                    wall = self._next_wall(wall + _SECOND)
                    continue
                heapq.heappush(pending, instant)
                bound = instant
                step_to = wall + _SECOND
            elif off0 > off1:  # repeated wall time: fold 0 first, fold 1 an offset later
                heapq.heappush(pending, wall - off0)
                if all_hours:
                    heapq.heappush(pending, wall - off1)
                bound = wall - off0
                step_to = wall + _SECOND
            else:  # skipped wall time: every candidate in the gap maps to its end
                instant = self._transition(wall - off1, wall - off0)
                if not all_hours:
                    heapq.heappush(pending, instant)
                bound = wall - off1
                step_to = instant + off1  # first wall time after the gap
            while pending and pending[0] <= bound:
                instant = heapq.heappop(pending)
                if instant > last:
                    last = instant
                    yield instant.replace(tzinfo=UTC).astimezone(tz)
            wall = self._next_wall(step_to)


def _to_utc(dt: datetime, name: str) -> datetime:
    """``dt`` as a naive UTC datetime truncated to the second."""
    if not isinstance(dt, datetime):
        raise TypeError(f"{name}={dt!r} must be a datetime")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(
            f"{name}={dt!r} is naive; pass an aware datetime, "
            f"e.g. {name}.replace(tzinfo=ZoneInfo('UTC'))"
        )
    return dt.astimezone(UTC).replace(tzinfo=None, microsecond=0)


def validate_cron(expr: str) -> tuple[bool, str | None]:
    """Check user input without raising: ``(True, None)`` or ``(False, message)``."""
    try:
        parse_cron(expr)
    except CronSyntaxError as exc:
        return False, str(exc)
    return True, None


def min_interval(expr: str | CronExpression) -> timedelta:
    """The shortest nominal gap between two fire times of ``expr``.

    :raises CronSyntaxError: if ``expr`` is a string that does not parse
    """
    cron = expr if isinstance(expr, CronExpression) else CronExpression(expr)
    return cron.min_interval()


def _zone(name: str) -> ZoneInfo:
    """``ZoneInfo(name)``, but a name that is a folder of the tz database ('America') or is
    otherwise unreadable raises ``ZoneInfoNotFoundError`` like any unknown zone."""
    try:
        return ZoneInfo(name)
    except (OSError, ValueError) as exc:
        raise ZoneInfoNotFoundError(f"no time zone named {name!r}") from exc
