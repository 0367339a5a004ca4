"""``Scheduler.jobs()`` gives each job's next fire times (APScheduler's ``next_run_time``),
in its zone, the same as ``next_fire_times(name, n)`` and the CLI's ``jobs``.

Regression test: ``jobs()`` listed kind, schedule, zone and state, but no next fire.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import anyio
import pytest

from scheduler import RunContext, Scheduler
from scheduler._cli import main
from tests.scheduler.helpers import at, make

SHANGHAI = ZoneInfo("Asia/Shanghai")


async def noop(run: RunContext) -> None: ...


def test_jobs_carry_their_next_fires_in_their_zone_before_start() -> None:
    sched, _, _ = make()
    sched.add_cron("daily", "0 0 9 * * *", noop, tz="Asia/Shanghai")
    sched.add_interval("poll", 90, noop)
    daily, poll = sched.jobs()
    assert daily.next_fire_time == datetime(2024, 1, 1, 9, tzinfo=SHANGHAI)
    assert daily.next_fire_time.tzinfo == SHANGHAI
    assert poll.next_fire_times == (at(90),)
    three = {j.name: j.next_fire_times for j in sched.jobs(upcoming=3)}
    assert three == {n: tuple(sched.next_fire_times(n, 3)) for n in ("daily", "poll")}
    with pytest.raises(ValueError, match=r"^n=0 must be a whole number, at least 1$"):
        sched.jobs(upcoming=0)


def test_jobs_lists_copies_and_leaves_the_registered_jobs_alone() -> None:
    """Two callers asking for different numbers of fires each get theirs, and ``get()`` holds
    no fire times a past ``jobs()`` left there (they would be stale)."""
    sched, _, _ = make()
    sched.add_interval("poll", 90, noop)
    [three] = sched.jobs(upcoming=3)
    [one] = sched.jobs(upcoming=1)
    assert three.next_fire_times == (at(90), at(180), at(270))
    assert one.next_fire_times == (at(90),)
    assert sched.get("poll").next_fire_times == () and sched.get("poll") is not three
    assert one == sched.get("poll")  # the same job otherwise


async def test_jobs_next_fires_follow_the_running_loop_and_end_with_the_job() -> None:
    sched, clock, _ = make()
    sched.add_interval("poll", 90, noop)
    sched.add_timeout("once", 10, noop)
    with anyio.fail_after(5):
        async with sched:
            await clock.advance(100)
            jobs = {j.name: j for j in sched.jobs(upcoming=2)}
            assert jobs["poll"].next_fire_times == (at(180), at(270))
            assert jobs["once"].next_fire_times == () and jobs["once"].next_fire_time is None
            assert list(jobs["poll"].next_fire_times) == sched.next_fire_times("poll", 2)


APP = """
from scheduler import Scheduler

sched = Scheduler()

@sched.cron("0 0 4 * * *", name="report", tz="Asia/Shanghai")
async def report(run):
    pass
"""


def test_the_cli_prints_the_fires_jobs_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "nextfires_app.py").write_text(textwrap.dedent(APP))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "nextfires_app", raising=False)
    assert main(["jobs", "--app", "nextfires_app:sched", "-n", "2"]) == 0
    printed = capsys.readouterr().out.splitlines()[1:]
    sched: Scheduler = importlib.import_module("nextfires_app").sched
    [job] = sched.jobs(upcoming=2)
    assert [line.split()[0] for line in printed] == [t.isoformat() for t in job.next_fire_times]
