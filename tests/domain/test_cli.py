"""``python -m domain`` and ``python -m domain.web`` fail in one line with an exit code.

Each case runs the real command in a subprocess: what a user sees is its whole stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from sqlalchemy import insert
from sqlalchemy.ext.asyncio import create_async_engine

from domain.db import articles, create_tables
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("EVENTBUS_")}
    environ.update(PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=environ,
        check=False,
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout
    [line] = proc.stderr.splitlines()
    assert line.startswith("error: ")
    return line


def test_an_unreachable_redis_is_one_line(tmp_path: Path) -> None:
    """Regression test: an unreachable ``--redis`` printed ~2,000 lines and 64 tracebacks."""
    port = free_port()
    proc = run("domain", "--db", str(tmp_path / "d.db"), "--redis", f"redis://127.0.0.1:{port}/0")
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert line.startswith(f"error: Redis at redis://127.0.0.1:{port}/0 failed: ConnectionError: ")
    assert "Error 111 connecting to" in line  # ECONNREFUSED
    assert proc.stdout == ""


def test_a_password_in_a_url_is_never_echoed(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://:hunter2-secret@127.0.0.1:{port}/0"
    proc = run("domain", "--db", str(tmp_path / "d.db"), "--redis", url)
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "hunter2" not in proc.stdout + proc.stderr
    assert f"redis://:***@127.0.0.1:{port}/0" in line

    db = f"postgresql+asyncpg://app:hunter2-secret@127.0.0.1:{port}/shop"
    proc = run("domain", "--db", db)
    assert proc.returncode == 1
    line = one_error_line(proc)
    assert "hunter2" not in proc.stdout + proc.stderr
    assert f"error: the database postgresql+asyncpg://app:***@127.0.0.1:{port}/shop failed" in line


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        pytest.param(["--redis", "localhost:6379"], 2,
                     "error: --redis 'localhost:6379' is not a Redis URL: Redis URL must specify",
                     id="redis-url-without-scheme"),
        pytest.param(["--db", "/no/such/dir/demo.db"], 2,
                     "error: --db '/no/such/dir/demo.db': the directory '/no/such/dir' does not "
                     "exist; create it first", id="db-in-missing-dir"),
        pytest.param(["--db", "sqlite+aiosqlite:////no/such/dir/demo.db"], 2,
                     "error: --db 'sqlite+aiosqlite:////no/such/dir/demo.db': the directory "
                     "'/no/such/dir' does not exist", id="db-url-in-missing-dir"),
        pytest.param(["--db", "nosuchdriver://x/y"], 2,
                     "error: --db 'nosuchdriver://x/y' cannot be used: NoSuchModuleError: ",
                     id="db-url-of-unknown-driver"),
        pytest.param(["--db", "mysql+aiomysql://u:secret@h/db"], 2,
                     "error: --db 'mysql+aiomysql://u:***@h/db' needs the driver module "
                     "'aiomysql', which is not installed", id="db-url-of-a-missing-driver"),
        pytest.param(["--db", "sqlite:///x.db"], 2,
                     "error: --db 'sqlite:///x.db' does not name an async driver",
                     id="db-url-of-a-sync-driver"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line(args: list[str], code: int, message: str) -> None:
    """Regression test: a bad ``--db`` printed a 201-line traceback (a missing driver: 30)."""
    proc = run("domain", *args)
    assert proc.returncode == code
    assert one_error_line(proc).startswith(message)


def test_a_database_of_an_earlier_run_is_refused(tmp_path: Path) -> None:
    async def seed() -> None:
        engine = create_async_engine(f"sqlite+aiosqlite:///{tmp_path}/used.db")
        await create_tables(engine)
        async with engine.begin() as conn:
            await conn.execute(insert(articles).values(id=1, title="from an earlier run"))
        await engine.dispose()

    anyio.run(seed)
    proc = run("domain", "--db", str(tmp_path / "used.db"), "--seconds", "0")
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        f"error: the database sqlite+aiosqlite:///{tmp_path}/used.db already holds articles "
        "(an earlier run?); the demo needs an empty one: give a new --db"
    )


def test_a_short_admin_token_is_one_line() -> None:
    """Regression test: a short admin token printed a 19-line traceback."""
    proc = run("domain.web", env={"EVENTBUS_ADMIN_TOKEN": "short"})
    assert proc.returncode == 2
    assert one_error_line(proc) == (
        "error: the admin token (EVENTBUS_ADMIN_TOKEN) is 5 characters long; set at least 16 "
        "non-blank characters (python -c 'import secrets; print(secrets.token_urlsafe(32))'), "
        "or leave it unset to disable the /admin routes"
    )


def test_a_port_out_of_range_is_a_usage_error() -> None:
    """Regression test: ``--port 99999`` printed a 72-line traceback from uvicorn."""
    proc = run("domain.web", "--port", "99999")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "python -m domain.web: error: argument --port: 99999 is not a port (0 to 65535)"
    )


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["domain.web"], id="domain.web"),
        pytest.param(["domain", "--web"], id="domain--web"),
    ],
)
def test_the_web_app_checks_redis_and_the_database_before_serving(
    tmp_path: Path, command: list[str]
) -> None:
    port = free_port()
    proc = run(*command, "--db", str(tmp_path / "w.db"), "--redis", f"redis://127.0.0.1:{port}/0")
    assert proc.returncode == 1
    assert one_error_line(proc).startswith(f"error: Redis at redis://127.0.0.1:{port}/0 failed: ")
    proc = run(*command, "--db", "/no/such/dir/w.db")
    assert proc.returncode == 2
    assert "the directory '/no/such/dir' does not exist" in one_error_line(proc)
    db = f"postgresql+asyncpg://app@127.0.0.1:{port}/shop"
    proc = run(*command, "--db", db)
    assert proc.returncode == 1
    assert one_error_line(proc).startswith(f"error: the database {db} failed: ")
