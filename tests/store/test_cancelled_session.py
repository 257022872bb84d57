"""A session cancelled while aiosqlite runs its statement leaves nothing pending.

SQLAlchemy closes such a connection under ``asyncio.shield``; with anyio's
cancellation (delivered again at every await) that close used to be left
waiting for a thread already stopped, and the event loop could never shut
down: an event worker stopped mid-turn hung at exit.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import anyio
import pytest
from sqlalchemy import text

from pilothouse.store import Database

# Before the fix the loop hung; fail in seconds, not at the suite's limit.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30)]

# Long enough that the cancellation always lands while SQLite is counting.
SLOW = (
    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000000)"
    " SELECT count(*) FROM n"
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_cancelled_query_s_connection_is_closed_to_the_end(tmp_path: Path) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'slow.db'}")
    before = asyncio.all_tasks()
    threads_before = set(threading.enumerate())
    for _ in range(3):
        with anyio.move_on_after(0.05) as scope:
            async with database.sessions() as session:
                await session.execute(text(SLOW))
        assert scope.cancelled_caught
    await database.dispose()
    this = asyncio.current_task()
    pending = [t for t in asyncio.all_tasks() - before if t is not this]
    with anyio.move_on_after(5):
        while pending:
            await anyio.sleep(0.05)
            pending = [t for t in asyncio.all_tasks() - before if t is not this and not t.done()]
    assert not pending, f"left pending after dispose: {pending}"
    # aiosqlite's worker threads end once their queues are done; one still
    # running when the loop closes would report into the next test.
    with anyio.move_on_after(10):
        while _sqlite_workers(threads_before):
            await anyio.sleep(0.05)
    assert not _sqlite_workers(threads_before)


def _sqlite_workers(before: set[threading.Thread]) -> list[threading.Thread]:
    """aiosqlite's worker threads started since ``before`` and still running."""
    return [
        t
        for t in set(threading.enumerate()) - before
        if "_connection_worker_thread" in t.name and t.is_alive()
    ]
