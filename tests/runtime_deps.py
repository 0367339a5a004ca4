"""Import everything with the runtime dependencies only, and run each CLI's ``--help``.

``make test`` runs this in two venvs of their own, neither with the dev tools: one built with
``pip install .`` (no extras) and one with ``pip install '.[all]'``, so that an import only
the ``dev`` or ``bench`` extra satisfies (trio used to bring ``sniffio``) fails here instead of
on a user's machine.

* No extras (default): every core module imports; each optional module fails with the one
  line of :class:`eventbus.extras.MissingExtraError` naming its extra, and so does each name
  ``scheduler`` exports lazily; ``--help`` and ``--version`` of both CLIs and ``doctor`` work.
  The venv must really lack every extra's libraries (else the check proves nothing).
  ``domain``, the reference application, needs ``eventbus[all]``: skipped here.
* ``--all``: every module imports, ``domain``'s too when it is there, and each CLI's
  ``--help`` works; ``pytest`` must be absent (a dev tool).

Run as ``python -m tests.runtime_deps`` from the repository root, the working tree's code
shadows the installed copy: the venv supplies the dependencies, the tree the code.
``tests/packaging.py`` runs it as ``python -I tests/runtime_deps.py`` from another directory
instead, to check the installed wheel. Prints one line per check; exit 1 on any failure.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
import traceback
from pathlib import Path

#: optional public module -> the extras its guard names
OPTIONAL = {
    "eventbus.backends.redis": ("redis",),
    "eventbus.backends.sql": ("sql",),
    "eventbus.console": ("web",),
    "eventbus.durable": ("redis", "sql"),
    "eventbus.interop.opentelemetry": ("otel",),
    "eventbus.interop.pyee": ("pyee",),
    "scheduler.backends.redis": ("redis",),
    "scheduler.backends.sql": ("sql",),
    "scheduler.console": ("web",),
}

#: names ``scheduler`` exports lazily -> the module that defines them
LAZY = {
    "RedisLock": "scheduler.backends.redis",
    "SqlJobStore": "scheduler.backends.sql",
    "SqlRunStore": "scheduler.backends.sql",
}

#: module prefix -> why it is not checked in that mode
SKIPPED = {"eventbus.pytest_plugin": "needs pytest; pytest loads it through its entry point"}
SKIPPED_WITHOUT_EXTRAS = {
    "domain": "the reference application needs eventbus[all]",
    "eventbus.backends._sql_": "a private part of eventbus.backends.sql (its guard speaks)",
    "eventbus.interop._pyee_": "a private part of eventbus.interop.pyee (its guard speaks)",
    "scheduler.backends._sql_": "a private part of scheduler.backends.sql (its guard speaks)",
}

CLIS = ("eventbus", "scheduler", "domain")


class Report:
    """One line per check, and the count of failures."""

    def __init__(self) -> None:
        self.failures = 0

    def ok(self, what: str) -> None:
        print(f"ok      {what}")

    def skip(self, what: str, why: str) -> None:
        print(f"skip    {what}: {why}")

    def fail(self, what: str, detail: str = "") -> None:
        self.failures += 1
        print(f"FAIL    {what}" + (f"\n{detail}" if detail else ""))


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def modules(package: str) -> list[str]:
    """The package and its modules except ``__main__`` (run through the CLIs), found where
    Python finds the package (the tree, or site-packages), without importing them."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations is not None, package
    found = pkgutil.walk_packages(spec.submodule_search_locations, prefix=f"{package}.")
    names = [i.name for i in found if i.name.rsplit(".", 1)[-1] != "__main__"]
    return sorted([package, *names])


def why_skipped(name: str, *, extras: bool) -> str | None:
    table = SKIPPED if extras else {**SKIPPED, **SKIPPED_WITHOUT_EXTRAS}
    for prefix, why in table.items():
        if name == prefix or name.startswith(prefix if prefix.endswith("_") else f"{prefix}."):
            return why
    return None


def optional_extras(name: str) -> tuple[str, ...] | None:
    """The extras *name* needs: its own entry, or its optional package's."""
    for key, extras in OPTIONAL.items():
        if name == key or name.startswith(f"{key}."):
            return extras
    return None


