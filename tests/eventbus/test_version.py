"""``__version__`` and ``--version``: the distribution's version, one for both packages."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import eventbus
import scheduler
from eventbus._cli._main import main as eventbus_main
from eventbus._version import source_tree_version
from eventbus.cli import prog_name
from scheduler._cli._main import main as scheduler_main

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_both_packages_report_the_installed_distributions_version() -> None:
    assert eventbus.__version__ == metadata.version("eventbus") == PYPROJECT["version"]
    assert scheduler.__version__ == eventbus.__version__


def test_a_source_tree_without_metadata_reads_its_pyproject(tmp_path: Path) -> None:
    assert source_tree_version(ROOT) == PYPROJECT["version"]
    assert source_tree_version(tmp_path) == "0+unknown"  # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "9.9"\n')
    assert source_tree_version(tmp_path) == "0+unknown"  # not ours
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "eventbus"\nversion = "1.2.3"\n')
    assert source_tree_version(tmp_path) == "1.2.3"
    (tmp_path / "pyproject.toml").write_text("[project\n")
    assert source_tree_version(tmp_path) == "0+unknown"  # not TOML


def test_importing_the_packages_leaves_the_version_unread() -> None:
    """importlib.metadata costs a third of ``import eventbus``: it is loaded on first access."""
    code = (
        "import sys, eventbus, scheduler\n"
        "print('importlib.metadata' in sys.modules)\n"
        "print(scheduler.__version__ == eventbus.__version__, 'importlib.metadata' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "True", "True"]


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="module 'eventbus' has no attribute 'nope'"):
        eventbus.nope  # type: ignore[attr-defined]  # noqa: B018


@pytest.mark.parametrize(
    ("main", "module", "script"),
    [
        pytest.param(eventbus_main, "eventbus", "eventbus", id="eventbus"),
        pytest.param(scheduler_main, "scheduler", "eventbus-scheduler", id="scheduler"),
    ],
)
def test_version_option_prints_the_program_and_the_version(
    main: object,
    module: str,
    script: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert callable(main)
    for argv0, prog in [
        ("/x/lib/python3.11/site-packages/eventbus/__main__.py", f"python -m {module}"),
        (f"/x/bin/{script}", script),
    ]:
        monkeypatch.setattr(sys, "argv", [argv0, "--version"])
        with pytest.raises(SystemExit) as exited:
            main(["--version"])
        assert exited.value.code == 0
        assert capsys.readouterr().out == f"{prog} {PYPROJECT['version']}\n"


def test_prog_name_is_the_command_only_when_run_as_that_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "argv", ["/venv/bin/eventbus-scheduler"])
    assert prog_name("scheduler", "eventbus-scheduler") == "eventbus-scheduler"
    monkeypatch.setattr(sys, "argv", ["/usr/bin/pytest"])
    assert prog_name("scheduler", "eventbus-scheduler") == "python -m scheduler"
