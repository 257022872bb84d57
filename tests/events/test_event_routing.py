"""Bus options and skill routing, without a broker (memory bus, SQLite and PostgreSQL).

The same against a real NATS server: ``tests/real/test_events_nats_topology.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from event_catalog import CATALOG, order_model

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError
from pilothouse.events import EventService, MemoryBus, Worker, open_bus
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


@pytest.mark.parametrize(
    ("query", "refusal"),
    [
        ("retention=forever", "retention: must be one of limits, interest, workqueue"),
        ("max_age=0", "max_age: must be a positive number of seconds, not 0.0"),
        ("max_age=a-week", "max_age: must be a positive number of seconds, not 'a-week'"),
        ("maxage=60", "maxage: 'nats://\\*\\*\\*@127.0.0.1:4222\\?maxage=60' has an option"),
    ],
)
def test_a_nats_url_option_that_cannot_be_honoured_is_refused_by_name(
    query: str, refusal: str
) -> None:
    with pytest.raises(InvalidFieldError, match=refusal) as refused:
        open_bus(f"nats://alice:s3cret@127.0.0.1:4222?{query}")
    assert "s3cret" not in str(refused.value)


async def test_a_worker_without_the_skill_neither_runs_nor_answers_it(ph: Pilothouse) -> None:
    bus = MemoryBus()
    # The catalog's lookup_order is an event tool: no worker runs it from the
    # catalog, and none is registered on this worker.
    worker = Worker(ph, bus)
    result = await ph.command.start_and_send("A-17", action="ORDERS")
    await EventService(ph, bus).relay_once()
    async for delivery in bus.consume("agent-commands", worker.group):
        assert await worker.handle(delivery) == "not_served"
        break
    assert bus.messages("agent-events") == []
    assert bus.messages("agent-commands.dlq") == []
    conversation = await ph.query.get_conversation(result.conversation_uuid)
    assert conversation.status is ProcessStatus.WAITING
    passed = worker.metrics.registry.get_sample_value(
        "pilothouse_worker_commands_total",
        {"topic": "agent-commands", "outcome": "not_served"},
    )
    assert passed == 1
