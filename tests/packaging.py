"""Build the sdist and the wheel, check them, and use the wheel as a new user would.

``make test`` runs ``python -m tests.packaging --no-extras VENV --all VENV`` with the dev venv's
Python (it has ``build`` and ``twine``); the two venvs hold the runtime dependencies only, and
every extra without the dev tools (the Makefile builds them). In order:

1. ``python -m build`` into ``dist/``: the sdist, then the wheel built from the sdist.
2. ``twine check --strict`` on both.
3. The wheel holds ``eventbus`` and ``scheduler`` only (not ``domain``, not the tests), every
   file of the two packages in the tree (templates and ``py.typed`` included), the LICENSE,
   the console scripts, and requires anyio and tzdata only; the rest are extras.
4. The sdist holds the source, the tests and the reference application, and no venv or cache.
5. No extras: the wheel replaces the venv's copy, then, from an empty directory (so that no
   source tree is on ``sys.path``): the README's quickstart prints what the README says;
   ``tests/runtime_deps.py`` passes against the installed copy; the console scripts answer
   ``--version``; ``domain`` is not importable. Then the ``scheduler`` name clash, for real: a
   distribution named ``scheduler`` (a stand-in for the PyPI one, built here) installed over
   ours makes ``eventbus doctor`` exit 1 and name it; uninstalled and eventbus reinstalled, 0.
6. ``[all]``: the wheel replaces that venv's copy; ``tests/runtime_deps.py --all`` passes
   against it (every optional module imports).

Prints one line per step; exits 1 at the first failure, with the command's output.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
import zipfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
README = ROOT / "README.md"
QUICKSTART = "<!-- quickstart: tests/packaging.py runs this block with the wheel and no extras -->"
PACKAGES = ("eventbus", "scheduler")
SCRIPTS = ("eventbus", "eventbus-scheduler")


class CheckFailed(Exception):
    """A step found something wrong; the message says what."""


def run(*command: str | Path, cwd: Path = ROOT, code: int | None = 0) -> str:
    """Run *command* in a clean environment; its stdout, or :class:`CheckFailed` with its
    output when it exits with another code than *code* (``None``: any)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    done = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )
    if code is not None and done.returncode != code:
        shown = " ".join(str(c) for c in command)
        raise CheckFailed(
            f"{shown} (in {cwd}) exited {done.returncode}, not {code}\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def project() -> dict[str, Any]:
    found: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return found


def build() -> tuple[Path, Path]:
    """The sdist and the wheel of today's tree, built afresh."""
    version = project()["version"]
    for old in DIST.glob("eventbus-*"):
        old.unlink()
    run(sys.executable, "-m", "build", "--outdir", DIST, ROOT)
    sdist = DIST / f"eventbus-{version}.tar.gz"
    wheel = DIST / f"eventbus-{version}-py3-none-any.whl"
    if not (sdist.is_file() and wheel.is_file()):
        raise CheckFailed(f"build made {sorted(p.name for p in DIST.iterdir())}")
    return sdist, wheel


def tree_files(package: str) -> set[str]:
    """What the wheel should hold of *package*: every file in the tree but caches."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / package).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def check_wheel(wheel: Path) -> int:
    """The wheel's files and metadata; returns how many files it holds."""
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = zf.read(f"{info}/METADATA").decode()
        entry_points = zf.read(f"{info}/entry_points.txt").decode()
    tops = {n.split("/")[0] for n in names}
    if tops != {*PACKAGES, info}:
        raise CheckFailed(f"the wheel's top level is {sorted(tops)}, not {[*PACKAGES, info]}")
    for package in PACKAGES:
        shipped = {n for n in names if n.startswith(f"{package}/")}
        if shipped != (tree := tree_files(package)):
            raise CheckFailed(
                f"the wheel's {package}/ differs from the tree's: missing "
                f"{sorted(tree - shipped)}, extra {sorted(shipped - tree)}"
            )
        if f"{package}/py.typed" not in names:
            raise CheckFailed(f"the wheel has no {package}/py.typed")
    if f"{info}/licenses/LICENSE" not in names or "License-Expression: MIT" not in meta:
        raise CheckFailed("the wheel has no LICENSE file, or no License-Expression: MIT")
    required = sorted(
        line.split(":", 1)[1].split(";")[0].split(">")[0].strip()
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    )
    if required != ["anyio", "tzdata"]:
        raise CheckFailed(f"the wheel requires {required} without extras, not anyio and tzdata")
    extras = sorted(re.findall(r"^Provides-Extra: (\S+)$", meta, re.M))
    declared = sorted(project()["optional-dependencies"])
    if extras != declared:
        raise CheckFailed(f"the wheel provides the extras {extras}, not {declared}")
    scripts = re.findall(
        r"^(\S+) = (\S+)$", entry_points.split("[console_scripts]")[1].split("[")[0], re.M
    )
    if sorted(name for name, _ in scripts) != sorted(SCRIPTS):
        raise CheckFailed(f"the wheel's console scripts are {scripts}, not {SCRIPTS}")
    return len(names)


def check_sdist(sdist: Path) -> int:
    """The sdist's files; returns how many it holds."""
    with tarfile.open(sdist) as tf:
        names = {n.split("/", 1)[1] for n in tf.getnames() if "/" in n}
    wanted = {"pyproject.toml", "LICENSE", "README.md", "CHANGELOG.md", "domain/__init__.py"}
    wanted |= {"tests/conftest.py", "tests/packaging.py", *tree_files("eventbus")}
    if missing := sorted(wanted - names):
        raise CheckFailed(f"the sdist lacks {missing[:5]}")
    if junk := sorted(n for n in names if re.match(r"(\.venv|dist/|.*__pycache__|.*\.db$)", n)):
        raise CheckFailed(f"the sdist holds {junk[:5]}")
    return len(names)


def quickstart() -> tuple[str, str]:
    """The README's quickstart: its code, and the output the README shows under it."""
    text = README.read_text(encoding="utf-8")
    if QUICKSTART not in text:
        raise CheckFailed(f"README.md has no {QUICKSTART!r} before its quickstart")
    match = re.match(
        r"\s*```python\n(.*?)```\s*\n.*?```text\n(.*?)```", text.split(QUICKSTART, 1)[1], re.S
    )
    if match is None:
        raise CheckFailed(
            "README.md: the quickstart is not a python block followed by a text block"
        )
    return match[1], match[2]


def install(venv: Path, wheel: Path) -> None:
    """Replace the venv's copy of eventbus by *wheel* (its dependencies are there already)."""
    pip = (venv / "bin/python", "-m", "pip", "install", "--quiet", "--no-deps")
    run(*pip, "--force-reinstall", wheel)
    run(venv / "bin/python", "-m", "pip", "check")


def check_installed(venv: Path, here: Path, *, extras: bool) -> int:
    """The installed wheel, from *here*, a directory with no source tree in it; returns how
    many checks ``tests/runtime_deps.py`` made."""
    python = venv / "bin/python"
    where = run(
        python, "-I", "-c", "import eventbus, scheduler; print(eventbus.__file__)", cwd=here
    )
    if not where.startswith(str(venv)):
        raise CheckFailed(f"eventbus was imported from {where.strip()}, not from {venv}")
    checked = run(
        python, "-I", ROOT / "tests/runtime_deps.py", *(["--all"] if extras else []), cwd=here
    )
    run(python, "-I", "-c", "import domain", cwd=here, code=1)
    version = project()["version"]
    for script in SCRIPTS:
        if run(venv / "bin" / script, "--version", cwd=here) != f"{script} {version}\n":
            raise CheckFailed(f"{script} --version does not print {script} {version}")
    if (venv / "bin/scheduler").exists():
        raise CheckFailed("a command named 'scheduler' was installed")
    return sum(line.startswith("ok") for line in checked.splitlines())


def check_quickstart(venv: Path, here: Path) -> None:
    code, shown = quickstart()
    (here / "quickstart.py").write_text(code)
    printed = run(venv / "bin/python", "-I", "quickstart.py", cwd=here)
    if printed != shown:
        raise CheckFailed(f"the quickstart printed\n{printed}not what README.md shows:\n{shown}")


def other_scheduler(where: Path) -> Path:
    """A wheel of a distribution named ``scheduler`` whose package is a top-level
    ``scheduler``, as the unrelated PyPI distribution's is."""
    info = "scheduler-0.8.11.dist-info"
    files = {
        "scheduler/__init__.py": b'"""Another library\'s scheduler."""\n',
        f"{info}/METADATA": b"Metadata-Version: 2.1\nName: scheduler\nVersion: 0.8.11\n",
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests.packaging\n"
        b"Root-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    )
    wheel = where / "scheduler-0.8.11-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return wheel


def check_name_clash(venv: Path, wheel: Path, here: Path) -> None:
    """Another ``scheduler`` installed over ours: the doctor says so, and how to repair."""
    pip = (venv / "bin/python", "-m", "pip", "--quiet")
    doctor = (venv / "bin/eventbus", "doctor")
    run(*pip, "install", "--no-deps", "--no-index", other_scheduler(here), cwd=here)
    try:
        said = run(*doctor, cwd=here, code=1)
        overwritten = "1 file eventbus installed in scheduler/ was overwritten or removed"
        for expected in [
            "PROBLEM: the distribution 'scheduler' installs a top-level 'scheduler' package too",
            f"PROBLEM: {overwritten} since (scheduler/__init__.py)",
        ]:
            if expected not in said:
                raise CheckFailed(f"eventbus doctor did not say {expected!r}:\n{said}")
        probe = "from scheduler import CronExpression"
        run(venv / "bin/python", "-I", "-c", probe, cwd=here, code=1)
    finally:  # what the doctor says to do; a failed check leaves the venv as it found it
        run(*pip, "uninstall", "--yes", "scheduler", cwd=here)  # takes our __init__.py along
        removed = run(*doctor, cwd=here, code=None)
        install(venv, wheel)
    if "scheduler/__init__.py (removed)" not in removed:
        raise CheckFailed(f"eventbus doctor did not see scheduler/__init__.py removed:\n{removed}")
    run(*doctor, cwd=here)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--no-extras", type=Path, required=True, metavar="VENV")
    parser.add_argument("--all", type=Path, required=True, metavar="VENV")
    args = parser.parse_args(argv)
    started = time.monotonic()

    def step(what: str) -> None:
        print(f"package: {what} ({time.monotonic() - started:.0f} s)", flush=True)

    try:
        sdist, wheel = build()
        step(f"built {sdist.name} and {wheel.name}")
        run(sys.executable, "-m", "twine", "check", "--strict", sdist, wheel)
        step("twine check --strict")
        step(f"the wheel's {check_wheel(wheel)} files and metadata")
        step(f"the sdist's {check_sdist(sdist)} files")
        with tempfile.TemporaryDirectory(prefix="eventbus-user-") as tmp:
            here = Path(tmp)
            venv = args.no_extras.resolve()
            install(venv, wheel)
            check_quickstart(venv, here)
            step("no extras: the README's quickstart")
            n = check_installed(venv, here, extras=False)
            step(f"no extras: tests/runtime_deps.py on the installed wheel ({n} ok), commands")
            check_name_clash(venv, wheel, here)
            step("no extras: another 'scheduler' installed over ours, found by eventbus doctor")
            venv = args.all.resolve()
            install(venv, wheel)
            n = check_installed(venv, here, extras=True)
            step(f"[all]: tests/runtime_deps.py --all on the installed wheel ({n} ok), commands")
    except CheckFailed as exc:
        print(f"package: FAIL: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
