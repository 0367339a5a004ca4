"""Regression tests: ``python -m scheduler`` printed tracebacks for bad input and for an
unreachable database instead of one ``error:`` line."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler._cli import main
from tests.redis_server import free_port


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        pytest.param(
            ["next", "*", "--tz", "America"],
            2,
            "unknown time zone 'America'",
            id="zone-is-a-directory",
        ),
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