def expect_one_line(report: Report, what: str, statement: str, extras: tuple[str, ...]) -> None:
    """*statement* must raise the guard's error for *extras*, with nothing chained to it."""
    from eventbus.extras import MissingExtraError, missing_extra

    module = LAZY.get(what, what)
    expected = missing_extra(module, *extras)
    try:
        exec(statement, {})
    except MissingExtraError as exc:
        chained = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
        if expected is None or str(exc) != str(expected) or chained is not None:
            report.fail(f"{statement}: {exc}", f"expected: {expected}; chained: {chained!r}")
        else:
            report.ok(f"{statement} fails: {exc}")
    except Exception:
        report.fail(f"{statement}: not the one line naming the extra", traceback.format_exc())
    else:
        report.fail(f"{statement} imported without the {'/'.join(extras)} extra")


def check_venv(report: Report, *, extras: bool) -> None:
    """The venv is the one the mode says: with every extra and no dev tools, or no extra."""
    from eventbus.extras import EXTRAS

    libraries = sorted({m for names in EXTRAS.values() for m in names})
    present = [m for m in libraries if installed(m)]
    if extras:
        if missing := sorted(set(libraries) - set(present)):
            report.fail(f"the venv lacks {missing}: not a venv with eventbus[all]")
        if installed("pytest"):
            report.fail("the venv has pytest (a dev tool): dev-only imports would pass")
    elif present:
        report.fail(f"the venv has {present}: not a venv without extras")
    report.ok(f"venv {sys.prefix}: {'every extra, no dev tools' if extras else 'no extras'}")


def check_imports(report: Report, *, extras: bool) -> None:
    for package in CLIS:
        if not installed(package):
            report.skip(package, "not installed (domain runs from the repository)")
            continue
        if (why := why_skipped(package, extras=extras)) is not None:
            report.skip(package, why)
            continue
        for name in modules(package):
            if (why := why_skipped(name, extras=extras)) is not None:
                report.skip(name, why)
            elif not extras and (needs := optional_extras(name)) is not None:
                if name in OPTIONAL:
                    expect_one_line(report, name, f"import {name}", needs)
                else:
                    report.skip(name, f"a private part of an optional package ({needs})")
            else:
                try:
                    importlib.import_module(name)
                except Exception:
                    report.fail(f"import {name}", traceback.format_exc())
                else:
                    report.ok(f"import {name}")
    if not extras:
        for name, module in LAZY.items():
            expect_one_line(report, name, f"from scheduler import {name}", OPTIONAL[module])


def run(report: Report, *args: str, expect: str, code: int = 0) -> str:
    """Run ``python -m ARGS`` (isolated when this interpreter is); its output must start
    with *expect*."""
    flags = ["-I"] if sys.flags.isolated else []
    done = subprocess.run(
        [sys.executable, *flags, "-m", *args], capture_output=True, text=True, timeout=60
    )
    shown = " ".join(["python", "-m", *args])
    if done.returncode != code or not done.stdout.startswith(expect):
        report.fail(f"{shown} (exit {done.returncode})", done.stdout + done.stderr)
    else:
        report.ok(shown)
    return done.stdout


def check_clis(report: Report, *, extras: bool) -> None:
    import eventbus

    for cli in CLIS:
        if why_skipped(cli, extras=extras) is not None or not installed(cli):
            report.skip(f"python -m {cli}", "not checked in this venv (see above)")
            continue
        run(report, cli, "--help", expect="usage:")
        if cli != "domain":
            run(report, cli, "--version", expect=f"python -m {cli} {eventbus.__version__}\n")
    out = run(report, "eventbus", "doctor", expect=f"eventbus {eventbus.__version__} in ")
    said = [line.endswith(" installed") for line in out.splitlines() if line.startswith("extra ")]
    if not said or set(said) != {extras}:
        report.fail(f"doctor should say every extra is {'' if extras else 'not '}installed", out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all", action="store_true", help="a venv with eventbus[all]")
    extras = parser.parse_args(argv).all
    report = Report()
    import eventbus

    report.ok(f"eventbus {eventbus.__version__} from {Path(eventbus.__file__).parent}")
    check_venv(report, extras=extras)
    check_imports(report, extras=extras)
    check_clis(report, extras=extras)
    if report.failures:
        mode = "eventbus[all] without the dev tools" if extras else "no extras"
        print(f"{report.failures} failure(s) with the runtime dependencies only ({mode})")
    return 1 if report.failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
