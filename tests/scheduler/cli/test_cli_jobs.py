"""``python -m scheduler jobs``, ``pause NAME`` and ``resume NAME`` (issue 15, item 7)."""

from __future__ import annotations

import sqlite3
import sys
import textwrap
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from scheduler import JobDefinition, RunContext, RunRecord, Scheduler, VirtualClock
from scheduler._cli._main import main
from scheduler.backends.sql import SqlJobStore, SqlRunStore, make_engine

T0 = datetime(2024, 1, 1, tzinfo=UTC)
AFTER = ["--after", "2024-01-01T00:00:00+00:00"]


def record(n: int, name: str, status: str, error: str | None = None) -> RunRecord:
    when = T0 - timedelta(hours=n)
    return RunRecord(
        id=f"r{n}",
        task_name=name,
        trigger="cron",
        status=status,  # type: ignore[arg-type]
        scheduled_at=when,
        started_at=when,
        finished_at=when,
        error=error,
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    """A SQLite file with three table jobs and a few runs of the first; returns its path."""
    path = tmp_path / "app.db"

    async def fill() -> None:
        engine = make_engine(path)
        try:
            table = SqlJobStore(engine)
            await table.put(JobDefinition(name="reminder:1", expr="0 0 9 * * *", tz="Europe/Paris"))
            await table.put(JobDefinition(name="reminder:2", expr="0 */30 * * * *", enabled=False))
            await table.put(JobDefinition(name="reminder:3", expr="61 * * * *"))
            runs = SqlRunStore(engine)
            await runs.add(record(3, "reminder:1", "succeeded"))
            await runs.add(record(2, "reminder:1", "skipped", "claimed: another replica took it"))
        finally:
            await engine.dispose()

    anyio.run(fill)
    return str(path)


def test_jobs_from_the_job_table(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "--db", db, "-n", "2", *AFTER]) == 0
    assert capsys.readouterr().out.splitlines() == [
        (
            "reminder:1  cron '0 0 9 * * *' (Europe/Paris)  active  "
            "last run: succeeded at 2023-12-31T21:00:00Z"
        ),
        "    2024-01-01T09:00:00+01:00  2024-01-01T08:00:00Z",
        "    2024-01-02T09:00:00+01:00  2024-01-02T08:00:00Z",
        "reminder:2  cron '0 */30 * * * *' (UTC)  disabled  last run: none",
        "    2024-01-01T00:30:00+00:00  2024-01-01T00:30:00Z",
        "    2024-01-01T01:00:00+00:00  2024-01-01T01:00:00Z",
        (
            "reminder:3  cron '61 * * * *' (UTC)  not loaded: invalid cron expression "
            "'61 * * * *': minute field '61': 61 is out of range for minute (0-59)  "
            "last run: none"
        ),
    ]


