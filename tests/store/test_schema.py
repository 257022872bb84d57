from __future__ import annotations

import pytest
from sqlalchemy import select

from pilothouse.catalog._enums import ProviderKind
from pilothouse.catalog._models import Provider
from pilothouse.store import Database, head_revision

pytestmark = pytest.mark.anyio


async def test_schema_is_created_at_head_on_first_use(database: Database) -> None:
    assert await database.schema_is_current()
    assert head_revision() == "0001"


async def test_ensure_schema_twice_is_a_no_op(database: Database) -> None:
    await database.ensure_schema()
    assert await database.schema_is_current()


async def test_catalog_row_versions_increment(database: Database) -> None:
    async with database.sessions() as session:
        provider = Provider(code="OPENAI", kind=ProviderKind.OPENAI)
        session.add(provider)
        await session.commit()
        assert provider.version == 1
        provider.name = "OpenAI"
        await session.commit()
        assert provider.version == 2
        stored = (await session.execute(select(Provider.kind))).scalar_one()
        assert stored is ProviderKind.OPENAI
