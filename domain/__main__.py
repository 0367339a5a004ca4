"""``python -m domain``: the demo (see :mod:`domain.demo`)."""

from __future__ import annotations

import sys

from .demo import main

sys.exit(main())
