"""``python -m eventbus``: see :mod:`eventbus._cli._main`."""

from __future__ import annotations

from ._cli._main import main

if __name__ == "__main__":  # a guard, so that walking the package does not exit
    raise SystemExit(main())
