"""``python -m scheduler runs`` and ``trigger``: output, exit codes, one-line errors."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from scheduler._cli._main import main
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[3]

APP = """
from scheduler import Scheduler
from scheduler.backends.sql import SqlRunStore

sched = Scheduler(runs=SqlRunStore.from_url({db!r}))

@sched.interval(seconds=3600, name="report")
async def report(run):
    await run.checkpoint(7)
    return dict(rows=3)

@sched.interval(seconds=3600, name="broken")
async def broken(run):
    raise ValueError("boom")

def make():
    return sched

APP_NAME = "not a scheduler"
"""


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module ``cliapp_<n>`` with a scheduler on a SQLite file; returns the db URL."""
    db = f"sqlite+aiosqlite:///{tmp_path / 'runs.db'}"
    (tmp_path / "cliapp.py").write_text(textwrap.dedent(APP.format(db=db)))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cliapp", raising=False)
    return db


def test_trigger_runs_the_job_and_runs_lists_it(
    app: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trigger", "report", "--app", "cliapp:sched"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("report: succeeded (run ")
    assert main(["trigger", "broken", "--app", "cliapp:make"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("broken: failed (run ") and out.rstrip().endswith(": ValueError: boom")
    assert main(["runs", "--db", app]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "started_at",
        "task",
        "trigger",
        "status",
        "fence",
        "replica",
        "trace",
        "result",
        "error",
    ]
    assert [line.split()[1:4] for line in lines[1:]] == [
        ["broken", "manual", "failed"],
        ["report", "manual", "succeeded"],
    ]
    assert lines[1].endswith("ValueError: boom")
    assert lines[2].endswith('{"rows": 3}')  # the job's result
    assert main(["runs", "--db", app, "--status", "succeeded", "--task", "report"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["trigger", "nope", "--app", "cliapp:sched"],
            "no job named 'nope' in 'cliapp:sched'; known jobs: 'broken', 'report'",
            id="unknown-job",
        ),
        pytest.param(["trigger", "x", "--app", "cliapp"], "must look like", id="no-attr"),
        pytest.param(["trigger", "x", "--app", "nomod_xyz:s"], "cannot import", id="no-module"),
        pytest.param(
            ["trigger", "x", "--app", "cliapp:missing"], "has no attribute 'missing'", id="no-attr2"
        ),
        pytest.param(
            ["trigger", "x", "--app", "cliapp:APP_NAME"], "not a Scheduler", id="not-sched"
        ),
        pytest.param(["runs", "--db", "nonsense://"], "not a usable database URL", id="bad-url"),
        pytest.param(
            ["runs", "--db", "sqlite+aiosqlite:///{tmp}/cliapp.py"],
            "cannot read runs from",
            id="not-a-database",
        ),
    ],
)
def test_bad_input_gets_one_clear_line_and_exit_2(
    app: str, argv: list[str], message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Not a missing directory: aiosqlite 0.22 then reports to a closed loop from its thread.
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err


def test_runs_with_a_bad_status_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["runs", "--db", "sqlite+aiosqlite://", "--status", "done"])
    assert exc.value.code == 2
    assert "invalid choice: 'done'" in capsys.readouterr().err


def test_runs_refuses_a_missing_sqlite_file_and_creates_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression test: ``runs --db`` on a missing file created an empty database."""
    for db in (f"sqlite+aiosqlite:///{tmp_path / 'typo.db'}", str(tmp_path / "typo.db")):
        assert main(["runs", "--db", db]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --db no database file at {str(tmp_path / 'typo.db')!r}")
        assert err.count("\n") == 1
    assert not (tmp_path / "typo.db").exists()


def test_runs_takes_a_path_as_well_as_a_url(
    app: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["trigger", "report", "--app", "cliapp:sched"]) == 0
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    for db in (app, str(tmp_path / "runs.db"), "runs.db"):
        assert main(["runs", "--db", db]) == 0
        assert capsys.readouterr().out.splitlines()[1].split()[1] == "report"


def test_a_password_in_db_is_never_shown(capsys: pytest.CaptureFixture[str]) -> None:
    for db in ("postgresql+asyncpg://u:s3cret@h:port/db", "nonsense://u:s3cret@h/db"):
        assert main(["runs", "--db", db]) == 2
        err = capsys.readouterr().err
        assert "s3cret" not in err and "u:***@h" in err and err.count("\n") == 1


def test_help_texts_show_no_restructuredtext_markup() -> None:
    """Regression test: ``--help`` printed ``double backticks`` from the module docstring."""
    from scheduler._cli._main import build_parser
    from tests.eventbus.cli.test_cli_helpers import all_help_texts

    texts = all_help_texts(build_parser())
    assert len(texts) == 7  # the program and its six commands
    for text in texts:
        assert "``" not in text and not re.search(r":[a-z]+:`", text), text


def test_python_dash_m_scheduler_runs_end_to_end(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.db").close()
    db = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
    result = subprocess.run(
        [sys.executable, "-m", "scheduler", "runs", "--db", db],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert (
        result.stderr.startswith("error: cannot read runs from")
        and "no such table" in result.stderr
    )


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        pytest.param(
            ["runs", "--db", "sqlite:///{tmp}/x.db"],
            2,
            "does not name an async driver",
            id="sync-driver",
        ),
        pytest.param(
            ["runs", "--db", "mysql+aiomysql://u:secret@h/db"],
            2,
            "needs the driver module 'aiomysql', which is not installed",
            id="missing-driver",
        ),
        pytest.param(
            ["runs", "--db", "postgresql+asyncpg://u:secret@127.0.0.1:{port}/db"],
            1,
            "cannot reach the database at 'postgresql+asyncpg://u:***@127.0.0.1:",
            id="unreachable-postgresql",
        ),
        pytest.param(
            ["trigger", "x", "--app", "json:loads"],
            2,
            "--app 'json:loads' is a callable that failed when called with no arguments",
            id="factory-that-fails",
        ),
    ],
)
def test_bad_input_and_unreachable_databases_get_one_error_line(
    argv: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    """Regression test: each of these printed a traceback (and exited 1 for bad input)."""
    port = str(free_port())  # nothing listens there
    argv = [a.replace("{tmp}", str(tmp_path)).replace("{port}", port) for a in argv]
    assert main(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert "secret" not in err