def test_pause_and_resume_change_the_job_table(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pause", "reminder:1", "--db", db]) == 0
    assert capsys.readouterr().out == (
        "reminder:1: paused; every replica skips its fires from the next one on\n"
    )
    assert main(["pause", "reminder:1", "--db", db]) == 0
    assert capsys.readouterr().out == "reminder:1: paused (it already was)\n"
    assert main(["jobs", "--db", db, "-n", "1", *AFTER]) == 0
    assert capsys.readouterr().out.splitlines()[0].split("  ")[2] == "paused"
    assert main(["resume", "reminder:1", "--db", db]) == 0
    assert capsys.readouterr().out == (
        "reminder:1: resumed from its next fire; the fires skipped are not replayed\n"
    )
    assert sqlite3.connect(db).execute("SELECT name, paused FROM scheduler_jobs").fetchall() == [
        ("reminder:1", 0),
        ("reminder:2", 0),
        ("reminder:3", 0),
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["pause", "ghost", "--db", "{db}"],
            "error: no job named 'ghost' in the job table of 'sqlite+aiosqlite:///{db}'; "
            "known jobs: 'reminder:1', 'reminder:2', 'reminder:3'",
            id="unknown-job",
        ),
        pytest.param(
            ["resume", "x", "--db", "{tmp}/other.db"],
            "error: 'sqlite+aiosqlite:///{tmp}/other.db' has no job table (scheduler_jobs) to "
            "pause jobs in",
            id="no-job-table",
        ),
        pytest.param(
            ["pause", "x", "--db", "{tmp}/typo.db"],
            "error: --db no database file at '{tmp}/typo.db'",
            id="missing-file",
        ),
        pytest.param(
            ["jobs", "--db", "{db}", "--after", "2024-01-01T00:00:00"],
            "error: --after '2024-01-01T00:00:00' has no UTC offset",
            id="naive-after",
        ),
        pytest.param(
            ["pause", "x", "--app", "cliapp_jobs:sched"],
            "error: no job named 'x' in --app 'cliapp_jobs:sched'; known jobs: 'poll', 'report'",
            id="app-unknown-job",
        ),
        pytest.param(
            ["pause", "poll", "--app", "cliapp_jobs:in_memory"],
            "error: --app 'cliapp_jobs:in_memory' keeps the paused state of 'poll' in its own "
            "process",
            id="app-keeping-it-in-memory",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    db: str,
    tmp_path: Path,
    argv: list[str],
    message: str,
    app: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sqlite3.connect(tmp_path / "other.db").close()
    fill = {"{db}": db, "{tmp}": str(tmp_path)}
    for key, value in fill.items():
        argv = [a.replace(key, value) for a in argv]
        message = message.replace(key, value)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1
    assert not (tmp_path / "typo.db").exists()


def test_jobs_needs_db_or_app(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["jobs"])
    assert exc.value.code == 2
    assert "one of the arguments --db --app is required" in capsys.readouterr().err


def test_pause_adds_the_paused_column_to_an_older_job_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE scheduler_jobs (name VARCHAR(200) PRIMARY KEY, expr VARCHAR(200) "
            "NOT NULL, tz VARCHAR(64) NOT NULL, enabled BOOLEAN NOT NULL, payload TEXT)"
        )
        conn.execute("INSERT INTO scheduler_jobs VALUES ('r', '0 0 9 * * *', 'UTC', 1, NULL)")
    assert main(["jobs", "--db", str(path), "-n", "1", *AFTER]) == 0  # reads it as it is
    assert "  active  " in capsys.readouterr().out
    assert main(["pause", "r", "--db", str(path)]) == 0
    capsys.readouterr()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT paused FROM scheduler_jobs").fetchall() == [(1,)]
        # regression test (review minor c): pause changed the rest of the schema too, and
        # created the run table
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        assert tables == [("scheduler_jobs",)]


def test_pause_leaves_an_older_run_table_as_it_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression test (review minor c): the job table's migration added the run table's
    newer columns too; a replica of the older version still writes that table."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE scheduler_jobs (name VARCHAR(200) PRIMARY KEY, expr VARCHAR(200) "
            "NOT NULL, tz VARCHAR(64) NOT NULL, enabled BOOLEAN NOT NULL, payload TEXT, "
            "paused BOOLEAN)"
        )
        conn.execute("INSERT INTO scheduler_jobs VALUES ('r', '0 0 9 * * *', 'UTC', 1, NULL, 0)")
        conn.execute("CREATE TABLE scheduler_runs (seq INTEGER PRIMARY KEY, id VARCHAR(32))")
        schema = conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall()
    assert main(["pause", "r", "--db", str(path)]) == 0
    assert capsys.readouterr().out.startswith("r: paused")
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT name, sql FROM sqlite_master ORDER BY name").fetchall() == (
            schema
        )
        assert conn.execute("SELECT paused FROM scheduler_jobs").fetchall() == [(1,)]


APP = """
from scheduler import Scheduler
from scheduler.backends.sql import SqlJobStore, SqlRunStore, make_engine

engine = make_engine({db!r})
sched = Scheduler(runs=SqlRunStore(engine))
with_table = Scheduler(
    runs=SqlRunStore(engine), job_source=SqlJobStore(engine), job_factory=lambda d: remind
)

in_memory = Scheduler()

@sched.interval(seconds=90, name="poll")
@in_memory.interval(seconds=90, name="poll")
async def poll(run):
    return 1

@sched.cron("0 0 4 * * *", name="report", tz="Asia/Shanghai")
async def report(run):
    pass

async def remind(run):
    pass
"""


