"""What reading a stored payload costs per event: the durable consumer's decode before and after
versions, the tolerant reader and upcasters.

Question: how much does ``decode_stored`` (the path every durable delivery, retried failure
row and replayed outbox row takes now) add to ``decode_payload`` (the strict decoder it
replaced on those paths), for a payload of the declared version, for one carrying a field the
reader ignores, and for one brought up two versions by upcasters? The baseline is
``decode_payload`` of the same payload, measured in the same rounds.

Run: ``.venv/bin/python benchmarks/stored_decode.py [--quick] [--json PATH]``
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from _harness import Options, Row, Stats, Table, environment, finish, parse_options
from _harness import print_environment as print_env

from eventbus import Event, EventRegistry, decode_payload, decode_stored, upcaster

N = 200_000
QUICK_N = 20_000

reg = EventRegistry()


class OrderPaid(Event, name="order.paid", registry=reg, durable=True, version=3):
    order_id: int
    user_id: int
    amount: Decimal
    currency: str
    cents: int


@upcaster("order.paid", from_version=1, registry=reg)
def _currency(old: dict[str, Any]) -> dict[str, Any]:
    return {**old, "currency": "EUR"}


@upcaster("order.paid", from_version=2, registry=reg)
def _cents(old: dict[str, Any]) -> dict[str, Any]:
    return {**old, "cents": int(Decimal(old["amount"]) * 100)}


CURRENT = '{"amount": "9.90", "cents": 990, "currency": "EUR", "order_id": 1, "user_id": 7}'
NEWER = CURRENT[:-1] + ', "channel": "web"}'  # a v4 publisher's addition
V1 = '{"amount": "9.90", "order_id": 1, "user_id": 7}'

BASELINE = "decode_payload, declared version (before)"
CASES: dict[str, Callable[[], object]] = {
    BASELINE: lambda: decode_payload(reg, "order.paid", CURRENT),
    "decode_stored, declared version": lambda: decode_stored(reg, "order.paid", CURRENT, 3),
    "decode_stored, one field ignored (v4)": lambda: decode_stored(reg, "order.paid", NEWER, 4),
    "decode_stored, v1 through two upcasters": lambda: decode_stored(reg, "order.paid", V1, 1),
}


def sample(fn: Callable[[], object], n: int) -> tuple[float, float]:
    wall, cpu = time.perf_counter_ns(), time.process_time_ns()
    for _ in range(n):
        fn()
    return (time.perf_counter_ns() - wall) / n, (time.process_time_ns() - cpu) / n


def main(options: Options) -> Table:
    n = QUICK_N if options.quick else N
    assert decode_stored(reg, "order.paid", V1, 1).event == decode_payload(
        reg, "order.paid", CURRENT
    )
    assert decode_stored(reg, "order.paid", NEWER, 4).ignored == ("channel",)
    for fn in CASES.values():  # warm up: caches of hints and field maps
        sample(fn, n // 10)
    walls: dict[str, list[float]] = {k: [] for k in CASES}
    cpus: dict[str, list[float]] = {k: [] for k in CASES}
    for _ in range(options.repeats):  # one round: every case back to back
        for label, fn in CASES.items():
            w, c = sample(fn, n)
            walls[label].append(w)
            cpus[label].append(c)
    table = Table("reading one stored payload of five fields")
    for label in CASES:
        stats = Stats(tuple(walls[label]), tuple(cpus[label]))
        table.add(Row(label, stats, baseline=None if label == BASELINE else BASELINE))
    print(table.render())
    return table


if __name__ == "__main__":
    opts = parse_options(__doc__)
    env = environment()
    print_env(env)
    finish("stored_decode.py", [main(opts)], opts, env)
