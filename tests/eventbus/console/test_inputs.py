"""Dates at the edges of what a datetime holds are a form error, not a 500 (review finding 4):
``parse_datetime`` on its own, and the failures page's filters over HTTP."""

from __future__ import annotations

from datetime import UTC, datetime

import httpx
import pytest

from eventbus.console import parse_datetime
from tests.console_support import login


@pytest.mark.parametrize(
    "value",
    [
        "0001-01-01T00:00+14:00",  # UTC is a day before year 1
        "9999-12-31T23:59-14:00",  # UTC is in year 10000
        "0001-01-01T00:00:00+23:59",
    ],
)
def test_a_time_that_utc_cannot_hold_is_an_error_that_names_the_field(value: str) -> None:
    errors: list[str] = []
    assert parse_datetime(value, "since", errors) is None
    assert errors == [
        f"since {value!r} is out of range: it must fall between the years 1 and 9999 in UTC"
    ]


def test_the_edges_themselves_are_accepted() -> None:
    errors: list[str] = []
    assert parse_datetime("0001-01-01T00:00", "since", errors) == datetime(1, 1, 1, tzinfo=UTC)
    assert parse_datetime("9999-12-31T23:59+00:00", "until", errors) == datetime(
        9999, 12, 31, 23, 59, tzinfo=UTC
    )
    assert errors == []


@pytest.mark.parametrize(
    "params",
    [
        {"since": "0001-01-01T00:00+14:00"},
        {"until": "9999-12-31T23:59-14:00"},
        {"since": "2024-01-01T00:00", "until": "0001-01-01T00:00+01:00"},
    ],
)
async def test_the_failures_filters_answer_400_with_the_message(
    client: httpx.AsyncClient, params: dict[str, str]
) -> None:
    """Regression test: each was a 500 (OverflowError in the conversion to UTC)."""
    await login(client)
    r = await client.get("/ops/failures", params=params)
    assert r.status_code == 400
    assert "is out of range: it must fall between the years 1 and 9999 in UTC" in r.text
