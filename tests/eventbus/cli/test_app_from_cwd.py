"""``eventbus --app`` and ``eventbus-scheduler --app`` find the module in the working
directory, as ``python -m eventbus`` does (and uvicorn, ``celery -A``, ``flask --app``).

Regression test: a console script's ``sys.path`` starts with its ``bin`` directory, not the
working directory, so both commands answered "cannot import 'myapp'".
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from eventbus.backends.sql import create_tables, make_engine

BIN = Path(sys.executable).parent

APP = """
from pathlib import Path

from eventbus import EventBus
from eventbus.backends.sql import SqlFailureStore
from scheduler import Scheduler

bus = EventBus(failures=SqlFailureStore("app.db"))
sched = Scheduler()


@sched.cron("0 0 1 1 *", name="hello")
async def hello(ctx: object) -> None:
    Path("ran.txt").write_text("ran")
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cwdapp.py").write_text(textwrap.dedent(APP))

    async def tables() -> None:
        engine = make_engine(tmp_path / "app.db")
        await create_tables(engine)
        await engine.dispose()

    anyio.run(tables, backend="asyncio")
    return tmp_path


def run(project: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    for script in ("eventbus", "eventbus-scheduler"):
        if not (BIN / script).exists():
            pytest.fail(f"no {script} console script next to {sys.executable}")
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(BIN), "HOME": str(project)},
    )


def test_eventbus_loads_the_app_from_the_working_directory(project: Path) -> None:
    done = run(project, "eventbus", "failures", "retry", "--app", "cwdapp:bus")
    assert (done.returncode, done.stderr) == (0, "")


def test_eventbus_scheduler_loads_the_app_from_the_working_directory(project: Path) -> None:
    done = run(project, "eventbus-scheduler", "trigger", "hello", "--app", "cwdapp:sched")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("hello: succeeded")
    assert (project / "ran.txt").read_text() == "ran"
