"""``benchmarks/plots.py`` draws what the JSON says, and leaves out what is missing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_script() -> Any:
    """The script by its path: ``benchmarks/`` is a folder of scripts, not a package."""
    spec = importlib.util.spec_from_file_location("bench_plots", ROOT / "benchmarks" / "plots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


plots = _load_script()

ENVIRONMENT = {
    "date": "2026-12-01 17:41 UTC",
    "machine": "AMD EPYC, 2 cores, Linux",
    "python": "CPython 3.11.7",
    "load_average": [1.2, 1.5, 1.9],
    "packages": {},
}


def _row(label: str, median: float | None, ratio: float | None = None, **more: Any) -> Any:
    return {
        "label": label,
        "median": median,
        "min": median,
        "max": median,
        "samples": None if median is None else [median],
        "baseline": None if ratio is None else "direct call (baseline)",
        "ratio": ratio,
        "cpu_samples": None,
        "cpu_ratio": ratio,
        "target": None,
        "note": "",
        **more,
    }


def _emitters(ratio: float) -> list[Any]:
    return [
        _row("direct call (baseline)", 37.0),
        _row("floor: dict+cache dispatcher", 93.0, 2.55),
        _row("eventbus EventBus.emit", 96.0, ratio),
        _row("pyee EventEmitter", 576.0, 15.9),
        _row("pyee AsyncIOEventEmitter", None, note="no wildcard patterns"),
        _row("blinker Signal.send", 907.0, 25.0),
        _row("pymitter EventEmitter", 3304.0, 90.8),
    ]


def _result(script: str, tables: list[tuple[str, str, list[Any]]]) -> Any:
    return {
        "script": script,
        "quick": False,
        "seconds": 12.5,
        "environment": ENVIRONMENT,
        "tables": [{"title": t, "unit": u, "rows": rows} for t, u, rows in tables],
    }


PEERS = _result(
    "peers",
    [
        ("1 listener", "ns/op", _emitters(2.63)),
        ("10 listeners", "ns/op", _emitters(1.08)),
        ("1 listener, 1,000 other names registered", "ns/op", _emitters(2.69)),
        ("100 wildcard patterns 'svc{i}.*' registered", "ns/op", _emitters(2.76)),
    ],
)
SCALING = _result(
    "scaling",
    [
        (
            "One emit, 1 matching listener, as registrations grow",
            "ns/op",
            [_row("direct call (baseline)", 40.0)]
            + [_row(f"{n:>6,} other exact names", 100.0, 2.5) for n in (10, 100, 1000, 10000)]
            + [_row(f"{n:>6,} wildcard patterns", 101.0, 2.6) for n in (10, 100, 1000, 10000)],
        )
    ],
)


@pytest.fixture
def results(tmp_path: Path) -> Path:
    folder = tmp_path / "bench-results"
    folder.mkdir()
    for data in (PEERS, SCALING):
        (folder / f"{data['script']}.json").write_text(json.dumps(data))
    return folder


def test_each_plot_is_drawn_from_its_json_into_both_folders(results: Path, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    assert plots.main(["--results", str(results), "--docs", str(docs)]) == 0
    for folder in (results, docs):
        for name in ("emit-vs-peers.png", "scaling.png"):
            data = (folder / name).read_bytes()
            assert data.startswith(b"\x89PNG\r\n\x1a\n")
            assert 5_000 < len(data) < 100_000, (name, len(data))
    assert not (docs / "durable.png").exists()  # no durable.json: no plot


def test_the_results_page_shows_every_table_and_says_what_is_missing(
    results: Path, tmp_path: Path
) -> None:
    plots.main(["--results", str(results), "--docs", str(tmp_path / "docs")])
    page = (tmp_path / "docs" / "results.md").read_text()
    assert page == (results / "results.md").read_text()
    assert "**10 listeners** (ns/op)" in page
    assert "| eventbus EventBus.emit | 96.0 | 96.0 | 96.0 | 1.08x | 1.08x |  |" in page
    assert "| pyee AsyncIOEventEmitter | n/a | n/a | n/a |  |  | no wildcard patterns |" in page
    assert "load average 1.2, 1.5, 1.9" in page
    assert "Not in this run: emit_modes, dispatch_styles, cron_next, failure_writes, " in page
