"""Transactions on asyncpg: the driver's own, with no pre-ping round trips.

``Database.transaction`` begins asyncpg's transaction itself and checks
pooled connections at checkout without a ping (``store/_engine.py``); these
tests kill connections under it and check what the pool hands out after.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import Connection, event, select, text

from pilothouse.catalog._enums import MessageRole
from pilothouse.store import Database, Message, NewMessage, SqlTurnStore, TurnBatch
from pilothouse.store._engine import _refuse_closed

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(postgres_database_url: str) -> str:
    """Only PostgreSQL: these tests are about asyncpg."""
    return postgres_database_url


@pytest.fixture
async def pg(database: Database) -> AsyncIterator[Database]:
    """The session's PostgreSQL database with one pooled connection, migrated and empty."""
    one = Database(database.url, pool_size=1, max_overflow=0)
    yield one
    await one.dispose()


def _backend(connection: Connection) -> int:
    return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())


async def _kill(database: Database, pid: int) -> None:
    import asyncpg

    # A connection of its own: a pooled one could be the one killed.
    other = await asyncpg.connect(database.url.replace("postgresql+asyncpg", "postgresql"))
    try:
        await other.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        await other.close()
    # Let the event loop read the server's goodbye on the killed connection.
    await asyncio.sleep(0.1)


async def _killed_pool(database_url: str) -> tuple[Database, int]:
    """A database whose one pooled connection the server has just killed."""
    database = Database(database_url, pool_size=1, max_overflow=1)
    pid = await database.transaction(_backend)
    await _kill(database, pid)
    return database, pid


async def test_a_connection_the_server_closed_is_replaced_at_checkout(pg: Database) -> None:
    database, pid = await _killed_pool(pg.url)
    try:
        assert await database.transaction(_backend) != pid
    finally:
        await database.dispose()


async def test_a_begin_on_a_dead_connection_is_retried_once(pg: Database) -> None:
    # Without the checkout check, the BEGIN finds the connection dead: nothing
    # has run yet, so the transaction runs again on a new connection.
    database, pid = await _killed_pool(pg.url)
    event.remove(database.engine.sync_engine, "checkout", _refuse_closed)
    calls: list[int] = []

    def work(connection: Connection) -> int:
        calls.append(1)
        return _backend(connection)

    try:
        assert await database.transaction(work) != pid
        assert calls == [1]
    finally:
        await database.dispose()


async def test_a_failing_transaction_rolls_back_and_its_connection_is_reused(
    pg: Database,
) -> None:
    writer = SqlTurnStore(pg)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)

    def fail(connection: Connection) -> None:
        connection.execute(
            text("UPDATE conversation SET response_model = 'lost' WHERE id = :id"),
            {"id": handle.conversation_id},
        )
        raise ValueError("boom")

    pid = await pg.transaction(_backend)
    with pytest.raises(ValueError, match="boom"):
        await pg.transaction(fail)
    assert await pg.transaction(_backend) == pid
    async with pg.engine.connect() as connection:
        model = await connection.scalar(
            text("SELECT response_model FROM conversation WHERE id = :id"),
            {"id": handle.conversation_id},
        )
    assert model is None


async def test_a_database_error_propagates_and_nothing_is_written(pg: Database) -> None:
    writer = SqlTurnStore(pg)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    handle = await writer.begin_turn("default", conversation.uuid)
    await writer.write(handle, TurnBatch(messages=[NewMessage(MessageRole.USER, "one")]))
    handle.next_message -= 1  # the sequence just written, again
    with pytest.raises(Exception, match="unique|duplicate"):
        await writer.write(handle, TurnBatch(messages=[NewMessage(MessageRole.USER, "two")]))
    async with pg.sessions() as session:
        contents = list(await session.scalars(select(Message.content)))
    assert contents == ["one"]


async def test_sessions_after_a_transaction_are_transactional_again(pg: Database) -> None:
    # Database.transaction puts its connection in AUTOCOMMIT; the pool must
    # reset it, or a session's rollback would keep what it wrote.
    writer = SqlTurnStore(pg)
    conversation = await writer.create("default", action_code="A", agent_code=None)
    # One pooled connection: this is the one the transaction just used.
    async with pg.engine.connect() as connection:
        await connection.execute(
            text("UPDATE conversation SET response_model = 'kept?' WHERE id = :id"),
            {"id": conversation.id},
        )
        await connection.rollback()
        model = await connection.scalar(
            text("SELECT response_model FROM conversation WHERE id = :id"), {"id": conversation.id}
        )
    assert model is None


async def test_transactions_beyond_the_pool_wait_their_turn_instead_of_timing_out(
    database: Database,
) -> None:
    # Two connections, a 0.2 s pool timeout, and twenty transactions of 50 ms
    # at once: a second of work, which would time out waiting in the pool.
    small = Database(database.url, pool_size=1, max_overflow=1, pool_timeout=0.2)

    def slow(connection: Connection) -> int:
        connection.execute(text("SELECT pg_sleep(0.05)"))
        return 1

    async def read() -> int:
        # Meanwhile a session gets the connection kept free for sessions.
        await asyncio.sleep(0.1)
        async with small.sessions() as session:
            return int((await session.execute(text("SELECT 2"))).scalar_one())

    try:
        *results, read_back = await asyncio.gather(
            *(small.transaction(slow) for _ in range(20)), read()
        )
    finally:
        await small.dispose()
    assert results == [1] * 20
    assert read_back == 2
