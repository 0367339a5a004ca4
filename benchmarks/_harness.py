"""Shared timing, table and JSON helpers for the benchmark scripts.

Every case is a *loop*: a function that runs its operation ``n`` times (sync) or awaits it ``n``
times (async). Baselines are loops too, so the direct call and the bus pay the same loop cost and
nothing is subtracted. Cases of one table are timed round-robin (one sample of each case per
round, after a warm-up round), so that a noisy neighbour slows the baseline and the subject
alike; the garbage collector is off while a sample runs. Each row reports the median, min and
max ns per operation over the rounds, and its ratio to its baseline row: the median of the
per-round ratios (the ratio of medians where rounds do not pair up). The "(cpu)" column is the
same ratio in CPU time of this process, which other processes cannot inflate: on a quiet
machine both agree; on a shared one, trust the CPU column.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import gc
import importlib.metadata
import json
import os
import platform
import statistics
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "AsyncLoop",
    "Options",
    "Row",
    "Stats",
    "SyncLoop",
    "Table",
    "Work",
    "counted",
    "counted_async",
    "environment",
    "finish",
    "parse_options",
    "print_environment",
    "run_async_cases",
    "run_sync_cases",
]

REPEATS = 31  # samples per case (rounds)
QUICK_REPEATS = 11
WARMUP = 1  # untimed rounds before sampling
SAMPLE_SECONDS = 0.01  # target duration of one sample; sets the iteration count
QUICK_SAMPLE_SECONDS = 0.004

_STARTED = time.monotonic()

SyncLoop = Callable[[int], object]
AsyncLoop = Callable[[int], Awaitable[object]]


@dataclasses.dataclass(frozen=True)
class Options:
    """Command-line options shared by all scripts."""

    quick: bool
    json_path: Path | None

    @property
    def repeats(self) -> int:
        return QUICK_REPEATS if self.quick else REPEATS

    @property
    def sample_seconds(self) -> float:
        return QUICK_SAMPLE_SECONDS if self.quick else SAMPLE_SECONDS


def parse_options(description: str | None, argv: Sequence[str] | None = None) -> Options:
    """Parse ``--quick`` and ``--json PATH``.

    :param description: the script's docstring, shown by ``--help``
    """
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer and shorter samples")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="write results")
    ns = parser.parse_args(argv)
    return Options(quick=bool(ns.quick), json_path=ns.json)


@dataclasses.dataclass(frozen=True)
class Stats:
    """Samples of one case, in ns per operation (or in the table's unit).

    ``cpu`` holds the same samples in CPU time of this process (``time.process_time_ns``), which
    other processes on a shared machine do not inflate; ``None`` where not measured.
    """

    samples: tuple[float, ...]
    cpu: tuple[float, ...] | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)


def counted(count: int) -> tuple[list[Callable[[object], None]], Callable[[], int]]:
    """*count* distinct sync listeners that count their calls, and a reader of the count.

    Each call costs one closure-cell increment (a few ns) on top of a no-op, in the baseline's
    loops and the measured ones alike.
    """
    calls = 0

    def make() -> Callable[[object], None]:
        def listener(event: object) -> None:
            nonlocal calls
            calls += 1

        return listener

    def done() -> int:
        return calls

    return [make() for _ in range(count)], done


def counted_async(
    count: int,
) -> tuple[list[Callable[[object], Awaitable[None]]], Callable[[], int]]:
    """Like :func:`counted`, for async listeners (that do not await)."""
    counters, done = counted(count)

    def make(count_call: Callable[[object], None]) -> Callable[[object], Awaitable[None]]:
        async def listener(event: object) -> None:
            count_call(event)

        return listener

    return [make(c) for c in counters], done


@dataclasses.dataclass(frozen=True)
class Work:
    """What one operation of a case must do: *per_op* more on *done* (a call counter, say)."""

    done: Callable[[], int]
    per_op: int

    def check(self, label: str, before: int, n: int) -> None:
        did = self.done() - before
        if did != n * self.per_op:
            raise AssertionError(
                f"{label!r}: {n} operations did {did} units of work, expected {n * self.per_op}"
            )


@dataclasses.dataclass
class Row:
    """One line of a table; ``stats`` is ``None`` for a case that does not apply (n/a)."""

    label: str
    stats: Stats | None
    baseline: str | None = None  # label of the row this one is divided by
    note: str = ""
    target: float | None = None  # the ratio this row must not exceed


@dataclasses.dataclass
class Table:
    """A titled list of rows with ratios to baseline rows measured in the same run."""

    title: str
    unit: str = "ns/op"
    rows: list[Row] = dataclasses.field(default_factory=list)
    ratio_header: str = "ratio"

    def add(self, row: Row) -> None:
        self.rows.append(row)

    def ratio(self, row: Row, *, cpu: bool = False) -> float | None:
        """Ratio to the baseline row, in wall time (or in CPU time with *cpu*)."""
        if row.stats is None or row.baseline is None:
            return None
        base = next((r for r in self.rows if r.label == row.baseline), None)
        if base is None or base.stats is None or base.stats.median == 0:
            return None
        mine, theirs = row.stats.samples, base.stats.samples
        if cpu:
            if row.stats.cpu is None or base.stats.cpu is None:
                return None
            mine, theirs = row.stats.cpu, base.stats.cpu
        if len(mine) == len(theirs) and all(theirs):
            # Samples of one round were taken back to back: the median of per-round ratios
            # cancels most of the machine's drift (other processes, frequency changes).
            return statistics.median(a / b for a, b in zip(mine, theirs, strict=True))
        return statistics.median(mine) / statistics.median(theirs)

    def render(self) -> str:
        width = max([len(r.label) for r in self.rows] + [28])
        has_cpu = any(r.stats is not None and r.stats.cpu is not None for r in self.rows)
        cpu_head = f"  {'(cpu)':>7}" if has_cpu else ""
        head = (
            f"{'case':<{width}}  {'median':>10}  {'min':>10}  {'max':>10}  "
            f"{self.ratio_header:>8}{cpu_head}  note"
        )
        lines = [f"== {self.title} ({self.unit}) ==", head, "-" * len(head)]
        for row in self.rows:
            if row.stats is None:
                cells = f"{'n/a':>10}  {'':>10}  {'':>10}  {'':>8}" + " " * len(cpu_head)
            else:
                ratio = self.ratio(row)
                rtext = "" if ratio is None else f"{ratio:.2f}x"
                s = row.stats
                cells = f"{_num(s.median)}  {_num(s.min)}  {_num(s.max)}  {rtext:>8}"
                if has_cpu:
                    cpu = self.ratio(row, cpu=True)
                    cells += f"  {'' if cpu is None else f'{cpu:.2f}x':>7}"
            lines.append(f"{row.label:<{width}}  {cells}  {self.verdict(row)}".rstrip())
        return "\n".join(lines)

    def verdict(self, row: Row) -> str:
        """The row's note, after its target and whether it is met (in wall and CPU time)."""
        if row.target is None:
            return row.note
        ratio, cpu = self.ratio(row), self.ratio(row, cpu=True)
        if ratio is None:
            return f"target <= {row.target:.2f}x: not measured; {row.note}".rstrip("; ")
        met = "met" if ratio <= row.target else "MISSED"
        if cpu is not None and (cpu <= row.target) != (ratio <= row.target):
            met += f" (cpu: {'met' if cpu <= row.target else 'MISSED'})"
        return f"target <= {row.target:.2f}x: {met}; {row.note}".rstrip("; ")

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "unit": self.unit,
            "rows": [
                {
                    "label": r.label,
                    "median": None if r.stats is None else r.stats.median,
                    "min": None if r.stats is None else r.stats.min,
                    "max": None if r.stats is None else r.stats.max,
                    "samples": None if r.stats is None else list(r.stats.samples),
                    "baseline": r.baseline,
                    "ratio": self.ratio(r),
                    "cpu_samples": None
                    if r.stats is None or r.stats.cpu is None
                    else list(r.stats.cpu),
                    "cpu_ratio": self.ratio(r, cpu=True),
                    "target": r.target,
                    "note": r.note,
                }
                for r in self.rows
            ],
        }


