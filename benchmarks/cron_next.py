"""How long does computing consecutive fire times take, against croniter?

For each expression, the time to compute N consecutive fire times (UTC, from
2024-01-01) with ``CronExpression.next_times`` and with croniter's ``get_next``
iteration of the same six-field expression, measured in the same run.

Run::

    .venv/bin/python benchmarks/cron_next.py [--quick] [--json PATH]

Yearly expressions use N = 1,000: 10,000 yearly fire times do not fit before
``datetime.MAXYEAR``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from croniter import croniter

from scheduler import CronExpression

REPEATS = 3
WARMUP = 1
QUICK_REPEATS = 1
N = 10_000
N_YEARLY = 1_000
START = datetime(2024, 1, 1, tzinfo=UTC)

CASES: list[tuple[str, str, int]] = [
    ("every second", "* * * * * *", N),
    ("every 5 minutes", "0 */5 * * * *", N),
    ("daily", "0 0 4 * * *", N),
    ("weekdays at 9", "0 0 9 * * mon-fri", N),
    ("sparse yearly", "0 30 4 13 jul *", N_YEARLY),
    ("leap day", "0 0 0 29 2 *", N_YEARLY),
]


@dataclass(frozen=True)
class Row:
    case: str
    expr: str
    n: int
    ours_median_ms: float
    ours_min_ms: float
    ours_max_ms: float
    croniter_median_ms: float
    croniter_min_ms: float
    croniter_max_ms: float
    ratio: float


def ours(expr: str, n: int) -> Callable[[], object]:
    """Parse once, then compute n fire times with next_times."""
    cron = CronExpression(expr)
    return lambda: cron.next_times(n, after=START)


def theirs(expr: str, n: int) -> Callable[[], object]:
    """croniter's own iteration: one iterator, n calls to get_next."""

    def run() -> object:
        it = croniter(expr, START, second_at_beginning=True)
        return [it.get_next(datetime) for _ in range(n)]

    return run


def measure(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall time of each repeat in milliseconds, after WARMUP unmeasured calls."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def check_agreement(expr: str, n: int) -> None:
    """Refuse to compare timings of implementations that disagree."""
    a = [t.astimezone(UTC) for t in CronExpression(expr).next_times(min(n, 200), after=START)]
    it = croniter(expr, START, second_at_beginning=True)
    b = [it.get_next(datetime).astimezone(UTC) for _ in range(len(a))]
    if a != b:
        raise SystemExit(f"{expr!r}: results differ from croniter; first: {a[0]} vs {b[0]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_REPEATS} repeats")
    parser.add_argument("--json", type=Path, metavar="PATH", help="also write the rows here")
    args = parser.parse_args(argv)
    repeats = QUICK_REPEATS if args.quick else REPEATS

    rows = []
    for case, expr, n in CASES:
        check_agreement(expr, n)
        a = measure(ours(expr, n), repeats)
        b = measure(theirs(expr, n), repeats)
        rows.append(
            Row(
                case,
                expr,
                n,
                statistics.median(a),
                min(a),
                max(a),
                statistics.median(b),
                min(b),
                max(b),
                statistics.median(a) / statistics.median(b),
            )
        )

    print(f"python {sys.version.split()[0]}, repeats={repeats}, times in ms for n fire times")
    header = (
        f"{'case':<16} {'expr':<20} {'n':>6} | {'ours med':>9} {'min':>8} {'max':>8} "
        f"| {'croniter med':>12} {'min':>8} {'max':>8} | {'ours/croniter':>13}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r.case:<16} {r.expr:<20} {r.n:>6} | {r.ours_median_ms:>9.1f} "
            f"{r.ours_min_ms:>8.1f} {r.ours_max_ms:>8.1f} | {r.croniter_median_ms:>12.1f} "
            f"{r.croniter_min_ms:>8.1f} {r.croniter_max_ms:>8.1f} | {r.ratio:>13.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
