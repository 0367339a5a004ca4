"""Properties of fire-time sequences, and a cross-check against croniter where dialects agree."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import takewhile

from croniter import croniter
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from scheduler import CronExpression, CronSyntaxError

SETTINGS = settings(max_examples=30, deadline=None)

# Instants of DST transitions (UTC) in the zones the policy is specified for.
TRANSITIONS = [
    ("America/New_York", datetime(2024, 3, 10, 7, tzinfo=UTC)),
    ("America/New_York", datetime(2024, 11, 3, 6, tzinfo=UTC)),
    ("Europe/London", datetime(2024, 3, 31, 1, tzinfo=UTC)),
    ("Europe/London", datetime(2024, 10, 27, 1, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2024, 4, 6, 15, tzinfo=UTC)),
    ("Australia/Lord_Howe", datetime(2024, 10, 5, 15, 30, tzinfo=UTC)),
    ("America/Sao_Paulo", datetime(2018, 11, 4, 3, tzinfo=UTC)),
    ("America/Sao_Paulo", datetime(2019, 2, 17, 2, tzinfo=UTC)),
]


def field(lo: int, hi: int, *, star: float = 0.3) -> st.SearchStrategy[str]:
    """One cron field over ``lo..hi``: '*', numbers, ranges, steps and lists of them."""
    number = st.integers(lo, hi)
    step = st.integers(1, hi - lo)
    pair = st.tuples(number, number).map(sorted)
    item = st.one_of(
        number.map(str),
        pair.map(lambda p: f"{p[0]}-{p[1]}"),
        step.map(lambda n: f"*/{n}"),
        st.tuples(pair, step).map(lambda t: f"{t[0][0]}-{t[0][1]}/{t[1]}"),
        st.tuples(number, step).map(lambda t: f"{t[0]}/{t[1]}"),
    )
    listed = st.lists(item, min_size=1, max_size=3).map(",".join)
    return st.one_of(st.just("*"), listed) if star else listed


@st.composite
def frequent(draw: st.DrawFn) -> str:
    """Expressions that usually fire several times within a few hours."""
    second = draw(st.sampled_from(["0", "*/30", "0,15,45", "*/20"]))
    minute = draw(st.one_of(st.sampled_from(["*", "*/5", "*/15", "0,30"]), field(0, 59)))
    hour = draw(st.one_of(st.just("*"), field(0, 23)))
    dom = draw(st.one_of(st.just("*"), field(1, 31)))
    dow = draw(st.one_of(st.just("*"), field(0, 7)))
    return f"{second} {minute} {hour} {dom} * {dow}"


@st.composite
def anything(draw: st.DrawFn) -> str:
    fields = [field(0, 59), field(0, 59), field(0, 23), field(1, 31), field(1, 12), field(0, 7)]
    return " ".join(draw(f) for f in fields)


def parse(expr: str, tz: str = "UTC") -> CronExpression:
    try:
        return CronExpression(expr, tz=tz)
    except CronSyntaxError:
        assume(False)
        raise


instants = st.datetimes(datetime(1990, 1, 1), datetime(2060, 1, 1), timezones=st.just(UTC))


@st.composite
def near_transition(draw: st.DrawFn) -> tuple[str, datetime]:
    zone, instant = draw(st.sampled_from(TRANSITIONS))
    return zone, instant + timedelta(seconds=draw(st.integers(-3 * 3600, 3600)))


def utc_seconds(start: datetime, end: datetime) -> Iterator[datetime]:
    t = start.replace(microsecond=0) + timedelta(seconds=1)
    while t <= end:
        yield t
        t += timedelta(seconds=1)


@SETTINGS
@given(expr=anything(), after=instants, zone=st.sampled_from(["UTC", "America/New_York"]))
def test_fire_times_strictly_increase_and_match(expr: str, after: datetime, zone: str) -> None:
    cron = parse(expr, zone)
    fires = [f.astimezone(UTC) for f in cron.next_times(20, after=after)]
    assert fires[0] > after
    assert all(a < b for a, b in zip(fires, fires[1:], strict=False))
    assert all(cron.matches(f) for f in fires)


@SETTINGS
@given(expr=frequent(), after=instants)
def test_no_matching_second_is_skipped_utc(expr: str, after: datetime) -> None:
    cron = parse(expr)
    f = cron.fields
    end = after + timedelta(hours=3)
    fires = [t.astimezone(UTC) for t in takewhile(lambda t: t <= end, cron.iter_after(after))]

    def oracle(t: datetime) -> bool:
        dom_ok = t.day in f.day_of_month
        dow_ok = (t.weekday() + 1) % 7 in f.day_of_week
        day_ok = (
            (dom_ok or dow_ok) if f.dom_restricted and f.dow_restricted else (dom_ok and dow_ok)
        )
        return (t.second in f.second and t.minute in f.minute and t.hour in f.hour) and day_ok

    assert fires == [t for t in utc_seconds(after, end) if oracle(t)]


@SETTINGS
@given(expr=frequent(), where=near_transition())
def test_no_matching_second_is_skipped_across_dst(expr: str, where: tuple[str, datetime]) -> None:
    zone, after = where
    cron = parse(expr, zone)
    end = after + timedelta(hours=4)
    fires = [t.astimezone(UTC) for t in takewhile(lambda t: t <= end, cron.iter_after(after))]
    assert fires == [t for t in utc_seconds(after, end) if cron.matches(t)]


@SETTINGS
@given(expr=frequent(), where=near_transition(), position=st.floats(0, 1, exclude_max=True))
def test_next_does_not_depend_on_after_within_a_gap(
    expr: str, where: tuple[str, datetime], position: float
) -> None:
    zone, start = where
    cron = parse(expr, zone)
    # Arithmetic in UTC only: aware arithmetic in the local zone ignores fold.
    first = cron.next_after(start).astimezone(UTC)
    second = cron.next_after(first).astimezone(UTC)
    span = (second - first) // timedelta(microseconds=1)
    between = first + timedelta(microseconds=min(int(span * position), span - 1))
    assert cron.next_after(between).astimezone(UTC) == second


@st.composite
def croniter_dialect(draw: st.DrawFn) -> str:
    """Six-field expressions on which croniter and we agree: not both day fields restricted."""
    which = draw(st.sampled_from(["dom", "dow", "neither"]))
    dom = draw(field(1, 31, star=0)) if which == "dom" else "*"
    dow = draw(field(0, 6, star=0)) if which == "dow" else "*"
    parts = [draw(field(0, 59)), draw(field(0, 59)), draw(field(0, 23)), dom, draw(field(1, 12))]
    return " ".join([*parts, dow])


@SETTINGS
@given(expr=croniter_dialect(), after=instants)
def test_agrees_with_croniter_in_utc(expr: str, after: datetime) -> None:
    assume(not re.search(r"\b(\d+)-\1\b", expr))  # croniter reads '5-5' as '*'
    cron = parse(expr)
    after = after.replace(microsecond=0)
    ours = cron.next_times(10, after=after)
    it = croniter(expr, after, second_at_beginning=True)
    theirs = [it.get_next(datetime) for _ in range(10)]
    assert [t.astimezone(UTC) for t in ours] == [t.astimezone(UTC) for t in theirs]
