"""``python -m eventbus`` and ``eventbus.cli``: the commands read SQL tables, so the async
tests that set them up run on asyncio only."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"
