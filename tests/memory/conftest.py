"""Fixtures of the scoped memory tests: one packaged MiniLM for the session."""

from __future__ import annotations

import pytest

from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import ScopedMemory
from pilothouse.store import Database


@pytest.fixture(scope="session")
def minilm() -> LocalMiniLM:
    """One packaged model for the whole session (loading takes about a second)."""
    return LocalMiniLM()


@pytest.fixture
def memory(database: Database, minilm: LocalMiniLM) -> ScopedMemory:
    """Scoped memory over the test's fresh database (SQLite and PostgreSQL)."""
    return ScopedMemory(database, minilm)
