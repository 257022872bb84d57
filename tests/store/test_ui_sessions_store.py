"""Browser sessions in the database (``ph.keys``): SQLite and PostgreSQL answer alike."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from sqlalchemy import select

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, UnauthorizedError
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._access import UiSession

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    async with Pilothouse(Settings(database_url=database.url), database=database) as facade:
        await facade.ensure_schema()
        yield facade


async def test_a_session_acts_for_its_key_until_it_ends(ph: Pilothouse, database: Database) -> None:
    key, info = await ph.keys.create(tenant="acme", name="ui", admin=True)
    session_id = await ph.keys.open_session(key, 3600)

    found = await ph.keys.session_key(session_id)
    assert found is not None
    assert (found.prefix, found.tenant, found.scopes) == (info.prefix, "acme", ("admin",))
    # Only the digest is stored: neither the session id nor the key.
    async with database.sessions() as session:
        (row,) = await session.scalars(select(UiSession))
    assert row.digest != session_id and session_id not in row.digest
    assert row.key_prefix == info.prefix

    await ph.keys.end_session(session_id)
    assert await ph.keys.session_key(session_id) is None


async def test_an_expired_or_revoked_or_unknown_session_opens_nothing(
    ph: Pilothouse, database: Database
) -> None:
    key, info = await ph.keys.create(name="ui")
    short = await ph.keys.open_session(key, 0.3)
    long = await ph.keys.open_session(key, 3600)
    assert await ph.keys.session_key("no-such-session") is None
    await anyio.sleep(0.4)
    assert await ph.keys.session_key(short) is None
    assert await ph.keys.session_key(long) is not None
    # The next login deletes expired rows.
    await ph.keys.end_session(await ph.keys.open_session(key, 3600))
    async with database.sessions() as session:
        assert len((await session.scalars(select(UiSession))).all()) == 1
    await ph.keys.revoke(info.prefix)
    assert await ph.keys.session_key(long) is None


async def test_a_session_needs_a_valid_key_and_a_positive_lifetime(ph: Pilothouse) -> None:
    key, info = await ph.keys.create(name="ui")
    with pytest.raises(InvalidFieldError, match="lifetime"):
        await ph.keys.open_session(key, 0)
    with pytest.raises(UnauthorizedError):
        await ph.keys.open_session("ph_nope_nope", 60)
    await ph.keys.revoke(info.prefix)
    with pytest.raises(UnauthorizedError):
        await ph.keys.open_session(key, 60)
