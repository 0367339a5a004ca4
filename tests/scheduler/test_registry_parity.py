"""The runtime registry beside add_cron: add_interval, add_timeout, add_at, the jobs view,
next_fire_times, and bad input that names the argument (issue 15, items 6 and the errors)."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import anyio
import pytest

from scheduler import (
    IntervalTooShortError,
    JobLookupError,
    MemoryRunStore,
    RunContext,
)
from tests.scheduler.helpers import at, make

PARIS = ZoneInfo("Europe/Paris")


async def noop(run: RunContext) -> None:
    pass


async def fired(runs: MemoryRunStore, name: str) -> list[tuple[datetime | None, str, str]]:
    records = await runs.query(task_name=name, limit=None)
    return sorted((r.scheduled_at, r.trigger, r.status) for r in records if r.scheduled_at)


async def test_add_interval_fires_every_interval_from_when_it_was_added() -> None:
    sched, clock, runs = make()
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(30)
            sched.add_interval("poll", 60, noop)
            await clock.advance(150)
    assert await fired(runs, "poll") == [
        (at(90), "interval", "succeeded"),
        (at(150), "interval", "succeeded"),
    ]


def test_add_interval_is_held_to_min_interval_unless_overridden() -> None:
    sched, _, _ = make()
    with pytest.raises(IntervalTooShortError, match=r"'poll'.*'every 5s'.*5s.*60s"):
        sched.add_interval("poll", 5, noop)
    assert sched.jobs() == []
    job = sched.add_interval("poll", 5, noop, min_interval=5)
    assert (job.kind, job.schedule, job.tz) == ("interval", "every 5s", "UTC")


async def test_add_timeout_fires_once_after_the_delay() -> None:
    sched, clock, runs = make()
    sched.add_timeout("warmup", 5, noop)
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(60)
    assert await fired(runs, "warmup") == [(at(5), "timeout", "succeeded")]


async def test_add_at_fires_once_at_the_instant_in_any_zone() -> None:
    sched, clock, runs = make()
    when = datetime(2024, 1, 1, 1, 30, tzinfo=PARIS)  # 00:30 UTC
    job = sched.add_at("reminder:7", when, noop)
    assert (job.kind, job.schedule, job.tz) == ("at", f"at {when.isoformat()}", "Europe/Paris")
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(3600)
    assert await fired(runs, "reminder:7") == [(at(1800), "at", "succeeded")]


def test_add_at_refuses_a_naive_datetime_and_names_the_argument() -> None:
    sched, _, _ = make()
    with pytest.raises(ValueError, match=r"^when=datetime.datetime\(2024, 1, 1, 9, 0\) is naive"):
        sched.add_at("reminder:7", datetime(2024, 1, 1, 9, 0), noop)
    assert sched.jobs() == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"max_running": 0}, r"^max_running=0 must be a whole number", id="max-0"),
        pytest.param({"max_running": 1.5}, r"^max_running=1.5 must be a whole", id="max-float"),
        pytest.param({"jitter": -1}, r"^jitter=-1 must be zero or more seconds", id="jitter"),
        pytest.param({"timeout": -5}, r"^timeout=-5 must be a positive number", id="timeout"),
        pytest.param({"timeout": 0}, r"^timeout=0 must be a positive number", id="timeout-0"),
        pytest.param(
            {"catch_up": "sometimes"},
            r"^catch_up='sometimes' must be one of 'skip', 'latest', 'all'$",
            id="catch-up",
        ),
        pytest.param({"max_catch_up": 0}, r"^max_catch_up=0 must be a whole", id="max-catch-up"),
        # review minor b: each was accepted, and broke the job later (never fired, or a
        # lock-error at every fire: Redis cannot hold an infinite TTL)
        pytest.param({"jitter": math.inf}, r"^jitter=inf must be a finite", id="jitter-inf"),
        pytest.param({"jitter": True}, r"^jitter=True must be a number of sec", id="jitter-bool"),
        pytest.param({"jitter": math.nan}, r"^jitter=nan must be a finite", id="jitter-nan"),
        pytest.param(
            {"misfire_grace": math.inf}, r"^misfire_grace=inf must be a finite", id="grace-inf"
        ),
        pytest.param(
            {"misfire_grace": False}, r"^misfire_grace=False must be a number", id="grace-bool"
        ),
        pytest.param({"timeout": 1e308}, r"^timeout=1e\+308 must be at most", id="timeout-huge"),
        pytest.param({"timeout": True}, r"^timeout=True must be a number", id="timeout-bool"),
        pytest.param({"lock_ttl": 1e-9}, r"^lock_ttl=1e-09 must be at least 0.001", id="ttl-tiny"),
        pytest.param({"lock_ttl": math.inf}, r"^lock_ttl=inf must be a finite", id="ttl-inf"),
        pytest.param({"jitter": 10**12}, r"^jitter=1000000000000 must be at most", id="big"),
        pytest.param(
            {"max_running": 2, "wait_for_completion": False},
            r"max_running=2 or wait_for_completion=False, not both",
            id="both-limits",
        ),
    ],
)
def test_bad_options_are_refused_by_every_registration_and_name_the_argument(
    options: dict[str, Any], message: str
) -> None:
    sched, _, _ = make()
    registrations: list[Callable[[], object]] = [
        lambda: sched.add_cron("j", "0 * * * * *", noop, **options),
        lambda: sched.add_interval("j", 60, noop, **options),
        lambda: sched.add_timeout("j", 60, noop, **options),
        lambda: sched.add_at("j", at(60), noop, **options),
        lambda: sched.cron("0 * * * * *", name="j", **options)(noop),
        lambda: sched.interval(seconds=60, name="j", **options)(noop),
        lambda: sched.timeout(seconds=60, name="j", **options)(noop),
    ]
    for register in registrations:
        with pytest.raises(ValueError, match=message):
            register()
    assert sched.jobs() == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        pytest.param("a\x00b", r"contains a NUL character", id="nul"),
        pytest.param("\ud800x", r"not valid Unicode text \(a lone surrogate\)", id="surrogate"),
    ],
)
def test_a_name_no_backend_can_keep_is_refused(name: str, message: str) -> None:
    """A lone surrogate broke the console's job list (a 500); PostgreSQL keeps neither."""
    sched, _, _ = make()
    with pytest.raises(ValueError, match=message):
        sched.add_cron(name, "0 * * * * *", noop)
    assert sched.jobs() == []