def _num(value: float) -> str:
    if value >= 100_000:
        return f"{value:>10,.0f}"
    return f"{value:>10,.1f}"


# -- timing ---------------------------------------------------------------------------------------


def _calibrate(loop: SyncLoop, seconds: float) -> int:
    """Iterations that take about *seconds* (timeit's autorange, doubling from 1).

    One untimed call first: a first call's one-off costs (a lazy import, a plan build) would
    otherwise make n tiny, and samples of a few iterations mostly measure noise.
    """
    loop(1)
    n = 1
    while True:
        start = time.perf_counter_ns()
        loop(n)
        elapsed = time.perf_counter_ns() - start
        if elapsed >= seconds * 1e9 / 4 or n >= 1 << 24:
            return max(1, int(n * seconds * 1e9 / max(elapsed, 1)))
        n *= 2


async def _calibrate_async(loop: AsyncLoop, seconds: float) -> int:
    """Like :func:`_calibrate`, also after one untimed call (anyio imports its backend then)."""
    await loop(1)
    n = 1
    while True:
        start = time.perf_counter_ns()
        await loop(n)
        elapsed = time.perf_counter_ns() - start
        if elapsed >= seconds * 1e9 / 4 or n >= 1 << 22:
            return max(1, int(n * seconds * 1e9 / max(elapsed, 1)))
        n *= 2


