"""The wired app and the demo: everything on embedded defaults, and with Redis."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

import domain.web
from domain.demo import main, run_demo


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def check_summary(out: str) -> None:
    views = dict(re.findall(r"^(.+?)\s{2,}(\d+)\s+(?:draft|published)$", out, re.M))
    assert views == {"Why 302 and not 301": "5", "Counting views exactly once": "3",
                     "Cron with seconds": "1"}  # fmt: skip
    assert re.search(r"^Cron with seconds\s+1\s+published$", out, re.M)
    assert re.search(r"^docs\s+3\s+https://example.com/docs$", out, re.M)
    assert "refused: target URL 'javascript:alert(1)'" in out
    assert "alias 'admin' is invalid: it is a reserved word" in out
    assert re.search(
        r"^  user.registered\s+mail:welcome\s+\S*MailDeliveryError: mail server", out, re.M
    )
    assert re.search(r"^  publish_due\s+succeeded\s+\d+$", out, re.M)
    assert re.search(r"^  flush_views\s+succeeded\s+\d+$", out, re.M)
    assert "reward points: {1: 61, 2: 5}; audit rows: 3" in out


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
        pytest.param(["--web"], [], id="plain"),
        pytest.param(["--web", "--db", "w.db"], ["--db", "w.db"], id="db"),
        pytest.param(
            ["--web", "--redis", "redis://127.0.0.1:6390/0"],
            ["--redis", "redis://127.0.0.1:6390/0"],
            id="redis",
        ),
    ],
)
def test_web_demo_forwards_db_and_redis(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], forwarded: list[str]
) -> None:
    """Regression test: ``python -m domain --web --redis URL`` served without Redis."""
    served: list[list[str] | None] = []

    def serve(args: list[str] | None = None) -> int:  # domain.web.main, without uvicorn
        served.append(args)
        return 0

    monkeypatch.setattr(domain.web, "main", serve)
    assert main(argv) == 0
    assert served == [forwarded]
