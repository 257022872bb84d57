"""Database engines, sessions and schema upgrades.

One :class:`Database` per deployment owns the async engine and its session
factory; every command asks it to make sure the schema is at the newest
migration before first use, so a fresh machine needs no setup step.

On a file SQLite database a turn's transactions and the schema check run on
:class:`~pilothouse.store._sqlite.SqliteRunner`, so the async engine and the
session factory are made on first use: ``sqlalchemy.ext.asyncio`` imports
SQLAlchemy's ORM, which such a start does not otherwise load.
"""

from __future__ import annotations

__all__ = ["Database", "KeyLengthRefusal", "current_revision", "head_revision"]

import time
from collections.abc import Callable, Generator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

import anyio
from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.util import await_, greenlet_spawn

from pilothouse.errors import (
    CatalogValidationError,
    InvalidFieldError,
    InvalidStateError,
    ServiceUnavailableError,
    ValidationIssue,
)
from pilothouse.settings import database_driver_url
from pilothouse.store._aiosqlite import close_to_the_end
from pilothouse.store._sqlite import SqliteRunner
from pilothouse.store.migrations import HEAD_REVISION

if TYPE_CHECKING:
    from alembic.config import Config
    from sqlalchemy.engine import ExceptionContext
    from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

P = ParamSpec("P")
T = TypeVar("T")


# Alembic is imported only to migrate (or to report the head): importing it
# loads its DDL support for every dialect, a large share of a cold start.
def _alembic_config() -> Config:
    from importlib.resources import files

    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(files("pilothouse.store") / "migrations"))
    return config


def head_revision() -> str:
    """Return the newest migration revision shipped with this package."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(_alembic_config()).get_current_head()
    if head is None:  # pragma: no cover - the package always ships migrations
        raise RuntimeError("pilothouse ships no migrations")
    return head


def current_revision(connection: Connection) -> str | None:
    """Return the migration revision a database is at, or None when empty."""
    # Alembic's version table, read directly: what MigrationContext does,
    # without importing Alembic on every start.
    if not inspect(connection).has_table("alembic_version"):
        return None
    versions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(versions) > 1:
        raise RuntimeError(f"the database is at several revisions: {', '.join(versions)}")
    return versions[0] if versions else None


def _tables(connection: Connection) -> list[str]:
    """The tables of the connection's default schema, sorted."""
    return sorted(inspect(connection).get_table_names())


def _schema_state(connection: Connection) -> tuple[str | None, list[str]]:
    """The revision the database is at and, when it has none, its tables."""
    current = current_revision(connection)
    return current, _tables(connection) if current is None else []


READING_COMMANDS = "`pilothouse catalog export` and `pilothouse conversations list`"
"""The commands that work on a database the key-length migration refused."""


class KeyLengthRefusal(CatalogValidationError):
    """The schema upgrade stopped: catalog keys are longer than the ERP's lengths.

    Every other migration is done, so the database can still be read:
    :meth:`Database.ensure_readable` passes, and the CLI's reading commands
    (``catalog export``, ``conversations list``) work on it.

    Args:
        issues: one per key too long (tenant, length, limit).
        readable_at: the revision the database stays at.
    """

    def __init__(self, issues: list[ValidationIssue], *, readable_at: str) -> None:
        super().__init__(issues)
        self.readable_at = readable_at


KEY_LENGTH_REVISION = "0019"
"""The migration that shortens the catalog's key columns.

Later ones add only what the reading commands do not read, so a database
this step refused stays readable without them.
"""


