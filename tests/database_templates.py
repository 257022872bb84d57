"""Fresh test databases copied from templates migrated (and seeded) once per session.

Migrating a database runs every Alembic migration, and seeding a catalog
writes dozens of rows: together they were three quarters of the store tests'
time when every test did both. Each test still gets a database of its own,
fresh and isolated, but made by copying a template that was migrated, and
seeded by the same function, once per session:

- SQLite: the template is a file, copied to the test's ``tmp_path``;
- PostgreSQL: the template is a database, cloned with ``CREATE DATABASE ...
  TEMPLATE``. Names are unique per session (other sessions run tests on the
  same server at the same time). While a test runs, the next database of the
  same template is cloned on a thread of its own, and a finished test's
  database is dropped there too, so neither waits on the test's path.

A seed is ``async def seed(database: Database) -> None``; templates are keyed
by the seed function itself, so a seed must be a module-level function.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from pilothouse.store import Database

Seed = Callable[[Database], Awaitable[None]]


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


async def _admin(server: str, *statements: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    connection = await asyncpg.connect(f"{server}/postgres", timeout=5)
    try:
        for statement in statements:
            await connection.execute(statement)
    finally:
        await connection.close()


class PostgresTemplates:
    """PostgreSQL template databases, one per seed, and the fresh clones of them.

    Args:
        server: the server's ``postgresql://user@host:port`` address
            (asyncpg's form, without a database).
        prefix: the start of every database name of this session.
    """

    def __init__(self, server: str, prefix: str) -> None:
        self._server = server
        self._prefix = prefix
        self._templates: dict[Seed | None, str] = {}
        # One thread does every CREATE and DROP, in order: PostgreSQL refuses
        # to clone a template while another clone of it is being made.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pg-templates")
        self._next: tuple[Seed | None, Future[str]] | None = None
        self._lock = threading.Lock()

    def _admin(self, *statements: str) -> None:
        asyncio.run(_admin(self._server, *statements))

    def prepare(self, seed: Seed | None = None) -> None:
        """Build the template of ``seed`` now (it is built on first use otherwise).

        Raises:
            OSError: the server cannot be reached.
        """
        with self._lock:
            self._template(seed)

    def _template(self, seed: Seed | None) -> str:
        name = self._templates.get(seed)
        if name is None:
            name = f"{self._prefix}_tpl{len(self._templates)}"
            self._worker.submit(self._admin, f'CREATE DATABASE "{name}"').result()
            _run(self.url(name), seed)
            self._templates[seed] = name
        return name

    def _clone(self, seed: Seed | None) -> Future[str]:
        template = self._template(seed)
        name = f"{self._prefix}_{uuid.uuid4().hex[:12]}"

        def create() -> str:
            self._admin(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            return name

        return self._worker.submit(create)

    def url(self, name: str) -> str:
        """The SQLAlchemy URL of one of this session's databases."""
        return f"postgresql+asyncpg{self._server.removeprefix('postgresql')}/{name}"

    def _drop(self, name: str) -> None:
        self._worker.submit(self._admin, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextmanager
    def fresh(self, seed: Seed | None = None) -> Iterator[str]:
        """Yield the URL of a new clone of the template of ``seed``; drop it afterwards."""
        with self._lock:
            ahead, self._next = self._next, None
            if ahead is not None and ahead[0] is not seed:
                # Made ahead for another template: not this test's.
                self._drop(ahead[1].result())
                ahead = None
            made = ahead[1] if ahead is not None else self._clone(seed)
            # Clone the next one while this test runs: the tests of a module
            # mostly ask for the same template.
            self._next = (seed, self._clone(seed))
        name = made.result()
        try:
            yield self.url(name)
        finally:
            self._drop(name)

    def close(self) -> None:
        """Drop the clone made ahead and every template, then stop the thread."""
        with self._lock:
            if self._next is not None:
                self._drop(self._next[1].result())
                self._next = None
        self._worker.shutdown(wait=True)
        names = list(self._templates.values())
        if names:
            self._admin(*(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)' for name in names))
