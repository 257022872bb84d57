"""Whole transactions on one pysqlite connection, on the event loop when the file is free.

A turn's transactions are short (a few hundred microseconds of SQLite work).
Handing each to a thread and back costs about as much again in wake-ups and
future plumbing, and adds that much latency before the model is called. So a
transaction runs right on the event loop's thread, and when it cannot take
SQLite's write lock at once it waits for it there, without blocking the loop:

- Every transaction starts with ``BEGIN IMMEDIATE``, which takes the write
  lock before any work is done. In WAL mode nothing after it waits for a
  lock, so a transaction that got past its ``BEGIN`` never blocks the loop on
  another connection.
- The ``BEGIN`` does not wait inside SQLite (busy timeout 0). If another
  connection (another process, this process's aiosqlite engine, or the
  checkpoint below) holds the lock, the transaction waits for it on the
  loop, retrying with backoff up to ``busy_timeout`` seconds as SQLite's
  own busy handler would, but sleeping asynchronously, so the loop goes on.
  Transactions that arrive while one waits queue behind it, in order, and
  run together once the lock is free.
- It used to wait on the runner's thread instead, and every later
  transaction followed it there until the queue emptied. Under load that
  was a convoy: each job on the thread needed the GIL back from a busy loop
  (up to a switch interval, 5 ms, every time it let go), so when a
  checkpoint held the lock at the wrong moment about 90 transactions of 200
  streams took 0.1 to 1 s each (``docs/benchmarks.md``).
- The runner's connection is used only on the loop.
- WAL checkpoints run on the thread, on a connection of their own:
  automatic checkpoints are off on the runner's connection (a checkpoint
  copies pages back into the database file and syncs it, milliseconds to
  hundreds of them that the loop must not wait for), and one is asked for
  every ``checkpoint_every`` commits instead. A passive checkpoint takes no
  write lock, so transactions go on beside it, on the loop; a short
  ``RESTART`` after it lets the next transaction reuse the log from its
  start, so the log does not grow under steady load.
"""

from __future__ import annotations

__all__ = ["SqliteRunner"]

import asyncio
import logging
import sqlite3
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import OperationalError

T = TypeVar("T")

logger = logging.getLogger("pilothouse.store")


_RESTART_WAIT_MS = 50
"""How long a checkpoint's RESTART waits, in milliseconds, for the write lock and then for readers.

While it waits for readers it holds the write lock, so this also bounds how
long the turns' transactions wait for it (asleep on the loop, which goes on).
"""


