"""The README's listener-API example (priority, times, current_emission, emit_threadsafe,
subscribed, wait_for), run as written in a fresh interpreter (it declares events in the
default registry)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
MARKER = "<!-- listener-api example: tests/eventbus/test_readme_listener_api.py runs this block -->"


def example() -> str:
    text = README.read_text(encoding="utf-8")
    after = text.split(MARKER, 1)[1]
    match = re.match(r"\s*```python\n(.*?)```", after, re.DOTALL)
    assert match is not None, "the README example block is missing after its marker"
    return match.group(1)


def test_the_readme_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, "-c", example()],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=README.parent,
    )
    assert done.returncode == 0, done.stderr
