"""What each accepted expression fires at (UTC), and the CronExpression API around it."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pytest

import scheduler
from scheduler import CronExpression, CronSyntaxError, min_interval, validate_cron


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


AFTER = "2024-01-01T00:00:00"  # a Monday


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        # seconds, minutes, hours
        pytest.param("* * * * * *", AFTER, ["00:00:01", "00:00:02", "00:00:03"], id="every-second"),
        pytest.param(
            "*/15 * * * * *", AFTER, ["00:00:15", "00:00:30", "00:00:45", "00:01:00"], id="sec-step"
        ),
        pytest.param("5 * * * * *", AFTER, ["00:00:05", "00:01:05"], id="sec-number"),
        pytest.param(
            "10-12 * * * * *",
            AFTER,
            ["00:00:10", "00:00:11", "00:00:12", "00:01:10"],
            id="sec-range",
        ),
        pytest.param(
            "10-30/10 * * * * *",
            AFTER,
            ["00:00:10", "00:00:20", "00:00:30", "00:01:10"],
            id="sec-range-step",
        ),
        pytest.param(
            "50/5 * * * * *", AFTER, ["00:00:50", "00:00:55", "00:01:50"], id="sec-start-step"
        ),
        pytest.param(
            "1,3,5-6 * * * * *",
            AFTER,
            ["00:00:01", "00:00:03", "00:00:05", "00:00:06", "00:01:01"],
            id="sec-list",
        ),
        pytest.param("0 */5 * * * *", AFTER, ["00:05:00", "00:10:00"], id="min-step"),
        pytest.param("*/5 * * * *", AFTER, ["00:05:00", "00:10:00"], id="five-fields"),
        pytest.param(
            "0 0 */6 * * *",
            AFTER,
            ["06:00:00", "12:00:00", "18:00:00", "2024-01-02T00:00:00"],
            id="hour-step",
        ),
        pytest.param(
            "0 30 9-10 * * *",
            AFTER,
            ["09:30:00", "10:30:00", "2024-01-02T09:30:00"],
            id="hour-range",
        ),
        pytest.param(
            "00 00 04 * * *", AFTER, ["04:00:00", "2024-01-02T04:00:00"], id="leading-zeros"
        ),
        pytest.param(" \t0  0\t\t4 * *   * ", AFTER, ["04:00:00"], id="blanks"),
        # day of month and months
        pytest.param("0 0 0 15 * *", AFTER, ["2024-01-15", "2024-02-15", "2024-03-15"], id="dom"),
        pytest.param(
            "0 0 0 31 * *",
            AFTER,
            ["2024-01-31", "2024-03-31", "2024-05-31", "2024-07-31"],
            id="dom-31-skips-short-months",
        ),
        pytest.param(
            "0 0 0 30 * *", AFTER, ["2024-01-30", "2024-03-30"], id="dom-30-skips-february"
        ),
        pytest.param(
            "0 0 0 29 2 *", AFTER, ["2024-02-29", "2028-02-29", "2032-02-29"], id="leap-day"
        ),
        pytest.param(
            "0 0 0 29 2 *",
            "2096-03-01T00:00:00",
            ["2104-02-29", "2108-02-29"],
            id="leap-day-skips-2100",
        ),
        pytest.param("0 0 0 29 2 *", "2396-03-01T00:00:00", ["2400-02-29"], id="leap-day-2400"),
        pytest.param(
            "0 0 0 1 */3 *",
            AFTER,
            ["2024-04-01", "2024-07-01", "2024-10-01", "2025-01-01"],
            id="month-step",
        ),
        pytest.param("0 0 0 1 jan,jul *", AFTER, ["2024-07-01", "2025-01-01"], id="month-names"),
        pytest.param(
            "0 0 0 1 NOV-Dec *",
            AFTER,
            ["2024-11-01", "2024-12-01", "2025-11-01"],
            id="month-name-range",
        ),
        pytest.param(
            "0 0 0 1 mar/4 *",
            AFTER,
            ["2024-03-01", "2024-07-01", "2024-11-01", "2025-03-01"],
            id="month-name-step",
        ),
        # day of week
        pytest.param(
            "0 0 9 * * mon-fri",
            "2024-01-05T10:00:00",
            ["2024-01-08T09:00:00", "2024-01-09T09:00:00"],
            id="weekdays",
        ),
        pytest.param("0 0 0 * * 0", AFTER, ["2024-01-07", "2024-01-14"], id="dow-0-sunday"),
        pytest.param("0 0 0 * * 7", AFTER, ["2024-01-07", "2024-01-14"], id="dow-7-sunday"),
        pytest.param(
            "0 0 0 * * sat-sun", AFTER, ["2024-01-06", "2024-01-07", "2024-01-13"], id="dow-sat-sun"
        ),
        pytest.param(
            "0 0 0 * * 5-7",
            AFTER,
            ["2024-01-05", "2024-01-06", "2024-01-07", "2024-01-12"],
            id="dow-range-to-7",
        ),
        pytest.param(
            "0 0 0 * * TUE,thu",
            AFTER,
            ["2024-01-02", "2024-01-04", "2024-01-09"],
            id="dow-names-case",
        ),
        pytest.param(
            "0 0 0 * * 1/2",
            AFTER,
            ["2024-01-03", "2024-01-05", "2024-01-08"],
            id="dow-start-step-stops-at-6",
        ),
        pytest.param(
            "0 0 0 * * 1-7/2",
            AFTER,
            ["2024-01-03", "2024-01-05", "2024-01-07"],
            id="dow-explicit-range-to-7",
        ),
        pytest.param(
            "0 0 0 * * */2",
            AFTER,
            ["2024-01-02", "2024-01-04", "2024-01-06", "2024-01-07"],
            id="dow-step",
        ),
        # the day-of-month / day-of-week rule
        pytest.param(
            "0 0 0 13 * fri",
            AFTER,
            ["2024-01-05", "2024-01-12", "2024-01-13", "2024-01-19"],
            id="dom-or-dow",
        ),
        pytest.param(
            "0 0 0 1-31 * fri", AFTER, ["2024-01-05", "2024-01-12"], id="full-dom-is-unrestricted"
        ),
        pytest.param(
            "0 0 0 13 * 0-6", AFTER, ["2024-01-13", "2024-02-13"], id="full-dow-is-unrestricted"
        ),
        pytest.param(
            "0 0 0 13 * 0-7", AFTER, ["2024-01-13", "2024-02-13"], id="full-dow-0-7-is-unrestricted"
        ),
        pytest.param(
            "0 0 0 */1 * fri", AFTER, ["2024-01-05", "2024-01-12"], id="step-1-is-unrestricted"
        ),
        pytest.param(
            "0 0 0 */10 * mon",
            AFTER,
            ["2024-01-08", "2024-01-11", "2024-01-15", "2024-01-21"],
            id="step-2-is-restricted",
        ),
        pytest.param("0 0 0 30 2 mon", AFTER, ["2024-02-05", "2024-02-12"], id="dead-dom-live-dow"),
        # presets
        pytest.param("@yearly", AFTER, ["2025-01-01", "2026-01-01"], id="yearly"),
        pytest.param("@annually", AFTER, ["2025-01-01"], id="annually"),
        pytest.param("@monthly", AFTER, ["2024-02-01", "2024-03-01"], id="monthly"),
        pytest.param("@weekly", AFTER, ["2024-01-07", "2024-01-14"], id="weekly"),
        pytest.param("@daily", AFTER, ["2024-01-02", "2024-01-03"], id="daily"),
        pytest.param("@MIDNIGHT", AFTER, ["2024-01-02"], id="midnight"),
        pytest.param("@hourly", AFTER, ["01:00:00", "02:00:00"], id="hourly"),
        # carries across minute, hour, day, month, year
        pytest.param(
            "59 59 23 31 12 *",
            "2023-12-31T23:59:58",
            ["2023-12-31T23:59:59", "2024-12-31T23:59:59"],
            id="year-end",
        ),
    ],
)
def test_next_times(expr: str, after: str, expected: list[str]) -> None:
    start = utc(after)
    want = [utc(e if "-" in e else f"{after[:10]}T{e}") for e in expected]
    assert CronExpression(expr).next_times(len(want), after=start) == want


def test_fire_times_are_in_the_expression_zone() -> None:
    tz = ZoneInfo("Asia/Shanghai")
    [fire] = CronExpression("0 0 4 * * *", tz="Asia/Shanghai").next_times(1, after=utc(AFTER))
    assert fire.tzinfo is tz
    assert fire == datetime(2024, 1, 2, 4, tzinfo=tz)


def test_after_is_exclusive_and_sub_second_part_ignored() -> None:
    cron = CronExpression("*/10 * * * * *")
    assert cron.next_after(utc("2024-01-01T00:00:10")) == utc("2024-01-01T00:00:20")
    assert cron.next_after(utc("2024-01-01T00:00:09.999999")) == utc("2024-01-01T00:00:10")
    assert cron.next_after(utc("2024-01-01T00:00:10.5")) == utc("2024-01-01T00:00:20")


def test_after_in_another_zone() -> None:
    after = datetime(2024, 1, 1, 9, tzinfo=timezone(timedelta(hours=9)))  # 00:00 UTC
    assert CronExpression("@hourly").next_after(after) == utc("2024-01-01T01:00:00")


def test_naive_after_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"after=datetime.datetime\(2024, 1, 1, 0, 0\) is naive"):
        CronExpression("@daily").next_after(datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="is naive"):
        CronExpression("@daily").next_times(1, after=datetime(2024, 1, 1))
    with pytest.raises(ValueError, match="is naive"):
        CronExpression("@daily").matches(datetime(2024, 1, 1))


def test_next_times_rejects_negative_n_and_allows_zero() -> None:
    assert CronExpression("@daily").next_times(0, after=utc(AFTER)) == []
    with pytest.raises(ValueError, match="n=-1"):
        CronExpression("@daily").next_times(-1, after=utc(AFTER))


def test_end_of_time() -> None:
    cron = CronExpression("0 0 0 1 1 *")
    assert list(cron.iter_after(utc("9998-06-01T00:00:00"))) == [utc("9999-01-01T00:00:00")]
    with pytest.raises(OverflowError, match="no fire time before year 10000"):
        cron.next_after(utc("9999-06-01T00:00:00"))


@pytest.mark.parametrize(
    ("expr", "when", "expected"),
    [
        pytest.param("0 0 9 * * mon-fri", "2024-01-05T09:00:00", True, id="friday-9"),
        pytest.param("0 0 9 * * mon-fri", "2024-01-06T09:00:00", False, id="saturday-9"),
        pytest.param("0 0 9 * * mon-fri", "2024-01-05T09:00:01", False, id="wrong-second"),
        pytest.param("0 0 9 * * mon-fri", "2024-01-05T09:00:00.7", True, id="sub-second-ignored"),
        pytest.param("0 0 0 13 * fri", "2024-01-13T00:00:00", True, id="dom-or-dow-dom"),
        pytest.param("0 0 0 13 * fri", "2024-01-12T00:00:00", True, id="dom-or-dow-dow"),
        pytest.param("0 0 0 13 * fri", "2024-01-11T00:00:00", False, id="dom-or-dow-neither"),
    ],
)
def test_matches(expr: str, when: str, expected: bool) -> None:
    assert CronExpression(expr).matches(utc(when)) is expected


def test_attributes_repr_and_equality() -> None:
    cron = CronExpression("0 0 4 * * *", tz=ZoneInfo("Asia/Shanghai"))
    assert cron.expr == "0 0 4 * * *"
    assert cron.tz == ZoneInfo("Asia/Shanghai")
    assert repr(cron) == "CronExpression('0 0 4 * * *', tz='Asia/Shanghai')"
    assert type(cron).__module__ == "scheduler"
    assert CronExpression("@daily") == CronExpression("0 0 * * *")
    assert CronExpression("0 0 0 * * 7") == CronExpression("0 0 0 * * sun")
    assert hash(CronExpression("@daily")) == hash(CronExpression("0 0 0 * * *"))
    assert CronExpression("@daily") != CronExpression("@daily", tz="Europe/London")
    assert CronExpression("@daily") != "@daily"
    assert len({CronExpression("@hourly"), CronExpression("0 0 * * * *")}) == 1


def test_covers_all_hours() -> None:
    assert CronExpression("0 0 * * * *").covers_all_hours
    assert CronExpression("0 0 0-23 * * *").covers_all_hours
    assert CronExpression("0 0 */1 * * *").covers_all_hours
    assert not CronExpression("0 0 */2 * * *").covers_all_hours
    assert not CronExpression("@daily").covers_all_hours


def test_unknown_zone() -> None:
    with pytest.raises(LookupError):
        CronExpression("@daily", tz="Mars/Olympus_Mons")


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param("* * * * * *", timedelta(seconds=1), id="every-second"),
        pytest.param("0 */5 * * * *", timedelta(minutes=5), id="every-5-minutes"),
        pytest.param("0 0,50 * * * *", timedelta(minutes=10), id="across-the-hour"),
        pytest.param("0 0 0,23 * * *", timedelta(hours=1), id="across-midnight"),
        pytest.param("0 0 4 * * *", timedelta(days=1), id="daily"),
        pytest.param("0 0 9 * * mon-fri", timedelta(days=1), id="weekdays"),
        pytest.param("0 0 9 * * mon,wed,fri", timedelta(days=2), id="mon-wed-fri"),
        pytest.param("0 0 0 1 * *", timedelta(days=28), id="monthly"),
        pytest.param("0 0 0 31 * *", timedelta(days=31), id="31st"),
        pytest.param("@yearly", timedelta(days=365), id="yearly"),
        pytest.param("0 0 0 29 2 *", timedelta(days=1461), id="leap-day"),
    ],
)
def test_min_interval(expr: str, expected: timedelta) -> None:
    assert min_interval(expr) == expected
    assert CronExpression(expr).min_interval() == expected


def test_validate_cron() -> None:
    assert validate_cron("*/5 * * * *") == (True, None)
    valid, error = validate_cron("0 0 ? * * *")
    assert not valid
    assert error == (
        "invalid cron expression '0 0 ? * * *': hour field '?': "
        "'?' is Quartz syntax and is not supported; use '*'"
    )


def test_cron_syntax_error_is_a_value_error_with_data() -> None:
    with pytest.raises(ValueError) as info:
        CronExpression("0 0 0 31 2 *")
    exc = info.value
    assert isinstance(exc, CronSyntaxError)
    assert isinstance(exc, scheduler.SchedulerError)
    assert (exc.expr, exc.field, exc.token) == ("0 0 0 31 2 *", "day-of-month", "31")
    assert "never fire" in exc.reason
    copy = pickle.loads(pickle.dumps(exc))
    assert (copy.field, copy.token, str(copy)) == (exc.field, exc.token, str(exc))


def test_non_string_expression() -> None:
    with pytest.raises(TypeError, match="must be a str, not int"):
        CronExpression(5)  # type: ignore[arg-type]


def test_other_exceptions() -> None:
    exc = scheduler.JobLookupError("x")
    assert str(exc) == "no job named 'x'"
    assert isinstance(exc, LookupError)
    assert isinstance(exc, scheduler.SchedulerError)
    lost = scheduler.LockLostError("daily_report")
    assert "lock 'daily_report' was lost" in str(lost)
    for original in (exc, lost):
        assert str(pickle.loads(pickle.dumps(original))) == str(original)


def test_public_api() -> None:
    assert scheduler.__all__ == sorted(scheduler.__all__)
    for name in scheduler.__all__:
        # Public modules (scheduler.backends.local) keep their path; private ones are hidden.
        assert not getattr(scheduler, name).__module__.startswith("scheduler._"), name


@pytest.mark.parametrize(
    "zone", ["America", "Nowhere/Town", ""], ids=["folder", "unknown", "empty"]
)
def test_a_zone_that_is_not_a_zone_raises_zone_info_not_found(zone: str) -> None:
    """Regression test: 'America' is a folder of the tz database and raised IsADirectoryError."""
    with pytest.raises(ZoneInfoNotFoundError):
        CronExpression("0 0 4 * * *", tz=zone)
