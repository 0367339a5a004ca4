"""Rejected expressions: each error names the field, the token and why."""

from __future__ import annotations

import pytest

from scheduler import CronExpression, CronSyntaxError, validate_cron


@pytest.mark.parametrize(
    ("expr", "field", "token", "reason"),
    [
        # Quartz syntax
        pytest.param("0 0 12 ? * MON", "day-of-month", "?", "use '*'", id="quartz-question-dom"),
        pytest.param("0 0 12 * * ?", "day-of-week", "?", "use '*'", id="quartz-question-dow"),
        pytest.param("0 0 12 1,? * *", "day-of-month", "?", "Quartz", id="quartz-question-in-list"),
        pytest.param("0 0 0 L * *", "day-of-month", "L", "'L' (last)", id="quartz-L"),
        pytest.param("0 0 0 * * 5L", "day-of-week", "5L", "'L' (last)", id="quartz-5L"),
        pytest.param("0 0 0 L-3 * *", "day-of-month", "L-3", "'L' (last)", id="quartz-L-offset"),
        pytest.param(
            "0 0 0 15W * *", "day-of-month", "15W", "'W' (nearest weekday)", id="quartz-W"
        ),
        pytest.param("0 0 0 LW * *", "day-of-month", "LW", "'W'", id="quartz-LW"),
        pytest.param("0 0 0 * * 2#1", "day-of-week", "2#1", "'#' (nth weekday", id="quartz-hash"),
        pytest.param("0 0 0 * * MON#2", "day-of-week", "MON#2", "'#'", id="quartz-hash-name"),
        pytest.param("0 0 0 * * * 2024", "year", "2024", "year", id="quartz-year-field"),
        pytest.param("0 0 0 * * * *", "year", "*", "remove it", id="quartz-year-star"),
        # out of range
        pytest.param(
            "60 * * * * *", "second", "60", "out of range for second (0-59)", id="second-60"
        ),
        pytest.param("0 60 * * * *", "minute", "60", "(0-59)", id="minute-60"),
        pytest.param("0 0 24 * * *", "hour", "24", "midnight is hour 0", id="hour-24"),
        pytest.param("0 0 0 0 * *", "day-of-month", "0", "(1-31)", id="dom-0"),
        pytest.param("0 0 0 32 * *", "day-of-month", "32", "(1-31)", id="dom-32"),
        pytest.param("0 0 0 1 0 *", "month", "0", "(1-12)", id="month-0"),
        pytest.param("0 0 0 1 13 *", "month", "13", "(1-12)", id="month-13"),
        pytest.param("0 0 0 * * 8", "day-of-week", "8", "(0-7)", id="dow-8"),
        pytest.param("0 0 20-25 * * *", "hour", "20-25", "25 is out of range", id="range-end-out"),
        pytest.param("0 99/5 * * * *", "minute", "99/5", "99 is out of range", id="step-start-out"),
        pytest.param("0 24 * * *", "hour", "24", "(0-23)", id="five-fields-hour-24"),
        # ranges and steps
        pytest.param(
            "0 30-10 * * * *", "minute", "30-10", "'10-30' or '30-59,0-10'", id="reversed"
        ),
        pytest.param(
            "0 0 0 * * fri-mon", "day-of-week", "fri-mon", "reversed", id="reversed-names"
        ),
        pytest.param("0 0 0 1 dec-jan *", "month", "dec-jan", "'12-12,1-1'", id="reversed-months"),
        pytest.param("*/0 * * * * *", "second", "*/0", "step 0", id="step-0"),
        pytest.param("0 0 0 1-5/0 * *", "day-of-month", "1-5/0", "step 0", id="range-step-0"),
        pytest.param("*/60 * * * * *", "second", "*/60", "use at most 59", id="step-too-big"),
        pytest.param("0 0 */24 * * *", "hour", "*/24", "use at most 23", id="hour-step-too-big"),
        pytest.param("0 0 0 1 */12 *", "month", "*/12", "use at most 11", id="month-step-too-big"),
        pytest.param("0 0 0 * * */7", "day-of-week", "*/7", "use at most 6", id="dow-step-too-big"),
        pytest.param("*/ * * * * *", "second", "*/", "missing step", id="step-missing"),
        pytest.param("*/x * * * * *", "second", "*/x", "not a number", id="step-not-a-number"),
        pytest.param("/5 * * * * *", "second", "/5", "missing value before '/'", id="step-no-base"),
        pytest.param("1/2/3 * * * * *", "second", "1/2/3", "more than one '/'", id="two-slashes"),
        pytest.param("1-2-3 * * * * *", "second", "1-2-3", "more than one '-'", id="two-dashes"),
        pytest.param("5- * * * * *", "second", "5-", "missing end of range", id="range-no-end"),
        pytest.param("-5 * * * * *", "second", "-5", "missing start of range", id="negative"),
        pytest.param("*-5 * * * * *", "second", "*-5", "'*' cannot start a range", id="star-range"),
        # empty fields and lists
        pytest.param("1,,2 * * * * *", "second", "1,,2", "empty list item", id="empty-item"),
        pytest.param("0 0 0 1, * *", "day-of-month", "1,", "empty list item", id="trailing-comma"),
        pytest.param("0 0 0 ,1 * *", "day-of-month", ",1", "empty list item", id="leading-comma"),
        pytest.param("", "expression", "", "empty", id="empty"),
        pytest.param(" \t ", "expression", " \t ", "empty", id="blank"),
        # names
        pytest.param("0 0 0 1 mon *", "month", "mon", "day-of-week field", id="weekday-in-month"),
        pytest.param("0 0 0 * * jan", "day-of-week", "jan", "month field", id="month-in-weekday"),
        pytest.param("0 0 0 1 janu *", "month", "janu", "unknown month name", id="long-month-name"),
        pytest.param(
            "0 0 0 * * monday", "day-of-week", "monday", "use one of sun, mon", id="long-day-name"
        ),
        pytest.param(
            "0 0 0 * * xyz", "day-of-week", "xyz", "unknown day-of-week name", id="unknown-dow-name"
        ),
        pytest.param(
            "0 0 jan * * *",
            "hour",
            "jan",
            "month names belong in the month field",
            id="name-in-hour",
        ),
        pytest.param(
            "0 0 0 mon * *", "day-of-month", "mon", "weekday names belong", id="name-in-dom"
        ),
        pytest.param("0 abc * * * *", "minute", "abc", "use a number", id="letters-in-minute"),
        pytest.param(
            "0 0 0 1 ja1 *", "month", "ja1", "not a number or a name", id="mixed-letters-digits"
        ),
        # field count and presets
        pytest.param("* * * *", "expression", "* * * *", "got 4", id="four-fields"),
        pytest.param("*", "expression", "*", "got 1", id="one-field"),
        pytest.param(
            "* * * * * * * *", "expression", "* * * * * * * *", "got 8", id="eight-fields"
        ),
        pytest.param("@every 5m", "expression", "@every 5m", "unknown preset", id="go-every"),
        pytest.param("@reboot", "expression", "@reboot", "unknown preset", id="reboot"),
        # stray characters
        pytest.param("0 0 0 1 * * ;", "year", ";", "year", id="stray-seventh"),
        pytest.param("0 0 12! * * *", "hour", "12!", "unexpected character '!'", id="bang"),
        pytest.param("0 0 1.5 * * *", "hour", "1.5", "unexpected character '.'", id="dot"),
        pytest.param(
            "0 0 0 * * 1\n", "day-of-week", "1\n", "unexpected character '\\n'", id="newline"
        ),
        pytest.param("0 0 ０ * * *", "hour", "０", "unexpected character", id="fullwidth-digit"),
        pytest.param("0 0 0 * * mon|tue", "day-of-week", "mon|tue", "'|'", id="pipe"),
        # never fires
        pytest.param("0 0 0 30 2 *", "day-of-month", "30", "never fire", id="feb-30"),
        pytest.param(
            "0 0 0 31 2,4,6 *", "day-of-month", "31", "February, April, June", id="no-31st"
        ),
        pytest.param(
            "0 0 31 4,6,9,11 *", "day-of-month", "31", "never fire", id="no-31st-five-fields"
        ),
    ],
)
def test_invalid(expr: str, field: str, token: str, reason: str) -> None:
    with pytest.raises(CronSyntaxError) as info:
        CronExpression(expr)
    exc = info.value
    assert (exc.field, exc.token) == (field, token)
    assert reason in exc.reason
    message = str(exc)
    assert message.startswith(f"invalid cron expression {expr!r}: {field} field {token!r}: ")
    assert validate_cron(expr) == (False, message)