@pytest.fixture
def app(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "cliapp_jobs.py").write_text(textwrap.dedent(APP.format(db=db)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cliapp_jobs", raising=False)
    return "cliapp_jobs"


def test_jobs_from_an_app_with_its_last_runs(app: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trigger", "poll", "--app", f"{app}:sched"]) == 0
    capsys.readouterr()
    assert main(["jobs", "--app", f"{app}:sched", "-n", "2", *AFTER]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("poll  interval 'every 90s' (UTC)  active  last run: succeeded at ")
    assert lines[1:] == [
        "    2024-01-01T00:01:30+00:00  2024-01-01T00:01:30Z",  # as if started at --after
        "    2024-01-01T00:03:00+00:00  2024-01-01T00:03:00Z",
        "report  cron '0 0 4 * * *' (Asia/Shanghai)  active  last run: none",
        "    2024-01-02T04:00:00+08:00  2024-01-01T20:00:00Z",
        "    2024-01-03T04:00:00+08:00  2024-01-02T20:00:00Z",
    ]


def test_jobs_and_pause_of_an_app_with_a_job_table(
    app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["pause", "reminder:1", "--app", f"{app}:with_table"]) == 0
    capsys.readouterr()
    assert main(["jobs", "--app", f"{app}:with_table", "-n", "1", *AFTER]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("  ")[:3] for line in lines[::2]] == [
        ["reminder:1", "cron '0 0 9 * * *' (Europe/Paris)", "paused"],
    ]  # the disabled row and the bad one are not loaded by a scheduler


def test_pause_and_resume_of_a_job_written_in_code_in_the_app_s_run_table(
    app: str, db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A job of the app's code, whose scheduler keeps the paused state in its SqlRunStore:
    every replica on the database reads it (review finding 3)."""
    assert main(["pause", "poll", "--app", f"{app}:sched"]) == 0
    assert capsys.readouterr().out == (
        "poll: paused; every replica skips its fires from the next one on\n"
    )
    assert main(["jobs", "--app", f"{app}:sched", "-n", "1", *AFTER]) == 0
    assert capsys.readouterr().out.splitlines()[0].split("  ")[:3] == [
        "poll",
        "interval 'every 90s' (UTC)",
        "paused",
    ]
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name FROM scheduler_paused").fetchall() == [("poll",)]
    assert main(["resume", "poll", "--app", f"{app}:sched"]) == 0
    capsys.readouterr()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT name FROM scheduler_paused").fetchall() == []


async def test_a_pause_from_the_cli_reaches_a_running_scheduler(db: str) -> None:
    clock = VirtualClock(T0 + timedelta(hours=7, minutes=59))  # 08:59 in Paris
    engine = make_engine(db)
    ran: list[datetime | None] = []

    def factory(definition: JobDefinition) -> Callable[[RunContext], Awaitable[None]]:
        async def remind(run: RunContext) -> None:
            ran.append(run.scheduled_at)

        return remind

    sched = Scheduler(
        clock=clock, runs=SqlRunStore(engine), job_source=SqlJobStore(engine), job_factory=factory
    )

    async def day() -> None:
        await clock.advance(24 * 3600)
        await sched.wait_idle()

    try:
        with anyio.fail_after(20):
            async with sched:
                await day()  # 1 January, 09:00 Paris
                assert (
                    await anyio.to_thread.run_sync(main, ["pause", "reminder:1", "--db", db]) == 0
                )
                await day()  # skipped
                assert (
                    await anyio.to_thread.run_sync(main, ["resume", "reminder:1", "--db", db]) == 0
                )
                await day()
    finally:
        await engine.dispose()
    assert ran == [datetime(2024, 1, 1, 8, tzinfo=UTC), datetime(2024, 1, 3, 8, tzinfo=UTC)]
