"""``python -m eventbus doctor``: the extras, and a ``scheduler`` that is not eventbus's.

The clash is made for real here: a directory with another distribution's ``scheduler``
package and its ``.dist-info`` (what pip leaves on disk), first on ``sys.path``. ``make test``
also installs the wheel and then such a distribution with pip into one venv, where the other
package overwrites eventbus's files (``tests/packaging.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from eventbus._cli._main import main
from eventbus.extras import EXTRAS

ROOT = Path(__file__).resolve().parents[3]


def test_doctor_reports_the_extras_and_a_scheduler_that_is_ours(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["doctor"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"eventbus {__import__('eventbus').__version__} in {ROOT} ")
    assert [line.split()[1] for line in lines[1:-1]] == [f"{e}:" for e in EXTRAS]
    assert all(line.endswith(" installed") for line in lines[1:-1])
    assert lines[-1] == f"scheduler: eventbus's, in {ROOT / 'scheduler'}"


def other_scheduler(where: Path) -> None:
    """What ``pip install scheduler`` (the unrelated PyPI distribution) leaves in *where*."""
    (where / "scheduler").mkdir()
    (where / "scheduler" / "__init__.py").write_text('class Scheduler:\n    """Threads."""\n')
    info = where / "scheduler-0.8.11.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: scheduler\nVersion: 0.8.11\n")
    (info / "RECORD").write_text(
        "scheduler/__init__.py,,\nscheduler-0.8.11.dist-info/METADATA,,\n"
        "scheduler-0.8.11.dist-info/RECORD,,\n"
    )


def test_doctor_names_another_scheduler_first_on_the_path_and_exits_1(tmp_path: Path) -> None:
    other_scheduler(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(  # cwd first on sys.path: the other scheduler shadows ours
        [sys.executable, "-m", "eventbus", "doctor"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    problems = [line for line in done.stdout.splitlines() if line.startswith("PROBLEM: ")]
    shadowed = (
        f"PROBLEM: 'import scheduler' finds {tmp_path / 'scheduler'}, not "
        f"{ROOT / 'scheduler'} (eventbus's): another package named 'scheduler' comes first on "
        "sys.path"
    )
    installed = (
        "PROBLEM: the distribution 'scheduler' installs a top-level 'scheduler' package too "
        "(pip writes both into one scheduler/ directory): pip uninstall scheduler, then pip "
        "install --force-reinstall eventbus"
    )
    assert problems == [shadowed, installed]
    # what the user would have seen without the doctor
    probe = "import scheduler; print(scheduler.Scheduler.__doc__, hasattr(scheduler, 'Job'))"
    seen = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert seen.stdout == "Threads. False\n"
