"""``make demo-durable`` (``python -m domain.durable_demo``): two processes, one Redis, exit 0."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.durable.conftest import ROOT

pytestmark = pytest.mark.slow


def test_the_durable_demo_shows_the_hop_a_retry_and_a_dead_letter() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "domain.durable_demo"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    shop = {line.split(" pid ")[1].split("]")[0] for line in out.splitlines() if "[shop" in line}
    billing = {
        line.split(" pid ")[1].split("]")[0] for line in out.splitlines() if "[billing" in line
    }
    assert len(shop) == len(billing) == 1 and shop != billing  # two processes: the hop
    assert out.count("committed order") == 3 and out.count("rewards.grant: order") == 3
    assert "mailer.receipt: order 2 sent (delivery 2)" in out  # the retried failure
    assert "DEAD LETTER: billing:fraud.check gave up on order.paid after 3 deliveries" in out
    assert "1 dead letter\n" in out and "\n1 failure\n" in out
