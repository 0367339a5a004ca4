"""``python -m scheduler next``: fire times in the zone and in UTC, or one line and exit 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scheduler._cli._main import build_parser, main


def test_next_prints_zone_and_utc(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["next", "0 30 2 * * *", "--tz", "America/New_York", "-n", "2"]
    assert main([*argv, "--after", "2024-03-09T12:00:00"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "America/New_York           UTC",
        "2024-03-10T03:00:00-04:00  2024-03-10T07:00:00Z",
        "2024-03-11T02:30:00-04:00  2024-03-11T06:30:00Z",
    ]


def test_after_with_offset_and_default_zone(capsys: pytest.CaptureFixture[str]) -> None:
    """In UTC (the default zone) one column: a second would repeat it."""
    assert main(["next", "*/5 * * * *", "--after", "2024-01-01T09:00:00+09:00", "-n", "1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["UTC", "2024-01-01T00:05:00Z"]


def test_default_is_five_times_after_now(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["next", "@hourly"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 6


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["next", "0 0 ? * * *"],
            "error: invalid cron expression '0 0 ? * * *': hour field '?': "
            "'?' is Quartz syntax and is not supported; use '*'\n",
            id="bad-expression",
        ),
        pytest.param(
            ["next", "@daily", "--tz", "Mars/Olympus"],
            "error: unknown time zone 'Mars/Olympus'; use an IANA name such as 'Europe/London'\n",
            id="unknown-zone",
        ),
        pytest.param(  # a directory of the zone database: was a traceback
            ["next", "*", "--tz", "America"],
            "error: unknown time zone 'America'; use an IANA name such as 'Europe/London'\n",
            id="zone-is-a-directory",
        ),
        pytest.param(
            ["next", "@daily", "--after", "yesterday"],
            "error: --after 'yesterday' is not an ISO 8601 date-time\n",
            id="bad-after",
        ),
        pytest.param(
            ["next", "@yearly", "--after", "9999-06-01T00:00:00+00:00"],
            "error: CronExpression('@yearly', tz='UTC') has no fire time before year 10000\n",
            id="end-of-time",
        ),
    ],
)
def test_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", message)


@pytest.mark.parametrize("n", ["0", "-3", "many"])
def test_bad_n_is_a_usage_error(n: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["next", "@daily", "-n", n])
    assert info.value.code == 2
    assert "argument -n" in capsys.readouterr().err


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args([])
    assert info.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_python_dash_m() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "next", "0 0 12 * * mon", "-n", "1",
         "--after", "2024-01-01T00:00:00Z"],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.splitlines()[1] == "2024-01-01T12:00:00Z"
    bad = subprocess.run(
        [sys.executable, "-m", "scheduler", "next", "60 * * * * *"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2
    assert bad.stderr.startswith("error: invalid cron expression '60 * * * * *': second field")