class _Busy(Exception):
    """The write lock is held elsewhere; the transaction waits for it (``error``: SQLite's)."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _locked(error: Exception) -> OperationalError:
    """The error of a transaction that waited past the busy timeout, as SQLAlchemy raises it."""
    if isinstance(error, OperationalError):
        return error
    failure = OperationalError("BEGIN IMMEDIATE", None, error)
    failure.__cause__ = error
    return failure


@dataclass
class _Waiting:
    """A transaction waiting for the write lock."""

    work: Callable[..., Any]
    args: tuple[Any, ...]
    future: asyncio.Future[Any]
    deadline: float
    """``time.monotonic()`` after which it fails with "database is locked"."""


def _is_busy(error: BaseException) -> bool:
    # The driver's error, or SQLAlchemy's wrapping of it.
    orig = error.orig if isinstance(error, OperationalError) else error
    return getattr(orig, "sqlite_errorname", "") in ("SQLITE_BUSY", "SQLITE_LOCKED")


class SqliteRunner:
    """Runs whole transactions on one pysqlite connection (see the module's docstring).

    Args:
        engine: a synchronous pysqlite engine on a file database; its
            connections get ``BEGIN IMMEDIATE`` transactions and no busy
            timeout or automatic checkpoint of their own.
        busy_timeout: seconds a transaction waits for the write lock.
        checkpoint_every: commits between two WAL checkpoints.
    """

    def __init__(
        self, engine: Engine, *, busy_timeout: float = 10.0, checkpoint_every: int = 500
    ) -> None:
        self._engine = engine
        self._busy_timeout = busy_timeout
        self._checkpoint_every = checkpoint_every
        self._executor: ThreadPoolExecutor | None = None
        self._connection: Connection | None = None
        self._checkpointer: Any = None
        """The checkpoints' own DBAPI connection, used on the thread only."""
        self._waiting: deque[_Waiting] = deque()
        """Transactions waiting for the write lock, in arrival order (new ones queue behind)."""
        self._drainer: asyncio.Task[None] | None = None
        self._commits = 0
        event.listen(engine, "connect", _immediate_transactions)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run ``work(connection, *args)`` in one transaction.

        Committed when it returns, rolled back when it raises.
        """
        if not self._waiting:
            try:
                result = self._transaction(work, args)
            except _Busy:
                pass
            else:
                self._committed()
                return result
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._waiting.append(_Waiting(work, args, future, time.monotonic() + self._busy_timeout))
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    def statement_now(self, work: Callable[..., T], *args: Any) -> tuple[bool, T | None]:
        """Run ``work(connection, *args)``, one statement committed on its own, if it can be now.

        No ``BEGIN IMMEDIATE`` nor commit of SQLAlchemy's: the driver runs
        without implicit transactions, so the statement is its own
        transaction (atomic as one). Returns ``(True, result)``; or
        ``(False, None)``, having done nothing, when the write lock is held
        elsewhere (SQLite answers busy at once) or transactions wait for it:
        the caller then queues it with :meth:`run`. Synchronous, so nothing
        can interrupt it.
        """
        if self._waiting:
            return False, None
        connection = self._connection
        if connection is None or connection.closed or connection.invalidated:
            connection = self._connection = self._engine.connect()
        try:
            result = work(connection, *args)
        except (sqlite3.OperationalError, OperationalError) as error:
            if not _is_busy(error):
                raise
            return False, None
        self._committed()
        return True, result

    async def _drain(self) -> None:
        """Run the waiting transactions in order, sleeping while the write lock is held.

        Once the lock is free they all run in this one pass of the loop: woken
        one by one (a lock handed from waiter to waiter), each would wait for a
        whole pass of a busy loop, and 90 of them took seconds.
        """
        pause = 0.001
        waiting = self._waiting
        try:
            while waiting:
                job = waiting[0]
                if job.future.done():  # its caller was cancelled: nothing runs
                    waiting.popleft()
                    continue
                try:
                    result = self._transaction(job.work, job.args)
                except _Busy as busy:
                    if time.monotonic() + pause > job.deadline:
                        waiting.popleft()
                        job.future.set_exception(_locked(busy.error))
                        continue
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, 0.05)
                    continue
                except Exception as error:  # the transaction's own failure, rolled back
                    waiting.popleft()
                    job.future.set_exception(error)
                    continue
                waiting.popleft()
                self._committed()
                job.future.set_result(result)
                pause = 0.001
        finally:
            # Only if this task itself was cancelled or died: nobody may wait forever.
            while waiting:
                job = waiting.popleft()
                if not job.future.done():
                    job.future.set_exception(RuntimeError("the SQLite runner stopped"))

    async def aclose(self) -> None:
        """Close the connections and stop the thread (which may still be checkpointing)."""
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
            self._executor.shutdown(wait=True)
            self._executor = None
        else:
            self._close()
        self._engine.dispose()

    def _transaction(self, work: Callable[..., T], args: tuple[Any, ...]) -> T:
        connection = self._connection
        if connection is None or connection.closed or connection.invalidated:
            connection = self._connection = self._engine.connect()
        transaction = self._begin(connection)
        with transaction:
            return work(connection, *args)

    def _begin(self, connection: Connection) -> Any:
        """``BEGIN IMMEDIATE``; on a busy database, raise :class:`_Busy`.

        SQLAlchemy's ``begin()`` only opens its own bookkeeping here (the
        driver runs without implicit transactions, so pysqlite's ``do_begin``
        sends nothing); the ``BEGIN IMMEDIATE`` goes straight to the driver.
        Sent through ``exec_driver_sql`` (a ``begin`` event) it cost about as
        much CPU as the rest of the transaction's SQLAlchemy plumbing, twice
        per turn; and with no connection event listened to, SQLAlchemy skips
        its event dispatch on commit too.
        """
        transaction = connection.begin()
        try:
            connection.connection.driver_connection.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]
        except (sqlite3.OperationalError, OperationalError) as error:
            # Nothing began in SQLite: the rollback only closes the bookkeeping.
            transaction.rollback()
            if _is_busy(error):
                raise _Busy(error) from error
            # Raised as SQLAlchemy raises a driver's error, as before.
            if isinstance(error, OperationalError):
                raise
            raise OperationalError("BEGIN IMMEDIATE", None, error) from error
        except BaseException:
            transaction.rollback()
            raise
        return transaction

    def _committed(self) -> None:
        self._commits += 1
        if self._commits % self._checkpoint_every == 0:
            self._start_checkpoint()

    def _start_checkpoint(self) -> None:
        """Ask the thread for a passive WAL checkpoint; nothing waits for it."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="pilothouse-sqlite")
        future = self._executor.submit(self._checkpoint)
        loop = asyncio.get_running_loop()
        future.add_done_callback(lambda done: loop.call_soon_threadsafe(self._checkpointed, done))

    def _checkpoint(self) -> None:
        if self._checkpointer is None:
            self._checkpointer = self._engine.raw_connection()
            # The RESTART below waits this long for the loop's transaction
            # in progress (a few hundred microseconds) to end, then for
            # readers of the old log.
            self._checkpointer.driver_connection.execute(f"PRAGMA busy_timeout={_RESTART_WAIT_MS}")
        driver = self._checkpointer.driver_connection
        self._copy_log(driver)
        # Then RESTART, which takes the write lock to copy the few frames
        # committed meanwhile, so that the next transaction writes the log
        # from its start. A passive checkpoint alone never ends with the
        # whole log copied while the loop keeps committing, and SQLite only
        # reuses a log that was copied whole: under steady load it grew
        # without end (36 MB per 500 turns), and every commit paid the file
        # system for new blocks. It waits a little for the lock (the loop's
        # transactions are short) and for readers; when they outlast it, it
        # has done no more than a passive pass, and the next checkpoint
        # tries again. While it holds the lock, the loop's transactions wait
        # for it (asynchronously, in order).
        driver.execute("PRAGMA wal_checkpoint(RESTART)")

    def _copy_log(self, driver: Any) -> None:
        # PASSIVE: copies what no reader still needs, never waits for a lock
        # and takes none that a writer needs.
        driver.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _checkpointed(self, done: Future[None]) -> None:
        error = done.exception()
        if error is not None:
            # The WAL keeps the data; a failed checkpoint only lets it grow
            # until the next one.
            logger.warning("WAL checkpoint failed: %s", error)

    def _close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._checkpointer is not None:
            self._checkpointer.close()
            self._checkpointer = None


def _immediate_transactions(dbapi_connection: Any, _record: Any) -> None:
    # No implicit transactions (BEGIN is ours), no waiting inside SQLite
    # (SqliteRunner waits, asynchronously), no checkpoint at commit (its
    # thread checkpoints). Runs after the shared pragmas, so it overrides their
    # busy timeout on this connection only.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.close()
