"""``benchmarks/counters.py`` times only work that was done: every view of every case counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import AsyncEngine

from domain.backends.memory import MemoryCounterStore


def _load_script() -> Any:
    """The script by its path: ``benchmarks/`` is a folder of scripts, not a package."""
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "counters.py"
    spec = importlib.util.spec_from_file_location("counters_benchmark", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


bench = _load_script()


async def test_every_ingestion_case_counts_every_view_it_times(
    engine: AsyncEngine, redis_client: Redis
) -> None:
    """Regression test: ``view_nowait`` reused the viewer keys of the case before it, so it
    timed 10,000 rejected duplicates a round (0 counted) and reported 652k views/s."""
    cases = bench.build_cases(redis_client, engine, MemoryCounterStore(), 300, 200, 50)
    assert None not in cases.values()
    with anyio.fail_after(60):
        rates = await bench.measure(cases, repeats=1)  # raises if a round counted fewer views
    assert {label: len(samples or []) for label, samples in rates.items()} == dict.fromkeys(
        cases, 1
    )


async def test_a_round_of_rejected_duplicates_fails_the_benchmark(engine: AsyncEngine) -> None:
    store = MemoryCounterStore()
    cases = {
        "first": bench.counter(store, engine, None, 40, tag="same"),
        "reusing its viewers": bench.counter(store, engine, bench.WINDOW, 40, tag="same"),
    }
    with anyio.fail_after(10), pytest.raises(AssertionError, match="round 0 counted 0 of 40"):
        await bench.measure(cases, repeats=0)
