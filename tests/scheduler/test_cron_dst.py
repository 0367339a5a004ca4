"""DST policy: skipped wall times and repeated ones, in four zones.

Pinned hours: a job in the gap fires once, at the transition instant; in a repeated hour
it fires at the first occurrence only. All 24 hours: the gap is skipped and a repeated
hour fires twice.
"""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from scheduler import CronExpression


def z(text: str) -> datetime:
    return datetime.fromisoformat(text.removesuffix("Z")).replace(tzinfo=UTC)


NY, LONDON, LORD_HOWE, SAO_PAULO = (
    "America/New_York",
    "Europe/London",
    "Australia/Lord_Howe",
    "America/Sao_Paulo",
)


@pytest.mark.parametrize(
    ("zone", "expr", "after", "expected"),
    [
        # America/New_York: 2024-03-10 02:00 EST -> 03:00 EDT (07:00Z)
        pytest.param(
            NY,
            "0 30 2 * * *",
            "2024-03-09T12:00Z",
            ["2024-03-10T07:00Z", "2024-03-11T06:30Z"],
            id="ny-gap-pinned-fires-at-transition",
        ),
        pytest.param(
            NY,
            "0 0/15 2 * * *",
            "2024-03-09T12:00Z",
            ["2024-03-10T07:00Z", "2024-03-11T06:00Z"],
            id="ny-gap-pinned-fires-once",
        ),
        pytest.param(
            NY,
            "0 30 * * * *",
            "2024-03-10T05:00Z",
            ["2024-03-10T05:30Z", "2024-03-10T06:30Z", "2024-03-10T07:30Z"],
            id="ny-gap-all-hours-skips",
        ),
        pytest.param(
            NY,
            "0 0 * * * *",
            "2024-03-10T05:30Z",
            ["2024-03-10T06:00Z", "2024-03-10T07:00Z", "2024-03-10T08:00Z"],
            id="ny-gap-hourly",
        ),
        pytest.param(
            NY,
            "0 30 2 * * *",
            "2024-03-10T06:59:59Z",
            ["2024-03-10T07:00Z"],
            id="ny-gap-after-just-before",
        ),
        pytest.param(
            NY,
            "0 30 2 * * *",
            "2024-03-10T07:00Z",
            ["2024-03-11T06:30Z"],
            id="ny-gap-after-the-transition",
        ),
        # America/New_York: 2024-11-03 02:00 EDT -> 01:00 EST (06:00Z)
        pytest.param(
            NY,
            "0 30 1 * * *",
            "2024-11-02T12:00Z",
            ["2024-11-03T05:30Z", "2024-11-04T06:30Z"],
            id="ny-repeat-pinned-first-only",
        ),
        pytest.param(
            NY,
            "0 */20 0-3 * * *",
            "2024-11-03T05:10Z",
            ["2024-11-03T05:20Z", "2024-11-03T05:40Z", "2024-11-03T07:00Z"],
            id="ny-repeat-pinned-range",
        ),
        pytest.param(
            NY,
            "0 30 * * * *",
            "2024-11-03T04:00Z",
            ["2024-11-03T04:30Z", "2024-11-03T05:30Z", "2024-11-03T06:30Z", "2024-11-03T07:30Z"],
            id="ny-repeat-all-hours-twice",
        ),
        pytest.param(
            NY,
            "0 */20 * * * *",
            "2024-11-03T05:10Z",
            ["2024-11-03T05:20Z", "2024-11-03T05:40Z", "2024-11-03T06:00Z", "2024-11-03T06:20Z"],
            id="ny-repeat-all-hours-interleaved",
        ),
        pytest.param(
            NY,
            "0 30 * * * *",
            "2024-11-03T05:40Z",
            ["2024-11-03T06:30Z", "2024-11-03T07:30Z"],
            id="ny-repeat-after-in-first-pass",
        ),
        pytest.param(
            NY,
            "0 30 * * * *",
            "2024-11-03T06:40Z",
            ["2024-11-03T07:30Z"],
            id="ny-repeat-after-in-second-pass",
        ),
        pytest.param(
            NY,
            "0 30 1 * * *",
            "2024-11-03T05:40Z",
            ["2024-11-04T06:30Z"],
            id="ny-repeat-pinned-after-first",
        ),
        # Europe/London: 2024-03-31 01:00 GMT -> 02:00 BST (01:00Z)
        pytest.param(
            LONDON,
            "0 30 1 * * *",
            "2024-03-30T12:00Z",
            ["2024-03-31T01:00Z", "2024-04-01T00:30Z"],
            id="london-gap-pinned",
        ),
        pytest.param(
            LONDON,
            "0 30 * * * *",
            "2024-03-31T00:00Z",
            ["2024-03-31T00:30Z", "2024-03-31T01:30Z"],
            id="london-gap-all-hours",
        ),
        # Europe/London: 2024-10-27 02:00 BST -> 01:00 GMT (01:00Z)
        pytest.param(
            LONDON,
            "0 30 1 * * *",
            "2024-10-26T12:00Z",
            ["2024-10-27T00:30Z", "2024-10-28T01:30Z"],
            id="london-repeat-pinned",
        ),
        pytest.param(
            LONDON,
            "0 30 * * * *",
            "2024-10-27T00:00Z",
            ["2024-10-27T00:30Z", "2024-10-27T01:30Z", "2024-10-27T02:30Z"],
            id="london-repeat-all-hours",
        ),
        # Australia/Lord_Howe: 2024-10-06 02:00 +10:30 -> 02:30 +11 (2024-10-05 15:30Z)
        pytest.param(
            LORD_HOWE,
            "0 15 2 * * *",
            "2024-10-05T00:00Z",
            ["2024-10-05T15:30Z", "2024-10-06T15:15Z"],
            id="lord-howe-gap-pinned",
        ),
        pytest.param(
            LORD_HOWE,
            "0 15 * * * *",
            "2024-10-05T14:30Z",
            ["2024-10-05T14:45Z", "2024-10-05T16:15Z"],
            id="lord-howe-gap-all-hours",
        ),
        pytest.param(
            LORD_HOWE,
            "0 45 * * * *",
            "2024-10-05T14:30Z",
            ["2024-10-05T15:15Z", "2024-10-05T15:45Z"],
            id="lord-howe-gap-half-hour-exists",
        ),
        # Australia/Lord_Howe: 2024-04-07 02:00 +11 -> 01:30 +10:30 (2024-04-06 15:00Z)
        pytest.param(
            LORD_HOWE,
            "0 45 1 * * *",
            "2024-04-06T00:00Z",
            ["2024-04-06T14:45Z", "2024-04-07T15:15Z"],
            id="lord-howe-repeat-pinned",
        ),
        pytest.param(
            LORD_HOWE,
            "0 45 * * * *",
            "2024-04-06T14:00Z",
            ["2024-04-06T14:45Z", "2024-04-06T15:15Z", "2024-04-06T16:15Z"],
            id="lord-howe-repeat-all-hours",
        ),
        pytest.param(
            LORD_HOWE,
            "0 15 * * * *",
            "2024-04-06T14:00Z",
            ["2024-04-06T14:15Z", "2024-04-06T15:45Z"],
            id="lord-howe-not-repeated",
        ),
        # America/Sao_Paulo: 2018-11-04 00:00 -03 -> 01:00 -02 (03:00Z), midnight skipped
        pytest.param(
            SAO_PAULO,
            "@daily",
            "2018-11-02T12:00Z",
            ["2018-11-03T03:00Z", "2018-11-04T03:00Z", "2018-11-05T02:00Z"],
            id="sao-paulo-midnight-gap",
        ),
        pytest.param(
            SAO_PAULO,
            "0 0 0 4 11 *",
            "2018-01-01T00:00Z",
            ["2018-11-04T03:00Z"],
            id="sao-paulo-yearly-in-gap",
        ),
        pytest.param(
            SAO_PAULO,
            "0 0 * * * *",
            "2018-11-04T01:30Z",
            ["2018-11-04T02:00Z", "2018-11-04T03:00Z", "2018-11-04T04:00Z"],
            id="sao-paulo-gap-hourly",
        ),
        # America/Sao_Paulo: 2019-02-17 00:00 -02 -> 2019-02-16 23:00 -03 (02:00Z)
        pytest.param(
            SAO_PAULO,
            "0 30 23 * * *",
            "2019-02-16T12:00Z",
            ["2019-02-17T01:30Z", "2019-02-18T02:30Z"],
            id="sao-paulo-repeat-pinned",
        ),
        pytest.param(
            SAO_PAULO,
            "0 30 * * * *",
            "2019-02-17T00:00Z",
            ["2019-02-17T00:30Z", "2019-02-17T01:30Z", "2019-02-17T02:30Z", "2019-02-17T03:30Z"],
            id="sao-paulo-repeat-all-hours",
        ),
        pytest.param(
            SAO_PAULO,
            "@daily",
            "2019-02-15T12:00Z",
            ["2019-02-16T02:00Z", "2019-02-17T03:00Z"],
            id="sao-paulo-daily-across-repeat",
        ),
    ],
)
def test_dst(zone: str, expr: str, after: str, expected: list[str]) -> None:
    cron = CronExpression(expr, tz=zone)
    fires = cron.next_times(len(expected), after=z(after))
    # Compare in UTC: per PEP 495 an aware datetime in a repeated hour never equals one
    # in another zone, even at the same instant.
    assert [f.astimezone(UTC) for f in fires] == [z(e) for e in expected]
    assert all(f.tzinfo is cron.tz for f in fires)
    assert all(cron.matches(f) for f in fires)


