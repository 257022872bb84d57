"""SqliteRunner: transactions on the loop; one that finds the lock held waits for it there."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import OperationalError

from pilothouse.store._sqlite import SqliteRunner

pytestmark = pytest.mark.anyio


@pytest.fixture
def path(tmp_path: Path) -> Path:
    file = tmp_path / "runner.db"
    # Closed here, not when the garbage collector gets to it: closing the
    # last connection checkpoints the WAL, which would grow the file in the
    # middle of a test that measures it.
    with closing(sqlite3.connect(file)) as setup, setup:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)")
    return file


def _runner(path: Path, **kwargs: float) -> SqliteRunner:
    engine = create_engine(f"sqlite+pysqlite:///{path}", connect_args={"check_same_thread": False})
    return SqliteRunner(engine, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
async def runner(path: Path) -> AsyncIterator[SqliteRunner]:
    runner = _runner(path)
    yield runner
    await runner.aclose()


@pytest.fixture
def other(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection to the same file, as another process would have."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    yield connection
    connection.close()


def _insert(connection: Connection, value: str) -> int:
    connection.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": value})
    return threading.get_ident()


def _rows(path: Path) -> list[str]:
    with sqlite3.connect(path) as reader:
        return [row[0] for row in reader.execute("SELECT v FROM t ORDER BY id")]


async def test_a_free_database_runs_the_transaction_on_the_loop(
    runner: SqliteRunner, path: Path
) -> None:
    thread = await runner.run(_insert, "a")
    assert thread == threading.get_ident()
    assert _rows(path) == ["a"]


async def test_a_failing_transaction_is_rolled_back(runner: SqliteRunner, path: Path) -> None:
    def fail(connection: Connection) -> None:
        _insert(connection, "lost")
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await runner.run(fail)
    await runner.run(_insert, "kept")
    assert _rows(path) == ["kept"]


async def test_a_held_lock_makes_it_wait_on_the_loop_which_goes_on(
    runner: SqliteRunner, path: Path, other: sqlite3.Connection
) -> None:
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO t (v) VALUES ('first')")
    ticks = 0
    threads: list[int] = []

    async def write() -> None:
        threads.append(await runner.run(_insert, "second"))

    async with anyio.create_task_group() as group:
        group.start_soon(write)
        # The loop is free while the transaction waits for the lock.
        for _ in range(10):
            await anyio.sleep(0.02)
            ticks += 1
        assert threads == []
        other.execute("COMMIT")
    assert ticks == 10
    # It waited on the loop, not on a thread that needs the GIL back from a
    # busy loop for every step (the convoy that held 200 streams' writes for
    # up to a second each).
    assert threads == [threading.get_ident()]
    assert _rows(path) == ["first", "second"]


async def test_transactions_behind_a_waiting_one_keep_their_order(
    runner: SqliteRunner, path: Path, other: sqlite3.Connection
) -> None:
    other.execute("BEGIN IMMEDIATE")
    threads: list[int] = []

    async def write(value: str) -> None:
        threads.append(await runner.run(_insert, value))

    async with anyio.create_task_group() as group:
        for value in ("1", "2", "3"):
            group.start_soon(write, value)
            await anyio.sleep(0.01)
        other.execute("COMMIT")
    assert _rows(path) == ["1", "2", "3"]
    assert threads == [threading.get_ident()] * 3


async def test_a_transaction_arriving_behind_a_waiting_one_does_not_overtake_it(
    runner: SqliteRunner, path: Path, other: sqlite3.Connection
) -> None:
    # The lock comes free between the waiting one's tries: a newcomer that
    # tried at once would commit first.
    other.execute("BEGIN IMMEDIATE")
    async with anyio.create_task_group() as group:
        group.start_soon(runner.run, _insert, "waited")
        await anyio.sleep(0.01)
        other.execute("COMMIT")
        await runner.run(_insert, "newcomer")
    assert _rows(path) == ["waited", "newcomer"]


async def test_transactions_queued_behind_a_held_lock_all_run_in_one_pass_of_the_loop(
    runner: SqliteRunner, path: Path, other: sqlite3.Connection
) -> None:
    # Handed on one by one, each queued transaction waited for a whole pass
    # of the loop; with 200 streams on a busy loop, 90 of them took seconds.
    other.execute("BEGIN IMMEDIATE")
    passes = 0
    seen: list[int] = []

    async def ticker() -> None:
        nonlocal passes
        while True:
            await asyncio.sleep(0)
            passes += 1

    async def write(value: str) -> None:
        await runner.run(_insert, value)
        seen.append(passes)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        async with anyio.create_task_group() as writers:
            for value in ("1", "2", "3", "4", "5"):
                writers.start_soon(write, value)
            await anyio.sleep(0.02)
            other.execute("COMMIT")
        group.cancel_scope.cancel()
    assert _rows(path) == ["1", "2", "3", "4", "5"]
    assert len(set(seen)) == 1, seen


async def test_a_caller_cancelled_while_waiting_runs_nothing(
    runner: SqliteRunner, path: Path, other: sqlite3.Connection
) -> None:
    other.execute("BEGIN IMMEDIATE")
    with anyio.move_on_after(0.05):
        await runner.run(_insert, "abandoned")
    other.execute("COMMIT")
    await runner.run(_insert, "later")
    assert _rows(path) == ["later"]


async def test_a_lock_held_past_the_busy_timeout_fails_the_transaction(
    path: Path, other: sqlite3.Connection
) -> None:
    runner = _runner(path, busy_timeout=0.2)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            await runner.run(_insert, "never")
        other.execute("ROLLBACK")
        # Usable again once the lock is free.
        await runner.run(_insert, "later")
    finally:
        await runner.aclose()
    assert _rows(path) == ["later"]


async def test_checkpoints_run_every_n_commits_off_the_loop(path: Path) -> None:
    # Automatic checkpoints are off on the runner's connection: the rows stay
    # in the WAL until the runner asks for a checkpoint on its thread.
    size = path.stat().st_size
    runner = _runner(path, checkpoint_every=1000)
    try:
        for i in range(20):
            await runner.run(_insert, "x" * 4000 + str(i))
        assert path.stat().st_size == size
    finally:
        await runner.aclose()
    # Closing the last connection checkpointed those; measure again.
    size = path.stat().st_size
    runner = _runner(path, checkpoint_every=5)
    try:
        for i in range(5):
            await runner.run(_insert, "y" * 4000 + str(i))
        for _ in range(100):
            if path.stat().st_size > size:
                break
            await anyio.sleep(0.01)
        assert path.stat().st_size > size
    finally:
        await runner.aclose()
    assert len(_rows(path)) == 25


async def test_a_running_checkpoint_keeps_no_transaction_off_the_loop(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A checkpoint can take long (it syncs the file); it has a connection of
    # its own, so the transactions after it still run on the loop.
    release = threading.Event()
    started = threading.Event()
    checkpoint = SqliteRunner._checkpoint

    def slow_checkpoint(self: SqliteRunner) -> None:
        started.set()
        release.wait(5)
        checkpoint(self)

    monkeypatch.setattr(SqliteRunner, "_checkpoint", slow_checkpoint)
    runner = _runner(path, checkpoint_every=2)
    try:
        await runner.run(_insert, "a")
        await runner.run(_insert, "b")
        assert await anyio.to_thread.run_sync(started.wait, 5)
        threads = [await runner.run(_insert, v) for v in ("c", "d", "e")]
        assert threads == [threading.get_ident()] * 3
    finally:
        release.set()
        await runner.aclose()
    assert _rows(path) == ["a", "b", "c", "d", "e"]


async def test_the_log_is_reused_after_a_checkpoint_that_could_not_copy_it_all(
    path: Path, other: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under steady load transactions commit while a checkpoint copies the
    # log, so its passive pass never ends with the whole log copied, and
    # SQLite only reuses a log that was: it grew for ever. A reader's
    # snapshot holds the passive pass back here the same way; the
    # checkpoint's RESTART then copies the rest, and the next transaction
    # writes the log from its start instead of growing it.
    wal = path.with_name(path.name + "-wal")
    copy_log = SqliteRunner._copy_log

    def held_back(self: SqliteRunner, driver: sqlite3.Connection) -> None:
        copy_log(self, driver)
        other.execute("COMMIT")  # the snapshot ends after the passive pass

    monkeypatch.setattr(SqliteRunner, "_copy_log", held_back)
    runner = _runner(path, checkpoint_every=1000)
    try:
        for i in range(20):
            await runner.run(_insert, "z" * 4000 + str(i))
        other.execute("BEGIN")
        assert other.execute("SELECT count(*) FROM t").fetchone() == (20,)
        await runner.run(_insert, "past the snapshot")
        await anyio.to_thread.run_sync(runner._checkpoint)
        size = wal.stat().st_size
        await runner.run(_insert, "after")
        assert wal.stat().st_size == size
    finally:
        await runner.aclose()
    assert len(_rows(path)) == 22
