"""Whole transactions on one pysqlite connection, on the event loop when the file is free.

A turn's transactions are short (a few hundred microseconds of SQLite work).
Handing each to a thread and back costs about as much again in wake-ups and
future plumbing, and adds that much latency before the model is called. So a
transaction runs right on the event loop's thread when it can take SQLite's
write lock at once, and on a thread of its own when it cannot:

- Every transaction starts with ``BEGIN IMMEDIATE``, which takes the write
  lock before any work is done. In WAL mode nothing after it waits for a
  lock, so a transaction that got past its ``BEGIN`` never blocks the loop on
  another connection.
- On the loop the ``BEGIN`` does not wait (busy timeout 0). If another
  connection (another process, or this process's aiosqlite engine) holds
  the lock, the transaction goes to the thread, which waits for the lock
  up to ``busy_timeout`` seconds, retrying with backoff, as SQLite's own
  busy handler would.
- The connection is never used by two threads at once: while a job is
  queued or running on the thread, later transactions queue behind it
  there, which also keeps them in order.
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
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, event
from sqlalchemy.exc import OperationalError

T = TypeVar("T")

logger = logging.getLogger("pilothouse.store")


_RESTART_WAIT_MS = 50
"""How long a checkpoint's RESTART waits, in milliseconds, for the write lock and then for readers.

While it waits for readers it holds the write lock, so this also bounds how
long the turns' transactions wait for it (on the thread, the loop never does).
"""


class _Busy(Exception):
    """The write lock is held elsewhere; the transaction goes to the thread."""


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
        self._in_thread = 0
        """Transactions queued or running on the thread; the loop keeps off meanwhile."""
        self._commits = 0
        event.listen(engine, "connect", _immediate_transactions)

    async def run(self, work: Callable[..., T], *args: Any) -> T:
        """Run ``work(connection, *args)`` in one transaction.

        Committed when it returns, rolled back when it raises.
        """
        if self._in_thread == 0:
            try:
                result = self._transaction(work, args, wait=False)
            except _Busy:
                pass
            else:
                self._committed()
                return result
        result = await self._on_thread(partial(self._transaction, work, args, wait=True))
        self._committed()
        return result

    async def aclose(self) -> None:
        """Close the connection (on the thread that may still use it) and stop the thread."""
        if self._executor is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, self._close)
            self._executor.shutdown(wait=True)
            self._executor = None
        else:
            self._close()
        self._engine.dispose()

    def _transaction(self, work: Callable[..., T], args: tuple[Any, ...], *, wait: bool) -> T:
        connection = self._connection
        if connection is None or connection.closed or connection.invalidated:
            connection = self._connection = self._engine.connect()
        transaction = self._begin(connection, wait)
        with transaction:
            return work(connection, *args)

    def _begin(self, connection: Connection, wait: bool) -> Any:
        """``BEGIN IMMEDIATE``; on a busy database, raise :class:`_Busy` or wait with backoff.

        SQLAlchemy's ``begin()`` only opens its own bookkeeping here (the
        driver runs without implicit transactions, so pysqlite's ``do_begin``
        sends nothing); the ``BEGIN IMMEDIATE`` goes straight to the driver.
        Sent through ``exec_driver_sql`` (a ``begin`` event) it cost about as
        much CPU as the rest of the transaction's SQLAlchemy plumbing, twice
        per turn; and with no connection event listened to, SQLAlchemy skips
        its event dispatch on commit too.
        """
        deadline = time.monotonic() + self._busy_timeout
        pause = 0.001
        while True:
            transaction = connection.begin()
            try:
                connection.connection.driver_connection.execute("BEGIN IMMEDIATE")  # type: ignore[union-attr]
            except (sqlite3.OperationalError, OperationalError) as error:
                # Nothing began in SQLite: the rollback only closes the bookkeeping.
                transaction.rollback()
                if not wait and _is_busy(error):
                    raise _Busy from error
                if not _is_busy(error) or time.monotonic() + pause > deadline:
                    # Raised as SQLAlchemy raises a driver's error, as before.
                    if isinstance(error, OperationalError):
                        raise
                    raise OperationalError("BEGIN IMMEDIATE", None, error) from error
            except BaseException:
                transaction.rollback()
                raise
            else:
                return transaction
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    async def _on_thread(self, job: Callable[[], T]) -> T:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="pilothouse-sqlite")
        self._in_thread += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, job)
        finally:
            self._in_thread -= 1

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
        # tries again. While it holds the lock, the loop's transactions go
        # to the thread, which runs them after it.
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
    # (SqliteRunner waits, on its thread), no checkpoint at commit (on the
    # thread too). Runs after the shared pragmas, so it overrides their
    # busy timeout on this connection only.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA busy_timeout=0")
    cursor.execute("PRAGMA wal_autocheckpoint=0")
    cursor.close()