def run_sync_cases(
    cases: Mapping[str, SyncLoop],
    options: Options,
    numbers: Mapping[str, int] | None = None,
    work: Mapping[str, Work] | None = None,
) -> dict[str, Stats]:
    """Time each loop round-robin and return ns per operation for each case.

    :param numbers: fixed iteration counts for some cases (default: calibrated)
    :param work: what each operation of a case must do, checked after every sample
    """
    checks = work or {}
    fixed = numbers or {}
    counts = {
        label: fixed.get(label) or _calibrate(loop, options.sample_seconds)
        for label, loop in cases.items()
    }
    samples: dict[str, list[float]] = {label: [] for label in cases}
    cpu: dict[str, list[float]] = {label: [] for label in cases}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()  # what set-up built is never scanned again: a collect per sample stays cheap
    try:
        for rnd in range(WARMUP + options.repeats):
            for label, loop in cases.items():
                n = counts[label]
                check = checks.get(label)
                before = check.done() if check is not None else 0
                gc.collect()
                gc.disable()
                cpu_start = time.process_time_ns()
                start = time.perf_counter_ns()
                loop(n)
                elapsed = time.perf_counter_ns() - start
                cpu_elapsed = time.process_time_ns() - cpu_start
                gc.enable()
                if check is not None:
                    check.check(label, before, n)
                if rnd >= WARMUP:
                    samples[label].append(elapsed / n)
                    cpu[label].append(cpu_elapsed / n)
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()
        else:
            gc.disable()
    return {label: Stats(tuple(s), tuple(cpu[label])) for label, s in samples.items()}


async def run_async_cases(
    cases: Mapping[str, AsyncLoop],
    options: Options,
    numbers: Mapping[str, int] | None = None,
    work: Mapping[str, Work] | None = None,
) -> dict[str, Stats]:
    """Like :func:`run_sync_cases` for loops that await; run it inside the event loop."""
    checks = work or {}
    fixed = numbers or {}
    counts = {
        label: fixed.get(label) or await _calibrate_async(loop, options.sample_seconds)
        for label, loop in cases.items()
    }
    samples: dict[str, list[float]] = {label: [] for label in cases}
    cpu: dict[str, list[float]] = {label: [] for label in cases}
    gc_was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()  # what set-up built is never scanned again: a collect per sample stays cheap
    try:
        for rnd in range(WARMUP + options.repeats):
            for label, loop in cases.items():
                n = counts[label]
                check = checks.get(label)
                before = check.done() if check is not None else 0
                gc.collect()
                gc.disable()
                cpu_start = time.process_time_ns()
                start = time.perf_counter_ns()
                await loop(n)
                elapsed = time.perf_counter_ns() - start
                cpu_elapsed = time.process_time_ns() - cpu_start
                gc.enable()
                if check is not None:
                    check.check(label, before, n)
                if rnd >= WARMUP:
                    samples[label].append(elapsed / n)
                    cpu[label].append(cpu_elapsed / n)
    finally:
        gc.unfreeze()
        if gc_was_enabled:
            gc.enable()
        else:
            gc.disable()
    return {label: Stats(tuple(s), tuple(cpu[label])) for label, s in samples.items()}


# -- environment and output -----------------------------------------------------------------------

_PACKAGES = ("eventbus", "anyio", "pyee", "blinker", "pymitter", "sqlalchemy", "aiosqlite")


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict[str, Any]:
    """What the numbers were measured on: date, machine, Python and package versions."""
    return {
        "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "packages": {name: _version(name) for name in _PACKAGES},
    }


def print_environment(env: Mapping[str, Any]) -> None:
    pkgs = ", ".join(f"{k} {v}" for k, v in env["packages"].items())
    load = ", ".join(str(x) for x in env["load_average"])
    print(f"# {env['date']} | {env['machine']} | {env['python']} | load average {load}")
    print(f"# {pkgs}")


def finish(script: str, tables: Sequence[Table], options: Options, env: Mapping[str, Any]) -> None:
    """Write the JSON file if ``--json`` was given (tables are printed as they complete)."""
    took = time.monotonic() - _STARTED
    print(f"# {script}: {took:.1f} s{' (--quick)' if options.quick else ''}")
    if options.json_path is None:
        return
    options.json_path.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "script": script,
        "quick": options.quick,
        "repeats": options.repeats,
        "warmup": WARMUP,
        "seconds": round(took, 1),
        "environment": dict(env),
        "tables": [t.to_json() for t in tables],
    }
    options.json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    print(f"# wrote {options.json_path}")
