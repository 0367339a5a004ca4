"""The top-level API: lazy backend re-exports and ``register_events``."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest

import scheduler
import scheduler.backends.redis
import scheduler.backends.sql
from eventbus import Event, EventBus, EventRegistry, UnknownEventError
from scheduler import (
    LockLost,
    RunContext,
    RunFailed,
    RunSkipped,
    RunStarted,
    RunSucceeded,
    Scheduler,
    register_events,
)

LAZY = ["RedisLock", "SqlJobStore", "SqlRunStore"]


def test_import_scheduler_loads_neither_redis_nor_sqlalchemy_until_a_backend_name_is_used() -> None:
    script = (
        "import scheduler, sys\n"
        "assert 'redis' not in sys.modules and 'sqlalchemy' not in sys.modules, 'eager'\n"
        "scheduler.SqlRunStore\n"
        "assert 'sqlalchemy' in sys.modules and 'redis' not in sys.modules, 'sql'\n"
        "from scheduler import RedisLock\n"
        "assert 'redis' in sys.modules, 'redis'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("name", "module"),
    [
        pytest.param("RedisLock", scheduler.backends.redis, id="RedisLock"),
        pytest.param("SqlRunStore", scheduler.backends.sql, id="SqlRunStore"),
        pytest.param("SqlJobStore", scheduler.backends.sql, id="SqlJobStore"),
    ],
)
def test_lazy_names_are_the_backend_objects_listed_in_all_and_dir(
    name: str, module: object
) -> None:
    assert getattr(scheduler, name) is getattr(module, name)
    assert name in scheduler.__all__
    assert name in dir(scheduler)


def test_from_scheduler_import_the_design_md_names() -> None:
    from scheduler import CronExpression, RedisLock, SqlRunStore

    assert RedisLock is scheduler.backends.redis.RedisLock
    assert SqlRunStore is scheduler.backends.sql.SqlRunStore
    assert CronExpression.__module__ == "scheduler"


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="^module 'scheduler' has no attribute 'Nope'$"):
        # mypy flags it too (an unused ignore would fail --strict): no __getattr__ hides typos
        _ = scheduler.Nope  # type: ignore[attr-defined]


def test_register_events_declares_every_lifecycle_event_once() -> None:
    reg = EventRegistry()
    assert register_events(reg) == []
    assert {name: reg.get(name) for name in reg.names()} == {
        "scheduler.lock.lost": LockLost,
        "scheduler.run.failed": RunFailed,
        "scheduler.run.skipped": RunSkipped,
        "scheduler.run.started": RunStarted,
        "scheduler.run.succeeded": RunSucceeded,
    }
    assert register_events(reg) == []  # again: nothing to do, no DuplicateEventError
    assert len(reg) == 5


async def test_a_bus_can_subscribe_before_the_scheduler_exists() -> None:
    reg = EventRegistry()
    bus = EventBus(registry=reg)
    with pytest.raises(UnknownEventError):
        bus.on(RunSucceeded)
    register_events(reg)
    succeeded: list[RunSucceeded] = []
    bus.on(RunSucceeded)(succeeded.append)
    sched = Scheduler(bus=bus)

    async def job(run: RunContext) -> None:
        pass

    sched.add_cron("nightly", "0 3 * * *", job)
    with anyio.fail_after(5):
        record = await sched.trigger("nightly")
    assert [(e.job, e.run_id) for e in succeeded] == [("nightly", record.id)]


async def test_a_name_taken_by_another_class_is_reported_and_never_emitted() -> None:
    reg = EventRegistry()

    class Other(Event, name="scheduler.run.succeeded", registry=reg):
        job: str

    assert register_events(reg) == [RunSucceeded]
    assert reg.get("scheduler.run.succeeded") is Other
    assert reg.get("scheduler.run.started") is RunStarted
    bus = EventBus(registry=reg)
    seen: list[str] = []

    @bus.on("scheduler.**")
    def collect(e: Event) -> None:
        seen.append(e.event_name)

    sched = Scheduler(bus=bus)

    async def job(run: RunContext) -> None:
        pass

    sched.add_cron("nightly", "0 3 * * *", job)
    with anyio.fail_after(5):
        record = await sched.trigger("nightly")
    assert record.status == "succeeded"
    assert seen == ["scheduler.run.started"]
