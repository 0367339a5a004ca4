"""LogLimiter: a storm of log lines becomes a few lines per kind plus summaries with counts."""

from __future__ import annotations

import logging

import pytest

from eventbus._core._log_limit import LogLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def summaries(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "suppressed" in r.getMessage()]


def test_burst_then_counted_then_one_summary_when_the_window_rolls(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    limiter = LogLimiter(logging.getLogger("t"), burst=3, interval=10, clock=clock)
    allowed = [limiter.allow(("l", "ValueError"), "'l' raising ValueError") for _ in range(50)]
    assert allowed == [True] * 3 + [False] * 47
    assert summaries(caplog) == []
    clock.now = 10.0
    assert limiter.allow(("l", "ValueError"), "'l' raising ValueError") is True
    [line] = summaries(caplog)
    assert line.startswith("47 more log line(s) of 'l' raising ValueError suppressed")
    assert limiter.suppressed_total == 47


def test_keys_are_limited_separately(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(logging.getLogger("t"), burst=1, clock=FakeClock())
    assert limiter.allow("a", "a") and limiter.allow("b", "b")
    assert not limiter.allow("a", "a")
    assert not limiter.allow("b", "b")


def test_summarize_reports_every_pending_count_and_resets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = LogLimiter(logging.getLogger("t"), burst=1, clock=FakeClock())
    for _ in range(4):
        limiter.allow("a", "kind a")
    for _ in range(2):
        limiter.allow("b", "kind b")
    limiter.summarize()
    assert sorted(s.split(" suppressed")[0] for s in summaries(caplog)) == [
        "1 more log line(s) of kind b",
        "3 more log line(s) of kind a",
    ]
    caplog.clear()
    limiter.summarize()
    assert summaries(caplog) == []
    assert limiter.allow("a", "kind a") is True


def test_many_distinct_keys_share_one_overflow_key(caplog: pytest.LogCaptureFixture) -> None:
    limiter = LogLimiter(logging.getLogger("t"), burst=2, max_keys=3, clock=FakeClock())
    allowed = sum(limiter.allow(n, f"kind {n}") for n in range(1000))
    assert allowed == 3 + 2  # one line each for the first three keys, a burst for the rest
    limiter.summarize()
    assert any(s.startswith("995 more log line(s) of other messages") for s in summaries(caplog))


def test_a_storm_of_20000_lines_logs_a_bounded_number(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    limiter = LogLimiter(logging.getLogger("t"), burst=5, interval=60, clock=clock)
    logged = 0
    for n in range(20_000):
        clock.now = n * 0.01  # 200 s of storm
        key = (f"listener{n % 7}", "ValueError")
        if limiter.allow(key, repr(key)):
            logged += 1
    limiter.summarize()
    lines = logged + len(summaries(caplog))
    assert lines <= 7 * 5 * 4 + 7 * 4
    assert logged + limiter.suppressed_total == 20_000


@pytest.mark.parametrize(
    "kwargs", [{"burst": 0}, {"interval": 0}, {"max_keys": 0}], ids=["burst", "interval", "keys"]
)
def test_bad_limits_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="burst and max_keys"):
        LogLimiter(logging.getLogger("t"), **kwargs)  # type: ignore[arg-type]
