"""SqlRunStore and SqlJobStore on a real PostgreSQL: the SQLite suites, plus replicas racing.

test_runs.py's and test_registry_sql.py's tests are collected here a second time, with this
module's ``store`` and ``engine`` fixtures (an emptied PostgreSQL database per test) in place
of the memory and SQLite ones.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import anyio
import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from scheduler.abc import RunStore
from scheduler.backends.sql import SqlRunStore, create_tables, make_engine
from tests.scheduler import test_registry_sql as jobs_suite
from tests.scheduler import test_runs as suite

T0 = suite.T0
record = suite.record


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(postgres_url: str) -> AsyncIterator[RunStore]:
    sql = SqlRunStore.from_url(postgres_url)
    yield sql
    await sql.aclose()


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(postgres_url)
    await create_tables(eng)
    yield eng
    await eng.dispose()


test_add_update_get_round_trip_every_field = suite.test_add_update_get_round_trip_every_field
test_query_is_newest_first_and_filters = suite.test_query_is_newest_first_and_filters
test_results_round_trip_with_their_repr_flag = suite.test_results_round_trip_with_their_repr_flag
test_last_scheduled_is_the_latest_fire_of_the_task_whatever_its_status = (
    suite.test_last_scheduled_is_the_latest_fire_of_the_task_whatever_its_status
)
test_resume_cursor_comes_from_a_failed_or_abandoned_last_run = (
    suite.test_resume_cursor_comes_from_a_failed_or_abandoned_last_run
)
test_checkpoint_and_touch_update_one_run = suite.test_checkpoint_and_touch_update_one_run
test_abandon_stale_marks_only_expired_running_rows = (
    suite.test_abandon_stale_marks_only_expired_running_rows
)
test_a_run_after_a_failure_resumes_from_its_checkpoint = (
    suite.test_a_run_after_a_failure_resumes_from_its_checkpoint
)
test_a_run_left_running_by_a_dead_process_is_abandoned_and_resumed = (
    suite.test_a_run_left_running_by_a_dead_process_is_abandoned_and_resumed
)
test_manual_trigger_goes_through_the_same_lock = (
    suite.test_manual_trigger_goes_through_the_same_lock
)
test_reminders_load_at_start_and_again_after_a_restart = (
    jobs_suite.test_reminders_load_at_start_and_again_after_a_restart
)
test_job_table_put_replaces_and_delete_removes = (
    jobs_suite.test_job_table_put_replaces_and_delete_removes
)
test_loaded_job_fires_in_its_time_zone = jobs_suite.test_loaded_job_fires_in_its_time_zone
test_a_paused_table_job_is_skipped_by_every_replica_and_after_a_restart = (
    jobs_suite.test_a_paused_table_job_is_skipped_by_every_replica_and_after_a_restart
)


async def test_replicas_racing_to_abandon_stale_runs_count_each_run_once(
    postgres_url: str,
) -> None:
    """Three replicas, each with its own engine, sweep the same 20 dead runs at once."""
    first = SqlRunStore.from_url(postgres_url)
    replicas = [first, SqlRunStore.from_url(postgres_url), SqlRunStore.from_url(postgres_url)]
    counts: list[int] = []

    async def sweep(replica: SqlRunStore) -> None:
        counts.append(await replica.abandon_stale("job", T0 + timedelta(hours=1)))

    try:
        with anyio.fail_after(10):
            for n in range(20):
                await first.add(record(n))
            await first.add(record(99, expires_at=T0 + timedelta(hours=2)))  # still alive
            for replica in replicas[1:]:
                await replica.get("warm-up")  # tables exist: no concurrent create
            async with anyio.create_task_group() as tg:
                for replica in replicas:
                    tg.start_soon(sweep, replica)
            runs = await first.query(limit=None)
    finally:
        for replica in replicas:
            await replica.aclose()
    assert sum(counts) == 20
    statuses = {r.id: r.status for r in runs}
    assert statuses.pop("run99") == "running"
    assert set(statuses.values()) == {"abandoned"}


async def test_concurrent_first_use_creates_the_tables_once(postgres_url: str) -> None:
    """Replicas starting together on an empty database all get a working run table."""
    replicas = [SqlRunStore.from_url(postgres_url) for _ in range(4)]

    async def add(i: int, replica: SqlRunStore) -> None:
        await replica.add(record(i))

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                for i, replica in enumerate(replicas):
                    tg.start_soon(add, i, replica)
            runs = await replicas[0].query(limit=None)
    finally:
        for replica in replicas:
            await replica.aclose()
    assert sorted(r.id for r in runs) == ["run0", "run1", "run2", "run3"]