def _before_key_lengths(connection: Connection) -> str | None:
    """The revision before the key-length step, when the database is behind it; else None."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(_alembic_config())
    step = script.get_revision(KEY_LENGTH_REVISION)
    before = step.down_revision
    if not isinstance(before, str):
        return None
    current = current_revision(connection)
    behind = {r.revision for r in script.iterate_revisions(before, "base")}
    return before if current != before and (current is None or current in behind) else None


def _upgrade(connection: Connection, target: str = "head") -> None:
    from alembic import command

    config = _alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, target)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Foreign keys are off by default in SQLite; WAL lets readers run beside
    # the writer; the busy timeout makes concurrent writers wait, not fail.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def _refuse_closed(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
    # asyncpg marks a connection closed as soon as the event loop reads the
    # server's goodbye (a restart, an idle timeout, pg_terminate_backend).
    # Raised at checkout, DisconnectionError makes the pool replace it: the
    # pre-ping's guard without its round trips.
    if record.driver_connection.is_closed():
        raise DisconnectionError("the pooled asyncpg connection is closed")


_NO_CONNECTION_STATES = frozenset({"53300", "53400", "57P03"})
"""PostgreSQL's too_many_connections, configuration_limit_exceeded and
cannot_connect_now: the server refused a new connection for now."""


def _ended_by_server(error: BaseException | None) -> bool:
    """Whether asyncpg failed because the server ended the connection under it.

    PostgreSQL says goodbye to a connection it ends (``pg_terminate_backend``,
    a restart, an idle timeout) with an error message, then closes the socket.
    asyncpg reads the two in different event loop turns: a statement sent in
    between finds the protocol still consuming that unsolicited error and
    fails with an ``InternalClientError`` while ``is_closed()`` is still
    false, so the checkout guard sees no dead connection.
    """
    from asyncpg.exceptions import (  # pyright: ignore[reportMissingTypeStubs]
        InternalClientError,
    )

    # The exact class: its subclasses (a stale type cache, an unsupported
    # feature) are no goodbye.
    cause = error.__cause__ if error is not None else None
    return type(error) is InternalClientError or type(cause) is InternalClientError


def _out_of_connections(context: ExceptionContext) -> None:
    # A server at max_connections (or a role at its CONNECTION LIMIT) is the
    # deployment's capacity, not a defect of the request: the client is told
    # to come back (503 with Retry-After on HTTP) instead of an internal
    # error. Raised here, it replaces SQLAlchemy's wrapper on every face.
    original = context.original_exception
    state = getattr(original, "sqlstate", None)
    if state in _NO_CONNECTION_STATES:
        raise ServiceUnavailableError(
            "the database has no free connection for now (PostgreSQL refused a new one: "
            f"SQLSTATE {state}); retry in a moment. Operators: keep the pools' sum below "
            "max_connections (docs/operations.md, connection budget per replica)",
            retry_after=1,
        ) from original
    if _ended_by_server(original):
        # The pooled connection is gone: marked a disconnect, the pool
        # replaces it (and the rest of its generation, which a restart ended
        # too), so the request's retry gets a live one.
        context.is_disconnect = True
        raise ServiceUnavailableError(
            "the database ended this connection (a restart, or an operator ended the "
            "session); retry in a moment",
            retry_after=1,
        ) from original


def _asyncpg_transaction(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction of asyncpg's own, inside SQLAlchemy's greenlet.

    The connection's adapter is in autocommit mode (see :func:`_autocommit`),
    so it sends no BEGIN or COMMIT of its own, and the transaction is the
    driver's: begun here, before ``work`` runs, which lets ``_fastsql`` send
    statements straight to the driver, and lets a connection found dead by
    the BEGIN be replaced once. Nothing has run yet then, so the retry is
    safe; a connection that dies later fails the transaction, as it would
    have with the pool's pre-ping (which also cost three round trips per
    checkout: BEGIN, a ping, ROLLBACK). :func:`_autocommit` clears the
    adapter's flag before the connection goes back, so sessions get a
    transactional connection.
    """
    for attempt in range(2):
        with engine.connect() as connection, _autocommit(connection):
            driver: Any = connection.connection.driver_connection
            try:
                transaction = driver.transaction()
                await_(transaction.start())
            except Exception:
                # A failed BEGIN leaves asyncpg's transaction bookkeeping
                # behind: the connection is not reused either way.
                connection.invalidate()
                if attempt or not driver.is_closed():
                    raise
                continue
            try:
                result = work(connection)
            except BaseException:
                _roll_back(connection, driver, transaction)
                raise
            try:
                await_(transaction.commit())
            except BaseException:
                # Committed or not, the server has ended the transaction; a
                # connection that failed its COMMIT is not worth keeping.
                connection.invalidate()
                raise
            return result
    raise AssertionError("unreachable: the second attempt returns or raises")


