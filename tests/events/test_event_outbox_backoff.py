"""A command the bus refuses fails alone and backs off (memory bus, SQLite and PostgreSQL).

One tenant's command on a topic the broker will not take (a catalog row
stored before topic names were checked) used to be retried first at every
round: no other tenant's command was published, and the log had a warning
every 0.2 s.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import anyio
import pytest
from event_catalog import CATALOG, order_model
from sqlalchemy import update

from pilothouse.api import Pilothouse
from pilothouse.events import BusError, EventService, MemoryBus, RunAction, encode
from pilothouse.events._backoff import PublishBackoff
from pilothouse.settings import Settings
from pilothouse.store import Database, EventOutbox

pytestmark = pytest.mark.anyio

BAD = "bad..topic"


class RefusingBus(MemoryBus):
    """The memory bus, refusing a topic as a broker refuses a name it does not take."""

    refused = {BAD}

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        if topic in self.refused:
            raise BusError(f"kafka at 127.0.0.1:9092: publish to '{topic}': InvalidTopicError")
        await super().publish(topic, value, key=key)


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        await facade.for_tenant("acme").catalog.import_text(CATALOG)
        yield facade


async def test_a_command_the_bus_refuses_does_not_hold_up_another_tenants(
    ph: Pilothouse, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    # acme's call is older (written first): the head of the outbox.
    bad = await ph.for_tenant("acme").command.start_and_send("A-1", action="ORDERS")
    async with database.sessions.begin() as session:
        await session.execute(update(EventOutbox).values(topic=BAD))
    good = await ph.command.start_and_send("D-1", action="ORDERS")
    bus = RefusingBus()
    service = EventService(
        ph,
        bus,
        tenants=["default", "acme"],
        poll_interval=0.02,
        publish_backoff=0.2,
        publish_backoff_max=0.4,
    )

    with caplog.at_level(logging.WARNING, logger="pilothouse.events"):
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            await anyio.sleep(1.1)
            group.cancel_scope.cancel()

    (published,) = [json.loads(m) for m in bus.messages("agent-commands")]
    assert published["conversationId"] == good.conversation_uuid
    assert (await ph.events.counts())["unsent"] == 1
    assert bad.tool_calls[0].correlation_id not in {published["correlationId"]}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    # About 55 rounds; attempts at 0, 0.2, 0.6 and 1.0 s: one line each.
    assert 2 <= len(warnings) <= 4, warnings
    assert all(f"on '{BAD}' not published" in w for w in warnings), warnings
    assert "next try in 0.2 s" in warnings[0]
    assert "next try in 0.4 s" in warnings[-1]
    assert service.metrics.publish_failures.labels(BAD)._value.get() == len(warnings)


async def test_a_refused_command_is_published_once_the_bus_takes_it(
    ph: Pilothouse, database: Database
) -> None:
    waiting = await ph.command.start_and_send("D-1", action="ORDERS")
    async with database.sessions.begin() as session:
        await session.execute(update(EventOutbox).values(topic=BAD))
    bus = RefusingBus()
    service = EventService(ph, bus, publish_backoff=0.05, publish_backoff_max=0.05)
    assert await service.relay_once() == 0
    # Still backing off: not tried again at once.
    assert await service.relay_once() == 0
    async with database.sessions.begin() as session:
        await session.execute(update(EventOutbox).values(topic="agent-commands"))
    await anyio.sleep(0.06)
    assert await service.relay_once() == 1
    (published,) = [json.loads(m) for m in bus.messages("agent-commands")]
    assert published["conversationId"] == waiting.conversation_uuid
    assert (await ph.events.counts())["unsent"] == 0


def test_the_delay_doubles_per_row_up_to_its_bound() -> None:
    now = [100.0]
    backoff = PublishBackoff(1.0, 5.0, clock=lambda: now[0])
    assert backoff.due(7)
    assert [backoff.failed(7) for _ in range(5)] == [
        (1, 1.0),
        (2, 2.0),
        (3, 4.0),
        (4, 5.0),
        (5, 5.0),
    ]
    assert not backoff.due(7)
    assert backoff.due(8)  # another row is not held by row 7's failures
    now[0] += 5.0
    assert backoff.due(7)
    backoff.keep({8})
    assert len(backoff) == 0
    assert backoff.failed(7) == (1, 1.0)


@pytest.mark.parametrize("argument", ["publish_backoff", "publish_backoff_max"])
async def test_the_backoff_takes_positive_seconds(ph: Pilothouse, argument: str) -> None:
    from pilothouse.errors import InvalidFieldError

    with pytest.raises(InvalidFieldError, match=argument):
        EventService(ph, MemoryBus(), **{argument: 0})  # type: ignore[arg-type]


async def test_a_final_answer_the_bus_refuses_does_not_hold_up_the_next(ph: Pilothouse) -> None:
    bus = RefusingBus()
    bus.refused = set()
    service = EventService(ph, bus, action_topic="actions")
    for correlation_id, reply_to in (("first", "gone-replies"), ("second", "bpmn-replies")):
        action = RunAction(
            action="ORDERS", input="A-1", correlation_id=correlation_id, reply_to=reply_to
        )
        await bus.publish("actions", encode(action))
        async for delivery in bus.consume("actions", "g"):
            assert await service.handle_action(delivery) == "waiting"
            break
    for command in await ph.events.unpublished():
        applied = await ph.events.complete(command.correlation_id, result={"status": "shipped"})
        assert applied.outcome == "applied"
    bus.refused = {"gone-replies"}

    # The first answer's topic is refused: the second is published all the same.
    assert await service.replies_once() == 1
    final = json.loads(bus.messages("bpmn-replies")[-1])
    assert (final["correlationId"], final["final"]) == ("second", True)
    # The refused one stays claimed, for another try after the lease.
    assert await service.replies_once() == 0


class StallingBus(RefusingBus):
    """Refuses the bad topic; on any other, waits until the relay is cancelled (a shutdown)."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = anyio.Event()

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        if topic not in self.refused:
            self.stalled.set()
            await anyio.sleep_forever()
        await super().publish(topic, value, key=key)


async def test_a_round_cancelled_midway_logs_every_failure_it_counted(
    ph: Pilothouse, database: Database, caplog: pytest.LogCaptureFixture
) -> None:
    # acme's command is older: refused first, then the round stalls on the next.
    await ph.for_tenant("acme").command.start_and_send("A-1", action="ORDERS")
    async with database.sessions.begin() as session:
        await session.execute(update(EventOutbox).values(topic=BAD))
    await ph.command.start_and_send("D-1", action="ORDERS")
    bus = StallingBus()
    service = EventService(ph, bus, tenants=["default", "acme"])

    with caplog.at_level(logging.WARNING, logger="pilothouse.events"):
        async with anyio.create_task_group() as group:
            group.start_soon(service.relay_once)
            await bus.stalled.wait()
            group.cancel_scope.cancel()

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert service.metrics.publish_failures.labels(BAD)._value.get() == 1
    assert len(warnings) == 1 and f"on '{BAD}' not published" in warnings[0], warnings