def test_unknown_names_raise_job_lookup_error() -> None:
    sched, _, _ = make()
    with pytest.raises(JobLookupError, match="no job named 'ghost'"):
        sched.next_fire_times("ghost", 3)


def test_next_fire_times_before_start_are_those_of_a_start_now_in_the_jobs_zone() -> None:
    sched, _, _ = make()
    sched.add_cron("daily", "0 0 9 * * *", noop, tz="Europe/Paris")
    sched.add_interval("poll", 90, noop)
    assert sched.next_fire_times("daily", 2) == [
        datetime(2024, 1, 1, 9, tzinfo=PARIS),
        datetime(2024, 1, 2, 9, tzinfo=PARIS),
    ]
    assert sched.next_fire_times("poll", 3) == [at(90), at(180), at(270)]
    with pytest.raises(ValueError, match=r"^n=0 must be a whole number, at least 1$"):
        sched.next_fire_times("poll", 0)


async def test_next_fire_times_while_running_follow_the_loops_timetable() -> None:
    sched, clock, _ = make()
    sched.add_interval("poll", 90, noop)
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(100)
            assert sched.next_fire_times("poll", 2) == [at(180), at(270)]
            sched.add_timeout("once", 10, noop)
            assert sched.next_fire_times("once", 5) == [at(110)]
            await clock.advance(20)
            assert sched.next_fire_times("once", 5) == []  # fired; never again


async def test_jobs_show_kind_schedule_zone_paused_and_last_run() -> None:
    sched, clock, _ = make()
    sched.add_cron("daily", "0 0 9 * * *", noop, tz="Asia/Shanghai")
    sched.add_interval("poll", 60, noop)
    with anyio.fail_after(5):
        async with sched:
            await sched.pause("daily")
            await clock.advance(60)
    rows = [(j.name, j.kind, j.schedule, j.tz, j.paused) for j in sched.jobs()]
    assert rows == [
        ("daily", "cron", "0 0 9 * * *", "Asia/Shanghai", True),
        ("poll", "interval", "every 60s", "UTC", False),
    ]
    poll = sched.get("poll")
    assert poll.last_run is not None
    assert (poll.last_run.status, poll.last_run.scheduled_at) == ("succeeded", at(60))
    assert sched.get("daily").last_run is None
