"""Fresh test databases from templates migrated (and seeded) once per session.

Migrating a database runs every Alembic migration, and seeding a catalog
writes dozens of rows: together they were three quarters of the store tests'
time when every test did both. Each test still starts from a database that
holds exactly the migrated schema and the seeded rows, and nothing another
test wrote, but the migration and the seeding run once per session:

- SQLite: the template is a file, copied to the test's ``tmp_path``;
- PostgreSQL: one database per seed and session (unique names: other
  sessions run tests on the same server at the same time), reset to its
  seeded rows before each test (see :class:`PostgresDatabases` for why not a
  clone per test).

A seed is ``async def seed(database: Database) -> None``; templates are keyed
by the seed itself, so a seed is a module-level function, or a callable
compared by value (a frozen dataclass).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from pilothouse.store import Database

Seed = Callable[[Database], Awaitable[None]]
T = TypeVar("T")

PG_SERVER = os.environ.get("PILOTHOUSE_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432")
"""The suite's PostgreSQL server, as a SQLAlchemy URL without a database."""


@asynccontextmanager
async def scratch_postgres_database(prefix: str) -> AsyncIterator[str]:
    """A new, empty database on the suite's PostgreSQL, dropped afterwards; yields its URL.

    For a test that needs what no template gives: no schema at all, or an old
    one. The test is skipped when the server cannot be reached.
    """
    import asyncpg

    server = PG_SERVER.replace("postgresql+asyncpg://", "postgresql://")
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    try:
        admin = await asyncpg.connect(f"{server}/postgres")
    except OSError as exc:
        # As tests/conftest.py does for every PostgreSQL test: skipped, not failed,
        # on a machine without the server; it runs wherever PILOTHOUSE_TEST_PG answers.
        pytest.skip(f"PostgreSQL at {PG_SERVER} unreachable ({exc}): runs once it answers")
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        yield f"{PG_SERVER}/{name}"
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def _build(url: str, seed: Seed | None) -> None:
    database = Database(url)
    try:
        await database.ensure_schema()
        if seed is not None:
            await seed(database)
    finally:
        await database.dispose()


def _run(url: str, seed: Seed | None) -> None:
    # A thread of its own: the caller may be inside a running event loop.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(asyncio.run, _build(url, seed)).result()


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite+aiosqlite:///{path}"


def migrated_sqlite(path: Path) -> str:
    """Migrate a new SQLite file at ``path`` in this process; return its URL.

    For tests whose subject runs in a child process that must not pay (or
    import) the migration itself.
    """
    url = sqlite_url(path)
    _run(url, None)
    return url


class SqliteTemplates:
    """SQLite template files, one per seed, built on first use.

    Args:
        folder: where the templates are kept for the session.
    """

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._files: dict[Seed | None, Path] = {}
        self._lock = threading.Lock()

    def _template(self, seed: Seed | None) -> Path:
        with self._lock:
            path = self._files.get(seed)
            if path is None:
                path = self._folder / f"template-{len(self._files)}.db"
                _run(sqlite_url(path), seed)
                # Closing the last connection checkpoints the write-ahead log
                # into the file: the file alone is the whole database.
                assert not path.with_name(path.name + "-wal").exists(), path
                self._files[seed] = path
            return path

    def fresh(self, path: Path, seed: Seed | None = None) -> str:
        """Copy the template of ``seed`` to ``path`` and return its URL."""
        shutil.copyfile(self._template(seed), path)
        return sqlite_url(path)


def _tables() -> list[str]:
    """Every table of the schema, parents before children."""
    # Importing one model of each module registers its tables on Base (as the
    # migrations' env.py does); pilothouse.catalog and the API keys load lazily.
    from pilothouse.catalog._models import Action
    from pilothouse.knowledge._tables import KnowledgeChunk
    from pilothouse.memory._tables import MemoryRecord
    from pilothouse.store import Base
    from pilothouse.store._access import ApiKey

    tables = Base.metadata.sorted_tables
    assert Action.__table__ in tables and ApiKey.__table__ in tables
    assert KnowledgeChunk.__table__ in tables and MemoryRecord.__table__ in tables
    return [table.name for table in tables]


