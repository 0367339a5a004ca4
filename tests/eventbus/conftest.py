"""Fixtures for the core tests: an isolated registry's bus and its in-memory failure store."""

from __future__ import annotations

import pytest

from eventbus import EventBus, MemoryFailureStore
from tests.eventbus.helpers import Recorder, reg


@pytest.fixture
def store() -> MemoryFailureStore:
    return MemoryFailureStore()


@pytest.fixture
def bus(store: MemoryFailureStore) -> EventBus:
    """A bus on the helpers' registry; not entered (tests that need workers use ``async with``)."""
    return EventBus(reg, store, retry_backoff=0)


@pytest.fixture
def rec() -> Recorder:
    return Recorder()


@pytest.fixture
def virtual(anyio_backend: object) -> bool:
    """Whether the test runs on a virtual clock (trio's ``MockClock``: time jumps)."""
    return isinstance(anyio_backend, tuple)
