"""The wired app and the demo: everything on embedded defaults, and with Redis."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import domain.web
import domain.web_demo
from domain.demo import main, run_demo


def check_summary(out: str, *, scheduler_ran: bool = True) -> None:
    """The summary's figures; *scheduler_ran*: the jobs had their seconds (no early stop)."""
    views = dict(re.findall(r"^(.+?)\s{2,}(\d+)\s+(?:draft|published)$", out, re.M))
    assert views == {"Why 302 and not 301": "5", "Counting views exactly once": "3",
                     "Cron with seconds": "1"}  # fmt: skip
    assert re.search(r"^docs\s+3\s+https://example.com/docs$", out, re.M)
    assert "refused: target URL 'javascript:alert(1)'" in out
    assert "alias 'admin' is invalid: it is a reserved word" in out
    assert re.search(
        r"^  user.registered\s+mail:welcome\s+\S*MailDeliveryError: mail server", out, re.M
    )
    assert "reward points: {1: 61, 2: 5}; audit rows: 3" in out
    if scheduler_ran:
        assert re.search(r"^Cron with seconds\s+1\s+published$", out, re.M)
        assert re.search(r"^  publish_due\s+succeeded\s+\d+$", out, re.M)
        assert re.search(r"^  flush_views\s+succeeded\s+\d+$", out, re.M)


async def test_demo_on_embedded_defaults(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with anyio.fail_after(25):
        await run_demo(tmp_path / "demo.db", seconds=4)
    out = capsys.readouterr().out
    check_summary(out)
    assert (tmp_path / "demo.db").exists()


async def test_demo_with_redis(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with anyio.fail_after(25):
        await run_demo(tmp_path / "demo.db", redis_url=redis_url, seconds=4)
    out = capsys.readouterr().out
    check_summary(out)


@pytest.mark.parametrize(
    ("argv", "forwarded"),
    [
        pytest.param(["--web"], ["--port", "8000", "--db", "<tmp>/demo.db"], id="plain"),
        pytest.param(["--web", "--db", "w.db"], ["--port", "8000", "--db", "w.db"], id="db"),
        pytest.param(
            ["--web", "--redis", "redis://127.0.0.1:6390/0"],
            ["--port", "8000", "--redis", "redis://127.0.0.1:6390/0", "--db", "<tmp>/demo.db"],
            id="redis",
        ),
    ],
)
def test_web_demo_forwards_db_and_redis(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    forwarded: list[str],
) -> None:
    """Regression test: ``python -m domain --web --redis URL`` served without Redis. The web
    demo also turns the console on (with the printed token) and seeds the demo data."""
    served: list[tuple[list[str] | None, dict[str, Any]]] = []

    def serve(args: list[str] | None = None, *, overrides: dict[str, Any]) -> int:
        served.append((args, overrides))  # domain.web.main, without uvicorn
        return 0

    monkeypatch.delenv("EVENTBUS_CONSOLE_TOKEN", raising=False)
    monkeypatch.setattr(domain.web, "main", serve)
    assert main(argv) == 0
    [(args, overrides)] = served
    assert args is not None
    shown = [re.sub(r".*/eventbus-web-demo-[^/]+", "<tmp>", a) for a in args]
    assert shown == forwarded
    token = overrides["console_token"]
    assert len(token) >= 16
    assert (
        f"operator console: http://127.0.0.1:8000/ops  (token: {token})" in capsys.readouterr().out
    )
    assert overrides["on_start"] is domain.web_demo.seed


def start_demo(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    """The real ``python -m domain``, its temporary directory under *tmp_path*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTBUS_")}
    env.update(PYTHONUNBUFFERED="1", TMPDIR=str(tmp_path))
    return subprocess.Popen(
        [sys.executable, "-m", "domain", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env=env,
    )


def read_until(proc: subprocess.Popen[str], marker: str, timeout: float = 30) -> str:
    """stdout up to the line holding *marker*; the process is killed if it never comes."""
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                return "".join(lines)
    finally:
        watchdog.cancel()
    raise AssertionError(f"{marker!r} never came; stdout: {''.join(lines)!r}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_demo_after_draining_flushing_and_its_summary(
    tmp_path: Path, sig: signal.Signals
) -> None:
    """Regression test: SIGTERM or SIGINT killed the demo at once: no drain, no summary, and
    its temporary directory was left behind."""
    proc = start_demo(tmp_path, "--seconds", "120")
    try:
        head = read_until(proc, "running the scheduler")
        started = time.monotonic()
        proc.send_signal(sig)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    out = head + rest
    assert proc.returncode == 128 + sig
    assert time.monotonic() - started < 15  # not the 120 s it was asked to run
    assert f"{sig.name}: stopping early: draining the bus" in out
    check_summary(out, scheduler_ran=False)  # what came before the signal: drained, flushed
    assert "demo finished in" in out
    assert "Traceback" not in err
    assert list(tmp_path.glob("eventbus-demo-*")) == []  # the temporary directory is gone


def test_the_first_screen_shows_the_planned_failure_in_one_line_and_how_to_see_more(
    tmp_path: Path,
) -> None:
    """Regression test: the deliberate failed welcome mail printed an ERROR and a traceback
    under the unrelated "short links" heading."""
    db = tmp_path / "demo.db"
    proc = start_demo(tmp_path, "--seconds", "1", "--db", str(db))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "Traceback" not in out + err
    assert "mail:welcome" not in err  # the failure is shown once, by the demo, on stdout
    events = out.split("== events ")[1].split("== short links ")[0]
    failed, command = re.findall(r"^  (.+)$", events, re.M)
    assert failed == (
        "listener 'mail:welcome' failed on 'user.registered' (as planned): "
        "domain.MailDeliveryError: mail server refused the welcome message to "
        "'bob@bounce.invalid'; retry later"
    )
    match = re.fullmatch(r"traceback in the failure table: (python -m eventbus .+)", command)
    assert match is not None, command
    argv = match[1].split()
    assert argv[:5] == ["python", "-m", "eventbus", "failures", "show"]
    assert argv[6:] == ["--db", f"sqlite+aiosqlite:///{db}"]
    shown = subprocess.run(
        [sys.executable, *argv[1:]], capture_output=True, text=True, timeout=30, check=True
    )
    assert "MailDeliveryError: mail server refused the welcome message" in shown.stdout
    assert "Traceback (most recent call last)" in shown.stdout
