"""Import everything with the runtime dependencies only, and run each CLI's ``--help``.

``make test`` runs this in a venv of its own built with ``pip install .`` (no extras), so an
import that only the ``dev`` or ``bench`` extra satisfies (trio used to bring ``sniffio``)
fails here instead of on a user's machine. Run from the repository root, the working tree's
code shadows the installed copy: the venv supplies the dependencies, the tree the code.

``python -m tests.runtime_deps``: prints one line per module and CLI; exit 1 on any failure.
Modules that need an extra are listed in ``NEEDS_EXTRA`` with the reason; they are skipped
and said to be.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import traceback

PACKAGES = ("eventbus", "scheduler", "domain")

#: module (or package, with its modules) -> why it is not importable with the runtime
#: dependencies alone
NEEDS_EXTRA = {
    "domain.console": "needs the 'web' extra (starlette, jinja2)",
    "domain.web": "needs the 'web' extra (starlette, uvicorn)",
    "domain._web_admin": "needs the 'web' extra (starlette): domain.web's admin routes",
    "domain._web_http": "needs the 'web' extra (starlette): domain.web's HTTP conventions",
    "eventbus.console": "needs the 'web' extra (starlette, jinja2, itsdangerous)",
    "scheduler.console": "needs the 'web' extra (starlette, jinja2)",
    "eventbus.interop.opentelemetry": "needs the 'otel' extra (opentelemetry-api)",
    "eventbus.pytest_plugin": "needs pytest; pytest loads it through its entry point",
}

CLIS = (("eventbus",), ("scheduler",), ("domain",))


def modules() -> list[str]:
    """Every module of the three packages except ``__main__`` (run through the CLIs), found
    from the source tree without importing anything."""
    names = []
    for package in PACKAGES:
        names.append(package)
        found = pkgutil.walk_packages([package], prefix=f"{package}.")
        names.extend(i.name for i in found if i.name.rsplit(".", 1)[-1] != "__main__")
    return sorted(names)


def needs_extra(name: str) -> str | None:
    """Why *name* needs an extra, if it does (its own entry or its package's)."""
    for key, why in NEEDS_EXTRA.items():
        if name == key or name.startswith(f"{key}."):
            return why
    return None


def main() -> int:
    failures = 0
    for name in modules():
        if (why := needs_extra(name)) is not None:
            print(f"skip    {name}: {why}")
            continue
        try:
            importlib.import_module(name)
        except Exception:
            failures += 1
            print(f"FAIL    import {name}\n{traceback.format_exc()}")
        else:
            print(f"ok      import {name}")
    for cli in CLIS:
        command = [sys.executable, "-m", *cli, "--help"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60)
        shown = " ".join(["python", *command[1:]])
        if done.returncode != 0 or not done.stdout.startswith("usage:"):
            failures += 1
            print(f"FAIL    {shown} (exit {done.returncode})\n{done.stdout}{done.stderr}")
        else:
            print(f"ok      {shown}")
    if failures:
        print(f"{failures} failure(s) with the runtime dependencies only (pip install .)")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