@contextmanager
def _autocommit(connection: Connection) -> Generator[None]:
    """Switch the connection's asyncpg adapter to autocommit for this checkout, then back.

    Set on the adapter itself, not through ``execution_options``: SQLAlchemy's
    isolation-level bookkeeping (set at checkout, reset and rolled back at
    check-in) cost more CPU than the statement it ran. Sessions check the
    connection out again with the adapter's own isolation level, so they
    still get a transaction.
    """
    adapted: Any = connection.connection.dbapi_connection
    adapted.autocommit = True
    try:
        yield
    finally:
        adapted.autocommit = False


def _asyncpg_autocommit(engine: Engine, work: Callable[[Connection], T]) -> T:
    """Run ``work`` on a connection in autocommit mode, inside SQLAlchemy's greenlet.

    No BEGIN or COMMIT is sent: each statement of ``work`` commits on its
    own, which ``_fastsql`` sends straight to the driver as well (see
    :meth:`Database.statements`).
    """
    with engine.connect() as connection, _autocommit(connection):
        return work(connection)


def _roll_back(connection: Connection, driver: Any, transaction: Any) -> None:
    """Roll back after ``work`` failed; a dead or failing connection is discarded."""
    if driver.is_closed():
        connection.invalidate()
        return
    try:
        await_(transaction.rollback())
    except BaseException:
        connection.invalidate()
        raise


