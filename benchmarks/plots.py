"""Plots and tables of the last ``make bench`` run, made from the JSON the scripts wrote.

Question: what does the documentation show of the last run, and does it match the JSON? This
reads ``bench-results/*.json`` and writes, next to the JSON and into ``docs/perf/`` (the
performance page shows them; committed, so that the site and the README have them):

* ``emit-vs-peers.png``: one emit's cost as a multiple of a direct call, for eventbus and each
  peer, per workload (``peers.py``; ratios in CPU time, which other processes cannot inflate);
* ``scaling.png``: one emit's cost as names and wildcard patterns are added (``scaling.py``);
* ``durable.png``: events/s end to end and latency at fixed offered rates (``durable.py``);
* ``results.md``: every table of every script, with the machine, the load average and the
  date of its run (a page of the site).

A script whose JSON is missing is left out, and said so. Run by ``benchmarks/run_all.py`` after
the scripts, or alone: ``.venv/bin/python benchmarks/plots.py [--results DIR] [--docs DIR]``.
Needs matplotlib (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "bench-results"
DOCS = HERE.parent / "docs" / "perf"
DPI = 100  # with the sizes below, each PNG stays under ~60 KB
WIDE = (8.0, 3.6)

# The peers, in the order of the legend; a row is matched by the start of its label.
EMITTERS = (
    ("eventbus", "eventbus"),
    ("floor", "floor: dict+cache"),
    ("pyee", "pyee EventEmitter"),
    ("pyee AsyncIO", "pyee AsyncIOEventEmitter"),
    ("blinker", "blinker"),
    ("pymitter", "pymitter"),
)
COLOURS = {
    "eventbus": "#3f51b5",
    "floor": "#9fa8da",
    "pyee": "#ef6c00",
    "pyee AsyncIO": "#ffb74d",
    "blinker": "#2e7d32",
    "pymitter": "#8d6e63",
}
# peers.py's sync workloads: a pattern its table's title starts with, and its label on the plot.
WORKLOADS = (
    (r"1 listener$", "1 listener"),
    (r"10 listeners", "10 listeners"),
    (r"1 listener, 1,000 other names", "1,000 other\nnames"),
    (r"100 wildcard patterns", "100 wildcard\npatterns"),
)

Result = dict[str, Any]
Table = dict[str, Any]


def load(results: Path, script: str) -> Any:
    try:
        data: Any = json.loads((results / f"{script}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data


def table(result: Result, title: str) -> Table:
    """The table whose title matches the pattern *title* from its start."""
    for found in result["tables"]:
        if re.match(title, found["title"]):
            return dict(found)
    raise LookupError(f"{result['script']}: no table whose title matches {title!r}")


def row(found: Table, label_start: str) -> dict[str, Any] | None:
    return next((r for r in found["rows"] if r["label"].startswith(label_start)), None)


def ratio(found: dict[str, Any]) -> float | None:
    """The row's ratio in CPU time where measured (other processes on a shared machine cannot
    inflate it), else in wall time."""
    value = found.get("cpu_ratio") or found["ratio"]
    return None if value is None else float(value)


def subtitle(result: Result) -> str:
    env = result["environment"]
    quick = ", --quick" if result.get("quick") else ""
    load_avg = ", ".join(f"{x:.1f}" for x in env["load_average"])
    return f"{env['date']}, {env['machine'].split(',')[0]}, load {load_avg}{quick}"


def save(fig: Figure, name: str, outs: Sequence[Path]) -> None:
    fig.tight_layout()
    first = outs[0] / name
    fig.savefig(first, dpi=DPI)
    plt.close(fig)
    for other in outs[1:]:
        shutil.copyfile(first, other / name)


def plot_peers(result: Result, outs: Sequence[Path]) -> None:
    """Grouped bars: x a direct call (log scale), per workload and emitter."""
    fig, ax = plt.subplots(figsize=WIDE)
    width = 0.8 / len(EMITTERS)
    absent: dict[int, list[tuple[float, str]]] = {}
    for i, (name, start) in enumerate(EMITTERS):
        xs, ys = [], []
        for w, (title_start, _) in enumerate(WORKLOADS):
            found = row(table(result, title_start), start)
            x = w + (i - (len(EMITTERS) - 1) / 2) * width
            if found is not None and (value := ratio(found)) is not None:
                xs.append(x)
                ys.append(value)
            elif found is not None:  # a case that does not apply (no wildcard patterns)
                absent.setdefault(w, []).append((x, name))
        bars = ax.bar(xs, ys, width, label=name, color=COLOURS[name])
        if name == "eventbus":
            ax.bar_label(bars, fmt="%.2fx", fontsize=7, padding=1)
    for cases in absent.values():
        middle = sum(x for x, _ in cases) / len(cases)
        names = ",\n".join(name for _, name in cases)
        ax.text(middle, 1.2, f"n/a:\n{names}", ha="center", va="bottom", fontsize=6)
    ax.set_yscale("log")
    ax.set_xticks(range(len(WORKLOADS)), [label for _, label in WORKLOADS], fontsize=8)
    ax.set_ylabel("x a direct call, CPU time (log)", fontsize=8)
    ax.axhline(1, color="black", linewidth=0.6)
    ax.set_title(f"One emit, sync listeners (lower is better)\n{subtitle(result)}", fontsize=9)
    ax.legend(fontsize=7, ncols=3, loc="upper left")
    ax.tick_params(labelsize=7)
    save(fig, "emit-vs-peers.png", outs)


def plot_scaling(result: Result, outs: Sequence[Path]) -> None:
    """Lines: x a direct call, as other names or wildcard patterns are registered."""
    found = table(result, "One emit, 1 matching listener")
    fig, ax = plt.subplots(figsize=(6.0, 3.2))
    top = 1.0
    for kind, colour in (("other exact names", "#3f51b5"), ("wildcard patterns", "#ef6c00")):
        points = sorted(
            (int(m[1].replace(",", "")), value)
            for r in found["rows"]
            if (m := re.match(r"\s*([\d,]+) " + kind, r["label"]))
            and (value := ratio(r)) is not None
        )
        ax.plot([p for p, _ in points], [r for _, r in points], "o-", label=kind, color=colour)
        top = max([top, *(r for _, r in points)])
    ax.set_xscale("log")
    ax.set_ylim(0, top * 1.25)
    ax.set_xlabel("registered (log)", fontsize=8)
    ax.set_ylabel("x a direct call, CPU time", fontsize=8)
    ax.set_title(f"One emit to 1 listener, as registrations grow\n{subtitle(result)}", fontsize=9)
    ax.legend(fontsize=7)
    ax.tick_params(labelsize=7)
    save(fig, "scaling.png", outs)


def plot_durable(result: Result, outs: Sequence[Path]) -> None:
    """Two panels: max events/s per case; p50 and p99 latency at each offered rate."""
    fig, (left, right) = plt.subplots(1, 2, figsize=WIDE)
    throughput = table(result, "Max sustained throughput")
    labels = [r["label"].replace(" (XADD, XREADGROUP, XACK)", "") for r in throughput["rows"]]
    labels = [label.replace(", listener takes tx", "\n+ tx") for label in labels]
    bars = left.barh(labels, [r["median"] for r in throughput["rows"]], color="#3f51b5")
    left.bar_label(bars, fmt="{:,.0f}", fontsize=7, padding=2)
    left.invert_yaxis()
    left.set_xlabel("events/s, commit to listener finished", fontsize=8)
    left.set_xlim(right=max(r["median"] for r in throughput["rows"]) * 1.3)
    latency = table(result, "Latency at a fixed offered rate")
    names = [
        r["label"]
        + (f" ({m[1]} reached)" if (m := re.search(r"offered ([\d,]+)/s", r["note"])) else "")
        for r in latency["rows"]
    ]
    p50 = [r["samples"][0] for r in latency["rows"]]  # durable.py stores (p50, p99, max)
    p99 = [r["samples"][1] for r in latency["rows"]]
    ys = range(len(names))
    right.barh([y - 0.2 for y in ys], p50, 0.4, label="p50", color="#9fa8da")
    right.barh([y + 0.2 for y in ys], p99, 0.4, label="p99", color="#3f51b5")
    right.set_yticks(list(ys), [n.replace(" @ ", "\n@ ") for n in names])
    right.invert_yaxis()
    right.set_xlabel("ms, commit to listener finished", fontsize=8)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.tick_params(labelsize=7)
    fig.suptitle(f"Durable events, two processes\n{subtitle(result)}", fontsize=9)
    save(fig, "durable.png", outs)


def _cell(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "events/s" or value >= 1000:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def _harness_tables(result: Result) -> list[str]:
    """The tables of a script that writes the harness's JSON (``_harness.finish``)."""
    lines: list[str] = []
    for t in result["tables"]:
        unit = t["unit"]
        lines += [
            f"**{t['title']}** ({unit})",
            "",
            "| case | median | min | max | ratio | (cpu) | note |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for r in t["rows"]:
            ratio = "" if r["ratio"] is None else f"{r['ratio']:.2f}x"
            cpu = "" if r.get("cpu_ratio") is None else f"{r['cpu_ratio']:.2f}x"
            note = str(r.get("note") or "").replace("|", "/")
            lines.append(
                f"| {r['label'].strip()} | {_cell(r['median'], unit)} | "
                f"{_cell(r['min'], unit)} | {_cell(r['max'], unit)} | {ratio} | {cpu} | {note} |"
            )
        lines.append("")
    return lines


def _records(data: Any) -> list[tuple[str, list[dict[str, Any]]]]:
    """Lists of flat records in a script's own JSON: the list itself, or each list in it."""
    if isinstance(data, list):
        return [("", data)] if all(isinstance(x, dict) for x in data) else []
    return [
        (key, value)
        for key, value in data.items()
        if isinstance(value, list) and value and all(isinstance(x, dict) for x in value)
    ]


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
    return str(value).replace("|", "/")


def _other_tables(data: Any) -> list[str]:
    """The records of a script with a JSON of its own (``cron_next``, ``counters``)."""
    lines: list[str] = []
    for title, rows in _records(data):
        columns = [k for k, v in rows[0].items() if not isinstance(v, list | dict)]
        if title:
            lines += [f"**{title}**", ""]
        lines += [f"| {' | '.join(columns)} |", f"|{'---|' * len(columns)}"]
        lines += [f"| {' | '.join(_plain(r.get(c, '')) for c in columns)} |" for r in rows]
        lines.append("")
    return lines


def results_page(found: dict[str, Any], missing: Sequence[str]) -> str:
    """Every table of every script, as Markdown."""
    lines = [
        "# Latest run",
        "",
        (
            "Generated by `make bench` (`benchmarks/plots.py`) from the JSON in `bench-results/`; "
            "the [performance page](../performance.md) explains the workloads and the figures. "
            "Ratios are the median of per-round ratios to the baseline row measured in the same "
            "run; the cpu column is the same ratio in CPU time, which other processes cannot "
            "inflate."
        ),
        "",
    ]
    if missing:
        lines += [f"Not in this run: {', '.join(missing)}.", ""]
    for script, result in found.items():
        lines += [f"## {script}", ""]
        if isinstance(result, dict) and "tables" in result:
            env = result["environment"]
            quick = " (`--quick`)" if result.get("quick") else ""
            load_avg = ", ".join(str(x) for x in env["load_average"])
            lines += [
                (
                    f"`benchmarks/{script}.py`{quick}: {env['date']}, {env['machine']}, "
                    f"{env['python']}, load average {load_avg}, {result['seconds']} s."
                ),
                "",
                *_harness_tables(result),
            ]
        else:
            lines += [f"`benchmarks/{script}.py` (its own format):", "", *_other_tables(result)]
    return "\n".join(lines)


# run_all.py's scripts, in its order
SCRIPTS = (
    "emit_modes",
    "peers",
    "scaling",
    "dispatch_styles",
    "cron_next",
    "failure_writes",
    "counters",
    "durable",
)
PLOTS = {"peers": plot_peers, "scaling": plot_scaling, "durable": plot_durable}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help="the JSON directory")
    parser.add_argument("--docs", type=Path, default=DOCS, help="a copy for the site")
    args = parser.parse_args(argv)
    outs = [args.results, args.docs]
    for out in outs:
        out.mkdir(parents=True, exist_ok=True)
    found = {s: r for s in SCRIPTS if (r := load(args.results, s)) is not None}
    missing = [s for s in SCRIPTS if s not in found]
    for script, plot in PLOTS.items():
        if script in found:
            plot(found[script], outs)
            print(f"# plots: wrote {script}'s plot to {', '.join(str(o) for o in outs)}")
        else:
            print(f"# plots: no {script}.json in {args.results}: its plot is left as it was")
    page = results_page(found, missing)
    for out in outs:
        (out / "results.md").write_text(page + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