def test_transition_instant_reads_as_the_first_wall_time_after_the_gap() -> None:
    fire = CronExpression("0 30 2 * * *", tz=NY).next_after(z("2024-03-09T12:00Z"))
    assert fire.isoformat() == "2024-03-10T03:00:00-04:00"


def test_second_occurrence_carries_fold() -> None:
    fires = CronExpression("0 30 1 * * *", tz="America/New_York").next_times(
        1, after=z("2024-11-02T12:00Z")
    )
    hourly = CronExpression("0 30 * * * *", tz=NY).next_times(3, after=z("2024-11-03T05:00Z"))
    assert [f.fold for f in hourly] == [0, 1, 0]
    assert [f.isoformat() for f in hourly] == [
        "2024-11-03T01:30:00-04:00",
        "2024-11-03T01:30:00-05:00",
        "2024-11-03T02:30:00-05:00",
    ]
    assert fires[0].isoformat() == "2024-11-03T01:30:00-04:00"


@pytest.mark.parametrize(
    ("zone", "expr", "when", "expected"),
    [
        pytest.param(NY, "0 30 2 * * *", "2024-03-10T07:00Z", True, id="pinned-transition-instant"),
        pytest.param(
            NY, "0 30 * * * *", "2024-03-10T07:00Z", False, id="all-hours-not-at-transition"
        ),
        pytest.param(NY, "0 0 3 * * *", "2024-03-10T07:00Z", True, id="real-03-00"),
        pytest.param(NY, "0 30 4 * * *", "2024-03-10T07:00Z", False, id="gap-wall-does-not-match"),
        pytest.param(NY, "0 30 1 * * *", "2024-11-03T05:30Z", True, id="pinned-first-occurrence"),
        pytest.param(NY, "0 30 1 * * *", "2024-11-03T06:30Z", False, id="pinned-second-occurrence"),
        pytest.param(
            NY, "0 30 * * * *", "2024-11-03T06:30Z", True, id="all-hours-second-occurrence"
        ),
        pytest.param(NY, "0 0 * * * *", "2024-11-03T06:00Z", True, id="fall-back-instant"),
    ],
)
def test_matches_under_dst(zone: str, expr: str, when: str, expected: bool) -> None:
    assert CronExpression(expr, tz=ZoneInfo(zone)).matches(z(when)) is expected