class Database:
    """The engine and session factory of one database.

    Args:
        url: a SQLAlchemy async URL (``sqlite+aiosqlite:///path.db`` or
            ``postgresql+asyncpg://user@host:port/db``).
        echo: log every SQL statement (for debugging).
        pool_size: connections kept open (server databases only).
        max_overflow: further connections opened under load.
        pool_timeout: seconds to wait for a free connection.
    """

    def __init__(
        self,
        url: str,
        *,
        echo: bool = False,
        pool_size: int = 20,
        max_overflow: int = 40,
        pool_timeout: float = 30.0,
    ) -> None:
        try:
            url = database_driver_url(url)
        except ValueError as exc:
            raise InvalidFieldError("database_url", str(exc)) from exc
        parsed = make_url(url)
        self.url = url
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        kwargs: dict[str, Any] = {"echo": echo}
        if self.is_sqlite:
            database = parsed.database
            if database and database != ":memory:":
                Path(database).parent.mkdir(parents=True, exist_ok=True)
            # Sessions end their transactions themselves (commit, or rollback
            # on close); the pool's extra rollback on every return was a
            # second hand-off to the SQLite thread per checkout.
            kwargs["pool_reset_on_return"] = None
        else:
            # asyncpg connections are checked at checkout without a round
            # trip (see _refuse_closed); other drivers are pinged.
            kwargs["pool_pre_ping"] = parsed.get_driver_name() != "asyncpg"
            kwargs["pool_size"] = pool_size
            kwargs["max_overflow"] = max_overflow
            kwargs["pool_timeout"] = pool_timeout
        self._engine_options = kwargs
        self._engine: AsyncEngine | None = None
        self._sessions: async_sessionmaker[AsyncSession] | None = None
        # A file SQLite database also gets a plain pysqlite connection that
        # runs whole transactions, on the event loop when the file is free
        # (see SqliteRunner).
        self._sqlite: SqliteRunner | None = None
        # Transactions queue here, in order and without a timeout, rather
        # than in the pool: under overload (a thousand turns starting at once
        # on a saturated event loop) a checkout can wait longer than the
        # pool's timeout and the turn fails, though nothing is wrong. A tenth
        # of the connections stays free for sessions (catalog reads, queries),
        # which still wait in the pool.
        total = pool_size + max_overflow
        self._slots = anyio.Semaphore(max(1, total - max(1, total // 10)))
        self.on_wait: Callable[[float], None] | None = None
        """Told how long a transaction waited for a slot (only waits that blocked)."""
        self._asyncpg = parsed.get_driver_name() == "asyncpg"
        if self.is_sqlite and parsed.database and parsed.database != ":memory:":
            sync_engine = create_engine(
                parsed.set(drivername="sqlite+pysqlite"),
                # The event loop's thread and the runner's own both use
                # the connection, never at once (see SqliteRunner).
                connect_args={"check_same_thread": False},
            )
            event.listen(sync_engine, "connect", _sqlite_pragmas)
            self._sqlite = SqliteRunner(sync_engine)
        else:
            # Every transaction runs on the async engine: made now, so a
            # wrong URL or a missing driver fails at open, as it always has.
            self._make_engine()
        self._schema_ready = False
        self._refusal: KeyLengthRefusal | None = None
        self._schema_lock = anyio.Lock()

    @property
    def engine(self) -> AsyncEngine:
        """The async engine; on a file SQLite database made on first use."""
        if self._engine is None:
            return self._make_engine()
        return self._engine

    @property
    def sessions(self) -> async_sessionmaker[AsyncSession]:
        """The factory of ORM sessions on :attr:`engine`, made on first use."""
        if self._sessions is None:
            from sqlalchemy.ext.asyncio import async_sessionmaker

            self._sessions = async_sessionmaker(self.engine, expire_on_commit=False)
        return self._sessions

    def _make_engine(self) -> AsyncEngine:
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(self.url, **self._engine_options)
        if self._asyncpg:
            event.listen(engine.sync_engine, "checkout", _refuse_closed)
            event.listen(engine.sync_engine, "handle_error", _out_of_connections)
        if self.is_sqlite:
            event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
            if engine.dialect.driver == "aiosqlite":
                close_to_the_end(engine.sync_engine.dialect)
        self._engine = engine
        return engine

    async def ensure_schema(self) -> None:
        """Create or upgrade the schema to the newest migration, once per process.

        Raises:
            InvalidStateError: the database holds other tables and no
                pilothouse schema (``upgrade()`` creates it there on purpose).
            KeyLengthRefusal: catalog keys are longer than the ERP's lengths;
                the database can still be read (:meth:`ensure_readable`).
        """
        if self._schema_ready:
            return
        async with self._schema_lock:
            if self._schema_ready:
                return
            current, others = await self._schema_state()
            if others:
                # Not pilothouse's database (a mistyped URL, an application's
                # own): creating ~50 tables in it unasked is not ours to do.
                shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
                tables = "table" if len(others) == 1 else "tables"
                raise InvalidStateError(
                    f"the database holds {len(others)} {tables} ({shown}) and no pilothouse "
                    "schema; pilothouse creates its tables by itself only in an empty "
                    "database: point it at a database of its own, or add its tables beside "
                    "these on purpose with `pilothouse db upgrade` (ph.upgrade_schema())"
                )
            if self._refusal is not None:
                raise self._refusal
            # The known head, not Alembic's: Alembic runs only when they differ.
            if current != HEAD_REVISION:
                await self.upgrade()
            self._schema_ready = True

    async def _schema_state(self) -> tuple[str | None, list[str]]:
        """The stored revision and, when there is none, the tables found instead."""
        if self._sqlite is not None:
            # On the runner, as a turn's transactions: the async engine (and
            # the ORM with it) is not needed to learn that the schema is current.
            return await self._sqlite.run(_schema_state)
        async with self.engine.connect() as connection:
            return await connection.run_sync(_schema_state)

    async def upgrade(self) -> tuple[str | None, str]:
        """Run every pending migration.

        Returns:
            The revision before and after the upgrade.

        Raises:
            KeyLengthRefusal: catalog keys are too long for the last
                migration; the ones before it are done (and committed), so
                the database can be read (:meth:`ensure_readable`).
        """
        async with self.engine.begin() as connection:
            before = await connection.run_sync(current_revision)
            # First every migration before the key-length step, committed on
            # its own: a refusal there must not undo them (nor can it on
            # SQLite, whose driver commits DDL as it goes).
            first = await connection.run_sync(_before_key_lengths)
            if first is not None:
                await connection.run_sync(_upgrade, first)
        try:
            async with self.engine.begin() as connection:
                await connection.run_sync(_upgrade)
        except KeyLengthRefusal as refusal:
            self._refusal = refusal
            raise
        self._schema_ready = True
        self._refusal = None
        return before, head_revision()

    async def ensure_readable(self) -> None:
        """Like :meth:`ensure_schema`, and pass on a database the key-length step refused.

        Such a database has every other migration, so what reads it works:
        exporting the catalog, listing conversations. Writes still call
        :meth:`ensure_schema`, which raises the refusal.
        """
        if self._refusal is not None:
            return
        try:
            await self.ensure_schema()
        except KeyLengthRefusal:
            return

    async def schema_is_current(self) -> bool:
        """Tell whether the database is at the newest migration."""
        async with self.engine.connect() as connection:
            current = await connection.run_sync(current_revision)
        return current == head_revision()

    async def transaction(
        self, work: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``work(connection, ...)`` in one transaction and return its result.

        ``work`` is plain synchronous SQLAlchemy code, committed when it
        returns and rolled back when it raises. On a file SQLite database it
        runs with the pysqlite driver on the event loop's thread when it can
        take the write lock at once, otherwise on a thread of its own (see
        :class:`~pilothouse.store._sqlite.SqliteRunner`); aiosqlite hands
        every cursor call to its thread and back (about forty hand-offs per
        turn, measured). With
        asyncpg it runs whole in one greenlet of SQLAlchemy's bridge, in a
        transaction of the driver's own (see :func:`_asyncpg_transaction`):
        one greenlet switch per statement instead of a greenlet per step
        (checkout, begin, work, commit, close). On other databases it runs
        through ``AsyncConnection.run_sync``.

        The transaction is not interrupted by cancellation: it is short, and
        a caller that is cancelled must still learn whether it committed
        (a turn must not leave its conversation taken). The cancellation
        takes effect when it has ended.
        """
        return await self._run(work, args, kwargs, single=False)

    @property
    def is_asyncpg(self) -> bool:
        """Whether the database is PostgreSQL through asyncpg (where :meth:`statements` pays)."""
        return self._asyncpg

    async def statements(
        self, work: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``work(connection, ...)`` whose statements each commit on their own.

        For work that reads and then writes in one statement: on asyncpg it
        runs with no BEGIN nor COMMIT (two round trips fewer than
        :meth:`transaction`), each statement atomic by itself, the reads at
        READ COMMITTED as in a transaction. On every other database it is
        :meth:`transaction`. Like it, it is not interrupted by cancellation.
        """
        return await self._run(work, args, kwargs, single=self._asyncpg)

    async def statement(
        self, work: Callable[Concatenate[Connection, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """Run ``work(connection, ...)``, which sends exactly one statement, committed on its own.

        For a single conditional write, or a single read, on a hot path: on
        a file SQLite database and on asyncpg no transaction is begun around
        it (the statement is atomic by itself, and a read on SQLite takes no
        write lock), which saves the transaction's bookkeeping and, on
        PostgreSQL, two round trips. ``work`` must send
        one statement only: on SQLite a busy database runs it again. On
        other databases it is :meth:`transaction`.
        """
        if self._sqlite is not None:
            # Run at once when it can (nothing to shield: it does not wait).
            done, value = self._sqlite.statement_now(partial(work, **kwargs), *args)
            if done:
                return cast("T", value)
        return await self._run(work, args, kwargs, single=self._asyncpg)

    async def _run(
        self,
        work: Callable[..., T],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        *,
        single: bool,
    ) -> T:
        # A list, because a shielded scope could in principle swallow an
        # exception and pyright cannot see that this one never does.
        result: list[T] = []
        if self._sqlite is not None:
            with anyio.CancelScope(shield=True):
                result.append(await self._sqlite.run(partial(work, **kwargs), *args))
            return result[0]
        # Waiting for a slot may be cancelled: nothing has started then.
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            # Only a wait that blocked is timed: the common case costs nothing.
            waited = time.perf_counter()
            await self._slots.acquire()
            if self.on_wait is not None:
                self.on_wait(time.perf_counter() - waited)
        try:
            with anyio.CancelScope(shield=True):
                if self._asyncpg:

                    def call(connection: Connection) -> T:
                        return work(connection, *args, **kwargs)

                    runner = _asyncpg_autocommit if single else _asyncpg_transaction
                    result.append(await greenlet_spawn(runner, self.engine.sync_engine, call))
                else:
                    async with self.engine.begin() as connection:
                        result.append(await connection.run_sync(work, *args, **kwargs))
        finally:
            self._slots.release()
        return result[0]

    async def dispose(self) -> None:
        """Close every pooled connection."""
        if self._engine is not None:
            await self._engine.dispose()
        if self._sqlite is not None:
            await self._sqlite.aclose()
