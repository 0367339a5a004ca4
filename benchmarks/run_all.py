"""Run every benchmark script, each in its own process, and keep the JSON results.

What ``make bench`` runs. Each script that exists among :data:`SCRIPTS` runs as
``python benchmarks/<name>.py --json bench-results/<name>.json`` and prints its tables; then
``benchmarks/plots.py`` draws the plots and the results page from the JSON, next to it and in
``docs/perf/`` (the performance page of the site shows them). The
whole run must fit in :data:`BUDGET_SECONDS` on a 2-core machine: scripts whose last full run
(recorded in their JSON) would overflow what is left of the budget are run with ``--quick``,
re-planned before each script; with no history, :data:`EXPECTED_SECONDS` is the estimate. A
script still running at :data:`HARD_LIMIT_SECONDS` is stopped and reported as failed.

Run: ``.venv/bin/python benchmarks/run_all.py [--quick] [--out DIR]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = (
    "emit_modes",
    "peers",
    "scaling",
    "churn",
    "dispatch_styles",
    "cron_next",
    "failure_writes",
    "counters",
    "durable",
)
BUDGET_SECONDS = 240.0  # leaves a minute of the 5-minute budget for setup and slack
HARD_LIMIT_SECONDS = 290.0  # a script still running when the whole run reaches this is stopped
# Full-run estimates on a busy 2-core machine, used when a script has no previous JSON result.
EXPECTED_SECONDS = {
    "emit_modes": 10.0,
    "peers": 20.0,
    "scaling": 90.0,
    "churn": 10.0,
    "dispatch_styles": 5.0,
    "cron_next": 15.0,
    "failure_writes": 370.0,
    "counters": 30.0,
    "durable": 100.0,
}
DEFAULT_EXPECTED = 30.0
QUICK_FACTOR = 0.35  # a --quick run takes about this share of a full one


def _expected(name: str, out: Path) -> tuple[float, float]:
    """Seconds of a full and of a quick run: measured last time (its JSON), else estimated."""
    default = EXPECTED_SECONDS.get(name, DEFAULT_EXPECTED)
    try:
        data = json.loads((out / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return default, default * QUICK_FACTOR
    seconds = data.get("seconds") if isinstance(data, dict) else None
    if not isinstance(seconds, int | float):
        return default, default * QUICK_FACTOR
    if not data.get("quick"):
        return float(seconds), float(seconds) * QUICK_FACTOR
    # A quick run says little about a full one (scripts scale differently): stay conservative.
    return max(float(seconds) / QUICK_FACTOR, default), float(seconds)


def plan(names: list[str], out: Path, budget: float, force_quick: bool) -> dict[str, bool]:
    """Which scripts run with ``--quick``: the slowest first, until the total fits."""
    quick = dict.fromkeys(names, force_quick)
    expected = {name: _expected(name, out) for name in names}

    def total() -> float:
        return sum(quick_s if quick[n] else full for n, (full, quick_s) in expected.items())

    for name in sorted(names, key=lambda n: -expected[n][0]):
        if total() <= budget:
            break
        quick[name] = True
    return quick


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="run every script with --quick")
    parser.add_argument("--out", type=Path, default=Path("bench-results"), help="JSON directory")
    parser.add_argument("--budget", type=float, default=BUDGET_SECONDS, help="seconds")
    args = parser.parse_args()
    names = [n for n in SCRIPTS if (HERE / f"{n}.py").is_file()]
    missing = [n for n in SCRIPTS if n not in names]
    args.out.mkdir(parents=True, exist_ok=True)
    absent = f" (not present: {', '.join(missing)})" if missing else ""
    print(f"# running {', '.join(names)}{absent}")
    failed: list[str] = []
    start = time.monotonic()
    for i, name in enumerate(names):
        # Re-planned before each script, with what is left of the budget.
        left = args.budget - (time.monotonic() - start)
        quick = plan(names[i:], args.out, left, args.quick)[name]
        cmd = [sys.executable, str(HERE / f"{name}.py"), "--json", str(args.out / f"{name}.json")]
        if quick:
            cmd.append("--quick")
        print(f"\n### {name}{' --quick' if quick else ''}", flush=True)
        timeout = max(HARD_LIMIT_SECONDS - (time.monotonic() - start), 1.0)
        try:
            if subprocess.run(cmd, check=False, timeout=timeout).returncode != 0:
                failed.append(name)
        except subprocess.TimeoutExpired:
            print(f"# {name}: stopped after {timeout:.0f} s (the whole run must fit in 5 minutes)")
            failed.append(name)
    print(f"\n# all benchmarks: {time.monotonic() - start:.0f} s; results in {args.out}/")
    if subprocess.run(
        [sys.executable, str(HERE / "plots.py"), "--results", str(args.out)]
    ).returncode:
        failed.append("plots")
    if failed:
        print(f"# FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
