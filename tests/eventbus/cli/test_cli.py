"""``python -m eventbus failures ...``: each command and each kind of bad input, in process."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

from eventbus import FailureRecord, FailureStatus
from eventbus._cli._main import build_parser, main
from eventbus.backends.sql import SqlFailureStore


def make_record(n: int, **changes: object) -> FailureRecord:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=n)
    rec = FailureRecord(
        id=f"rec{n:02d}" + "0" * 27,
        event_id=f"ev{n}",
        event_name="cli.thing",
        payload=json.dumps({"n": n}),
        payload_ok=True,
        listener="app:handler",
        error_type="ValueError",
        message=f"boom {n}",
        traceback=f"Traceback (most recent call last):\n  File 'x.py'\nValueError: boom {n}\n",
        first_failed_at=at,
        last_failed_at=at,
    )
    return rec.replace(**changes)


def write_records(url: str, *records: FailureRecord) -> None:
    async def write() -> None:
        async with SqlFailureStore(url) as store:
            for rec in records:
                store.record(rec)

    anyio.run(write, backend="asyncio")


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'failures.db'}"
    write_records(
        url,
        make_record(1),
        make_record(2, listener="app:other", event_name="cli.other"),
        make_record(3, status=FailureStatus.DEAD, attempts=5),
    )
    return url


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, db_url: str) -> str:
    """An importable application module whose bus keeps failures in the test database."""
    name = f"cliapp_{uuid.uuid4().hex[:8]}"
    missing_url = f"sqlite+aiosqlite:///{tmp_path / 'missing.db'}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(f"""
        from eventbus import Event, EventBus, EventRegistry, MemoryFailureStore
        from eventbus.backends.sql import SqlFailureStore

        registry = EventRegistry()
        seen = []

        class Thing(Event, name="cli.thing", registry=registry):
            n: int

        bus = EventBus(registry, SqlFailureStore({db_url!r}))
        bus.on(Thing, seen.append, name="app:handler")
        memory_bus = EventBus(registry, MemoryFailureStore())
        memory_bus.on(Thing, seen.append, name="app:handler")
        not_a_bus = 42
        missing_bus = EventBus(registry, SqlFailureStore({missing_url!r}))

        def make_bus():
            return bus

        def broken_factory():
            raise RuntimeError("config missing")

        def refuse(thing):
            raise ValueError("still down")

        failing_bus = EventBus(registry, SqlFailureStore({db_url!r}))
        failing_bus.on(Thing, refuse, name="app:handler")
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_list_prints_a_readable_table_newest_first(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "list", "--db", db_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ID",
        "STATUS",
        "TRIES",
        "LAST",
        "FAILED",
        "(UTC)",
        "EVENT",
        "LISTENER",
        "ERROR",
    ]
    assert [line.split()[0] for line in lines[1:4]] == [
        "rec030000000",
        "rec020000000",
        "rec010000000",
    ]
    assert lines[1].split()[1:5] == ["dead", "5", "2026-01-04", "00:00:00"]
    assert lines[1].endswith("ValueError: boom 3")
    assert lines[-1] == "3 failures"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(["--event", "cli.other"], ["rec02"], id="event"),
        pytest.param(["--listener", "app:handler"], ["rec03", "rec01"], id="listener"),
        pytest.param(["--status", "pending"], ["rec02", "rec01"], id="status"),
        pytest.param(["--since", "2026-01-03"], ["rec03", "rec02"], id="since-iso"),
        pytest.param(["--since", "1d"], [], id="since-age"),
        pytest.param(["--limit", "1"], ["rec03"], id="limit"),
    ],
)
def test_list_filters(
    db_url: str, args: list[str], expected: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "list", "--db", db_url, "--json", *args]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"][:5] for r in rows] == expected