_SNAPSHOT = "pilothouse_test_seed"
"""The schema, inside each session database, holding its seeded rows."""


class PostgresDatabases:
    """PostgreSQL databases, one per seed, reset to their seeded state for each test.

    A database per seed is made once per session (``CREATE DATABASE``, then
    migrated and seeded), and its seeded rows copied into a schema of its own.
    Each test then finds it as it was seeded: every row deleted, the seeded
    ones copied back, every sequence set back (one transaction, a few
    milliseconds). A fresh ``CREATE DATABASE ... TEMPLATE`` clone per test
    was measured here first and dropped: on the shared server each clone
    writes the template's 8 MB to the write-ahead log, and each ``DROP
    DATABASE`` waits for a checkpoint (86 s of drops for 35 tests under load).

    Args:
        server: the server's ``postgresql://user@host:port`` address
            (asyncpg's form, without a database).
        prefix: the start of every database name of this session, unique to it.
    """

    def __init__(self, server: str, prefix: str) -> None:
        self._server = server
        self._prefix = prefix
        self._names: dict[Seed | None, str] = {}
        self._resets: dict[str, str] = {}
        # One event loop on a thread of its own runs every admin statement,
        # whether or not the caller is inside a loop, on connections it keeps.
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._connections: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _call(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    async def _connection(self, database: str) -> Any:
        import asyncpg

        connection = self._connections.get(database)
        if connection is None or connection.is_closed():
            connection = await asyncpg.connect(f"{self._server}/{database}", timeout=5)
            self._connections[database] = connection
        return connection

    async def _execute(self, database: str, statement: str) -> None:
        await (await self._connection(database)).execute(statement)

    def url(self, name: str) -> str:
        """The SQLAlchemy URL of one of this session's databases."""
        return f"postgresql+asyncpg{self._server.removeprefix('postgresql')}/{name}"

    def prepare(self, seed: Seed | None = None) -> str:
        """Make the database of ``seed`` now (it is made on first use otherwise).

        Raises:
            OSError: the server cannot be reached.
        """
        with self._lock:
            name = self._names.get(seed)
            if name is None:
                name = f"{self._prefix}_{len(self._names)}"
                self._call(self._execute("postgres", f'CREATE DATABASE "{name}"'))
                self._names[seed] = name
                _run(self.url(name), seed)
                self._resets[name] = self._call(self._snapshot(name))
            return name

    async def _snapshot(self, name: str) -> str:
        """Copy the seeded rows aside; return the statements that restore them."""
        connection = await self._connection(name)
        tables = _tables()
        seeded: list[str] = []
        for table in tables:
            if await connection.fetchval(f'SELECT EXISTS (SELECT FROM "{table}")'):
                seeded.append(table)
        sequences = await connection.fetch(
            "SELECT sequencename, last_value FROM pg_sequences WHERE schemaname = 'public'"
        )
        await connection.execute(
            f'CREATE SCHEMA "{_SNAPSHOT}";'
            + "".join(f'CREATE TABLE "{_SNAPSHOT}"."{t}" AS TABLE "{t}";' for t in seeded)
        )
        restore = [f'DELETE FROM "{table}";' for table in reversed(tables)]
        restore += [f'INSERT INTO "{t}" SELECT * FROM "{_SNAPSHOT}"."{t}";' for t in seeded]
        restore += [
            f"SELECT setval('\"{row['sequencename']}\"', {row['last_value'] or 1}, "
            f"{'true' if row['last_value'] is not None else 'false'});"
            for row in sequences
        ]
        return "BEGIN;" + "".join(restore) + "COMMIT;"

    def fresh(self, seed: Seed | None = None) -> str:
        """Reset the database of ``seed`` to its seeded state and return its URL."""
        name = self.prepare(seed)
        self._call(self._execute(name, self._resets[name]))
        return self.url(name)

    def close(self) -> None:
        """Drop this session's databases and stop the thread."""

        async def drop() -> None:
            admin = self._connections.pop("postgres", None)
            for connection in self._connections.values():
                await connection.close()
            self._connections.clear()
            if admin is None:
                return  # the server was never reached: nothing was made
            for name in self._names.values():
                await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()

        try:
            self._call(drop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
