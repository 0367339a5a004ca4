"""``python -m eventbus doctor``: the version, the extras installed, and whether ``import
scheduler`` gives the scheduler that came with eventbus.

The ``scheduler`` package shares its name with an unrelated PyPI distribution that installs a
top-level ``scheduler`` package too. pip then writes both into the same ``scheduler/``
directory, each overwriting the other's ``__init__.py``, and ``from scheduler import
Scheduler`` may silently return the other library's class. The check needs no import of
``scheduler`` (which may be the other one): it finds the package with
:func:`importlib.util.find_spec`, asks :func:`importlib.metadata.packages_distributions` who
installed a top-level ``scheduler``, and compares eventbus's installed files with the hashes
pip recorded for them. Exit 0 when all is well, 1 when ``scheduler`` is not ours.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import platform
import re
from importlib import metadata
from pathlib import Path

from .._version import DISTRIBUTION, version
from ..extras import EXTRAS, missing_extra

__all__ = ["add_doctor_parser", "doctor", "scheduler_problems"]

#: where eventbus (and so its scheduler) is: the directory that holds the ``eventbus`` package
HOME = Path(__file__).resolve().parents[2]


def add_doctor_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    commands.add_parser(
        "doctor",
        help="the version, the extras installed, and whether 'scheduler' is eventbus's",
        description="Print the version and the extras installed, and check that 'import "
        "scheduler' gives eventbus's scheduler (a PyPI distribution named 'scheduler' "
        "installs a package of the same name). Exit 1 if it does not.",
    )


def doctor() -> int:
    """Print the report; the exit code: 0, or 1 when ``scheduler`` is not eventbus's."""
    print(f"eventbus {version()} in {HOME} (Python {platform.python_version()})")
    for extra in EXTRAS:
        if missing := missing_extra("doctor", extra):
            print(
                f"extra {extra + ':':9} not installed ({', '.join(missing.missing)} missing): "
                f"pip install 'eventbus[{extra}]'"
            )
        else:
            print(f"extra {extra + ':':9} installed")
    problems = scheduler_problems()
    for problem in problems:
        print(f"PROBLEM: {problem}")
    if not problems:
        print(f"scheduler: eventbus's, in {HOME / 'scheduler'}")
    return 1 if problems else 0


def scheduler_problems() -> list[str]:
    """Why ``import scheduler`` may not give eventbus's scheduler, one line each; ``[]`` if
    it does."""
    problems = []
    spec = importlib.util.find_spec("scheduler")
    if spec is None or spec.origin is None:
        problems.append("'import scheduler' finds nothing: pip install --force-reinstall eventbus")
    elif (found := Path(spec.origin).resolve().parent) != HOME / "scheduler":
        problems.append(
            f"'import scheduler' finds {found}, not {HOME / 'scheduler'} (eventbus's): another "
            "package named 'scheduler' comes first on sys.path"
        )
    others = _other_distributions("scheduler")
    if others:
        names = " ".join(others)
        problems.append(
            f"the distribution {names!r} installs a top-level 'scheduler' package too (pip "
            f"writes both into one scheduler/ directory): pip uninstall {names}, then pip "
            "install --force-reinstall eventbus"
        )
    changed = _changed_files("scheduler")
    if changed:
        shown = ", ".join(changed[:3]) + (", ..." if len(changed) > 3 else "")
        problems.append(
            f"{len(changed)} of the files eventbus installed in scheduler/ were overwritten or "
            f"removed since ({shown}): pip install --force-reinstall eventbus"
        )
    return problems


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _other_distributions(package: str) -> list[str]:
    """Installed distributions other than eventbus that install the top-level *package*."""
    names = metadata.packages_distributions().get(package, [])
    return sorted({n for n in names if _normal(n) != DISTRIBUTION})


def _changed_files(package: str) -> list[str]:
    """Files of *package* that pip recorded for eventbus and that are gone or differ now;
    ``[]`` when the running eventbus is not an installed copy (a source tree, an editable
    install), whose files pip never recorded."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return []
    if (
        Path(str(dist.locate_file("eventbus/__init__.py"))).resolve()
        != HOME / "eventbus/__init__.py"
    ):
        return []
    changed = []
    for file in dist.files or []:
        if file.parts[0] != package or file.hash is None:
            continue
        try:
            data = Path(str(dist.locate_file(file))).read_bytes()
        except FileNotFoundError:
            changed.append(f"{file} (removed)")
            continue
        digest = hashlib.new(file.hash.mode, data).digest()
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != file.hash.value:
            changed.append(str(file))
    return changed
