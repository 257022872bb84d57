from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text

from database_templates import scratch_postgres_database
from pilothouse.catalog._enums import ProviderKind
from pilothouse.catalog._models import Provider
from pilothouse.errors import InvalidStateError
from pilothouse.store import Database, head_revision
from pilothouse.store.migrations import HEAD_REVISION

pytestmark = pytest.mark.anyio


async def test_schema_is_created_at_head_on_first_use(database: Database) -> None:
    assert await database.schema_is_current()
    assert head_revision() == "0020"


def test_known_head_revision_is_alembics_head() -> None:
    # ensure_schema trusts HEAD_REVISION to skip Alembic; a new migration must bump it.
    assert HEAD_REVISION == head_revision()


async def test_ensure_schema_twice_is_a_no_op(database: Database) -> None:
    await database.ensure_schema()
    assert await database.schema_is_current()


async def test_catalog_row_versions_increment(database: Database) -> None:
    async with database.sessions() as session:
        provider = Provider(code="OAI", kind=ProviderKind.OPENAI)
        session.add(provider)
        await session.commit()
        assert provider.version == 1
        provider.name = "OpenAI"
        await session.commit()
        assert provider.version == 2
        stored = (await session.execute(select(Provider.kind))).scalar_one()
        assert stored is ProviderKind.OPENAI


async def test_upgrade_from_0001_gives_question_timeout_a_server_default(tmp_path: object) -> None:
    from pathlib import Path

    from alembic import command
    from sqlalchemy import text

    from pilothouse.store._engine import _alembic_config

    assert isinstance(tmp_path, Path)
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}")

    def to_0001(connection: object) -> None:
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")

    async with db.engine.begin() as connection:
        await connection.run_sync(to_0001)
        await connection.execute(
            text(
                "INSERT INTO provider (code, name, kind, headers, settings, tenant, active, "
                "version, updated_at, updated_by) VALUES ('P', '', 'test', '{}', '{}', "
                "'default', 1, 1, '2026-01-01 00:00:00', 'x')"
            )
        )
    await db.ensure_schema()
    async with db.engine.connect() as connection:
        columns = (await connection.execute(text("PRAGMA table_info(action)"))).all()
    default = next(row for row in columns if row[1] == "question_timeout")[4]
    assert default == "'300'"
    assert await db.schema_is_current()
    await db.dispose()


async def _refuses_a_foreign_database_then_upgrades_on_purpose(url: str, create: str) -> None:
    db = Database(url)
    try:
        async with db.engine.begin() as connection:
            await connection.execute(text(create))
        with pytest.raises(InvalidStateError) as refused:
            await db.ensure_schema()
        assert str(refused.value).startswith(
            "the database holds 1 table (invoices) and no pilothouse schema"
        )
        assert "pilothouse db upgrade" in str(refused.value)
        async with db.engine.connect() as connection:
            assert await connection.run_sync(lambda c: inspect(c).get_table_names()) == [
                "invoices"
            ]  # nothing created
        # Asked for, the tables go in beside the application's.
        await db.upgrade()
        await db.ensure_schema()
        assert await db.schema_is_current()
    finally:
        await db.dispose()


async def test_a_database_with_other_tables_is_not_migrated_unasked_sqlite(
    tmp_path: Path,
) -> None:
    # Before: any command pointed at an application's database created
    # pilothouse's ~50 tables in it.
    url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    await _refuses_a_foreign_database_then_upgrades_on_purpose(
        url, "CREATE TABLE invoices (id INTEGER PRIMARY KEY)"
    )


@pytest.mark.postgres
async def test_a_database_with_other_tables_is_not_migrated_unasked_postgres() -> None:
    async with scratch_postgres_database("pilothouse_foreign") as url:
        await _refuses_a_foreign_database_then_upgrades_on_purpose(
            url, "CREATE TABLE invoices (id integer PRIMARY KEY)"
        )