def test_list_json_has_every_field(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["failures", "list", "--db", db_url, "--json", "--limit", "1"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert set(row) == set(FailureRecord.__dataclass_fields__)
    assert row["status"] == "dead" and row["last_failed_at"] == "2026-01-04T00:00:00+00:00"


def test_list_says_so_when_nothing_matches(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["failures", "list", "--db", db_url, "--event", "nothing.here"]) == 0
    assert capsys.readouterr().out == "no failures match\n"


def test_show_prints_the_full_traceback_and_payload(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "show", "rec02", "--db", db_url]) == 0  # a unique prefix
    out = capsys.readouterr().out
    assert "id:            rec02" in out
    assert "listener:      app:other" in out
    assert "error:         ValueError: boom 2" in out
    assert 'payload:\n  {\n    "n": 2\n  }\n' in out
    assert out.endswith(
        "traceback:\n  Traceback (most recent call last):\n    File 'x.py'\n  ValueError: boom 2\n"
    )


def test_show_json(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    full_id = make_record(1).id
    assert main(["failures", "show", full_id, "--db", db_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["id"], data["payload"], data["attempts"]) == (full_id, '{"n": 1}', 1)


def test_show_marks_a_payload_kept_as_repr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'f.db'}"
    write_records(url, make_record(7, payload="Thing(n=<object>)", payload_ok=False))
    assert main(["failures", "show", "rec07", "--db", url]) == 0
    assert (
        "payload (not JSON-encodable, kept as repr; cannot be retried):\n  Thing(n=<object>)"
        in (capsys.readouterr().out)
    )


def test_retry_imports_the_app_and_resolves_rows(
    db_url: str, app_module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "retry", "--app", f"{app_module}:bus"]) == 0
    out = capsys.readouterr().out.splitlines()
    # rec01 resolves; rec02's listener 'app:other' is not on the app's bus: skipped
    assert out[-1] == "2 retried: 1 resolved, 0 failed again, 0 dead, 1 skipped"
    assert any(line.startswith("rec020000000  skipped") for line in out)
    app = sys.modules[app_module]
    assert [e.n for e in app.seen] == [1]
    with sqlite3.connect(db_url.removeprefix("sqlite+aiosqlite:///")) as conn:
        statuses = dict(conn.execute("SELECT id, status FROM eventbus_failures").fetchall())
    conn.close()
    assert statuses[make_record(1).id] == "resolved"
    assert statuses[make_record(2).id] == "pending"


@pytest.mark.parametrize(
    "attr",
    [pytest.param("make_bus", id="factory"), pytest.param("memory_bus", id="memory-store-with-db")],
)
def test_retry_json_with_a_factory_or_an_explicit_db(
    db_url: str, app_module: str, attr: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["failures", "retry", "--app", f"{app_module}:{attr}", "--json", "--event", "cli.thing"]
    if attr == "memory_bus":
        argv += ["--db", db_url]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["resolved"], data["skipped"]) == (1, 0)
    assert data["items"][0]["listener"] == "app:handler"


@pytest.mark.parametrize(
    ("app", "message"),
    [
        pytest.param("no_colon", "must look like 'package.module:attribute'", id="no-colon"),
        pytest.param("no_such_module_xyz:bus", "cannot import 'no_such_module_xyz'", id="module"),
        pytest.param("{mod}:nope", "has no attribute 'nope'", id="attribute"),
        pytest.param("{mod}:not_a_bus", "is an int, not an EventBus", id="not-a-bus"),
        pytest.param(
            "{mod}:broken_factory",
            "is a callable that failed when called with no arguments (RuntimeError: config "
            "missing)",
            id="factory-raises",
        ),
        pytest.param("{mod}:memory_bus", "keeps failures in MemoryFailureStore", id="memory-store"),
        pytest.param("{mod}:missing_bus", "no database file at", id="app-db-missing"),
    ],
)
def test_retry_with_a_bad_app_is_a_one_line_error(
    tmp_path: Path, app_module: str, app: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "retry", "--app", app.format(mod=app_module)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "missing.db").exists()  # a failed check creates no database


@pytest.mark.parametrize("json_output", [False, True], ids=["text", "json"])
def test_retry_exits_1_when_a_retried_failure_failed_again(
    db_url: str, app_module: str, json_output: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """Regression test: ``retry`` exited 0 when every retried failure failed again."""
    argv = ["failures", "retry", "--app", f"{app_module}:failing_bus"]
    assert main(argv + ["--json"] * json_output) == 1
    out = capsys.readouterr().out
    if json_output:
        assert (json.loads(out)["failed"], json.loads(out)["resolved"]) == (1, 0)
    else:
        assert out.splitlines()[-1] == "2 retried: 0 resolved, 1 failed again, 0 dead, 1 skipped"
    # only skipped rows (nothing ran, nothing failed): still 0
    argv = ["failures", "retry", "--app", f"{app_module}:failing_bus", "--event", "cli.other"]
    assert main(argv) == 0


def test_db_takes_a_path_as_well_as_a_url(
    db_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = db_url.removeprefix("sqlite+aiosqlite:///")
    assert main(["failures", "list", "--db", path]) == 0
    assert capsys.readouterr().out.endswith("3 failures\n")
    monkeypatch.chdir(tmp_path)
    assert main(["failures", "list", "--db", "failures.db", "--limit", "1"]) == 0
    monkeypatch.setenv("EVENTBUS_DB", "failures.db")  # the environment follows the same rule
    assert main(["failures", "list", "--limit", "1"]) == 0


def test_help_texts_show_no_restructuredtext_markup() -> None:
    """Regression test: ``--help`` printed ``double backticks`` from the module docstring."""
    from tests.eventbus.cli.test_cli_helpers import all_help_texts

    texts = all_help_texts(build_parser())
    # the program, 'failures' and its four actions, 'streams' and its nine, 'doctor'
    assert len(texts) == 17
    for text in texts:
        assert "``" not in text and not re.search(r":[a-z]+:`", text), text


def test_purge_needs_a_filter_then_deletes_what_matches(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["failures", "purge", "--db", db_url]) == 2
    assert "purge needs --status, --before, or --all" in capsys.readouterr().err
    assert main(["failures", "purge", "--db", db_url, "--status", "dead"]) == 0
    assert capsys.readouterr().out == "purged 1 failure\n"
    assert (
        main(["failures", "purge", "--db", db_url, "--before", "2026-01-02T12:00", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out) == {"purged": 1}
    assert main(["failures", "purge", "--db", db_url, "--all"]) == 0
    assert capsys.readouterr().out == "purged 1 failure\n"


def test_a_real_subprocess_lists_failures(db_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "eventbus", "failures", "list", "--db", db_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines()[-1] == "3 failures"


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        pytest.param(
            ["list", "--db", "sqlite+aiosqlite:///{tmp}/missing.db"],
            2,
            "no database file at",
            id="no-database",
        ),
        pytest.param(
            ["list", "--db", "sqlite+aiosqlite:///{tmp}/empty.db"],
            2,
            "no table 'eventbus_failures'",
            id="no-table",
        ),
        pytest.param(
            ["show", "zzz", "--db", "{db}"], 2, "no failure with id 'zzz'", id="unknown-id"
        ),
        pytest.param(
            ["show", "rec0", "--db", "{db}"], 2, "matches several failures", id="ambiguous-id"
        ),
        pytest.param(
            ["list", "--db", "postgresql+asyncpg://u:pw@h:port/x"],
            2,
            "--db 'postgresql+asyncpg://u:***@h:port/x' is not a database URL",
            id="bad-url",
        ),
        pytest.param(
            ["list", "--db", "{tmp}/missing.db"], 2, "no database file at", id="no-file-path"
        ),
        pytest.param(
            ["list", "--db", "sqlite:///{tmp}/empty.db"],
            2,
            "does not name an async driver",
            id="sync-driver",
        ),
        pytest.param(
            ["list", "--db", "postgresql+asyncpg://u:pw@127.0.0.1:1/x"],
            1,
            "database 'postgresql+asyncpg://u:***@127.0.0.1:1/x' failed: ConnectionRefusedError",
            id="unreachable",
        ),
        pytest.param(
            ["list", "--db", "{tmp}/junk.db"],
            1,
            "database 'sqlite+aiosqlite:///{tmp}/junk.db' failed: DatabaseError: file is not a",
            id="not-a-database",
        ),
    ],
)
def test_bad_input_is_one_line_and_a_non_zero_exit(
    tmp_path: Path,
    db_url: str,
    argv: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sqlite3.connect(tmp_path / "empty.db").close()
    (tmp_path / "junk.db").write_text("not a database\n")
    argv = [a.format(tmp=tmp_path, db=db_url) for a in argv]
    message = message.format(tmp=tmp_path)
    assert main(["failures", *argv]) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert "pw" not in err


def test_the_default_database_is_eventbus_db_in_the_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVENTBUS_DB", raising=False)
    assert main(["failures", "list"]) == 2
    assert "no database file at 'eventbus.db'" in capsys.readouterr().err
    write_records("sqlite+aiosqlite:///eventbus.db", make_record(1))
    assert main(["failures", "list"]) == 0
    assert capsys.readouterr().out.endswith("1 failure\n")


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["failures", "list", "--since", "yesterday"], id="bad-since"),
        pytest.param(["failures", "list", "--status", "lost"], id="bad-status"),
        pytest.param(["failures", "retry"], id="retry-without-app"),
        pytest.param(["failures"], id="no-action"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error:" in capsys.readouterr().err
