"""A bus process acts only for the tenants it was started for (memory bus, SQLite and PostgreSQL).

The bus carries no credentials: a message naming a tenant proves nothing.
A ``run_action``, a command or a completion of another tenant is refused
and nothing runs; the real broker and the CLI processes run the same
attacks in ``tests/real/test_events_tenants_real.py``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from event_catalog import CATALOG, order_model

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError
from pilothouse.events import (
    EventService,
    MemoryBus,
    RunAction,
    SkillCompletionEvent,
    SkillInvocationEvent,
    Worker,
    encode,
)
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    """The default tenant's facade; tenant acme has the same catalog in the same database."""
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        await facade.for_tenant("acme").catalog.import_text(CATALOG)
        yield facade


async def _one(bus: MemoryBus, topic: str) -> Any:
    async for delivery in bus.consume(topic, "test"):
        return delivery
    raise AssertionError(f"nothing delivered on {topic}")


async def test_a_run_action_naming_another_tenant_is_answered_fa_and_runs_nothing(
    ph: Pilothouse, caplog: pytest.LogCaptureFixture
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic="actions")
    attack = RunAction(
        action="ORDERS",
        input="A-17",
        correlation_id="evil-1",
        reply_to="attacker-replies",
        tenant="acme",
    )
    await bus.publish("actions", encode(attack))
    with caplog.at_level(logging.WARNING, logger="pilothouse.events"):
        outcome = await service.handle_action(await _one(bus, "actions"))

    assert outcome == "forbidden"
    (raw,) = bus.messages("attacker-replies")
    reply = json.loads(raw)
    assert (reply["correlationId"], reply["status"]) == ("evil-1", "FA")
    assert reply["error"].startswith("forbidden: tenant 'acme' is not served by this process")
    assert "'default'" in reply["error"]
    # acme's action did not run: no conversation, no reply registered.
    acme = ph.for_tenant("acme")
    assert (await acme.query.list_conversations()).items == []
    assert await ph.events.counts() == {
        "commands": 0,
        "unsent": 0,
        "processed": 0,
        "duplicates": 0,
        "waiting": 0,
    }
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "refused run_action evil-1" in warning.getMessage()
    assert "'acme'" in warning.getMessage()


async def test_a_run_action_of_a_tenant_the_service_was_started_for_runs(ph: Pilothouse) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic="actions", tenants=["default", "acme"])
    command = RunAction(
        action="ORDERS", input="A-17", correlation_id="ok-1", reply_to="replies", tenant="acme"
    )
    await bus.publish("actions", encode(command))

    assert await service.handle_action(await _one(bus, "actions")) == "waiting"
    (reply,) = [json.loads(m) for m in bus.messages("replies")]
    assert reply["status"] == "WA"
    (conversation,) = (await ph.for_tenant("acme").query.list_conversations()).items
    assert conversation.uuid == reply["conversationUuid"]


async def test_the_worker_refuses_a_command_of_another_tenant_and_runs_nothing(
    ph: Pilothouse, caplog: pytest.LogCaptureFixture
) -> None:
    bus = MemoryBus()
    worker = Worker(ph, bus)
    # acme's catalog tool `add` (kind python): what the attacker names.
    attack = SkillInvocationEvent(
        correlation_id="evil-2",
        skill_name="add",
        arguments={"a": 2, "b": 40},
        reply_to="attacker-replies",
        tenant="acme",
    )
    await bus.publish("agent-commands", encode(attack))
    with caplog.at_level(logging.WARNING, logger="pilothouse.events.worker"):
        outcome = await worker.handle(await _one(bus, "agent-commands"))

    assert outcome == "forbidden"
    (raw,) = bus.messages("attacker-replies")
    completion = json.loads(raw)
    assert completion["correlationId"] == "evil-2"
    assert completion.get("result") is None
    assert completion["error"] == (
        "tool.exec.error: forbidden: tenant 'acme' is not served by this worker "
        "(it serves 'default')"
    )
    # Refused, not failed: nothing went to the dead-letter topic.
    assert bus.messages("agent-commands.dlq") == []
    assert any("refused command evil-2 (add)" in r.getMessage() for r in caplog.records)


async def test_the_worker_runs_a_command_of_its_own_tenant(ph: Pilothouse) -> None:
    bus = MemoryBus()
    worker = Worker(ph, bus, tenants=["acme"])
    command = SkillInvocationEvent(
        correlation_id="ok-2",
        skill_name="add",
        arguments={"a": 2, "b": 40},
        reply_to="replies",
        tenant="acme",
    )
    await bus.publish("agent-commands", encode(command))

    assert await worker.handle(await _one(bus, "agent-commands")) == "ok"
    (raw,) = bus.messages("replies")
    assert json.loads(raw)["result"] == 42


async def test_a_completion_of_another_tenant_s_call_is_not_applied_nor_recorded(
    ph: Pilothouse, caplog: pytest.LogCaptureFixture
) -> None:
    acme = ph.for_tenant("acme")
    waiting = await acme.command.start_and_send("A-17", action="ORDERS")
    correlation_id = waiting.tool_calls[0].correlation_id
    assert correlation_id is not None
    bus = MemoryBus()
    service = EventService(ph, bus)
    forged = SkillCompletionEvent(correlation_id=correlation_id, result={"status": "forged"})
    await bus.publish("agent-events", encode(forged))
    with caplog.at_level(logging.WARNING, logger="pilothouse.events"):
        outcome = await service.handle_completion(await _one(bus, "agent-events"))

    assert outcome == "refused"
    conversation = await acme.query.get_conversation(waiting.conversation_uuid)
    assert conversation.status is ProcessStatus.WAITING
    # Nothing recorded: acme's own process still applies the real completion.
    assert (await ph.events.counts())["processed"] == 0
    applied = await acme.events.complete(correlation_id, result={"status": "shipped"})
    assert applied.outcome == "applied"
    assert any("refused completion" in r.getMessage() for r in caplog.records)


async def test_the_relay_and_the_sweep_leave_other_tenants_rows_alone(ph: Pilothouse) -> None:
    await ph.for_tenant("acme").catalog.import_text(
        CATALOG.replace("timeout: 120", "timeout: 0.05")
    )
    acme = await ph.for_tenant("acme").command.start_and_send("A-1", action="ORDERS")
    mine = await ph.command.start_and_send("D-1", action="ORDERS")
    bus = MemoryBus()
    service = EventService(ph, bus)

    assert await service.relay_once() == 1
    (published,) = [json.loads(m) for m in bus.messages("agent-commands")]
    assert published["conversationId"] == mine.conversation_uuid
    await anyio.sleep(0.1)
    assert await ph.events.expire(tenants=service.tenants) == 0
    still = await ph.for_tenant("acme").query.get_conversation(acme.conversation_uuid)
    assert still.status is ProcessStatus.WAITING
    # acme's own process relays and ends its call.
    assert await EventService(ph.for_tenant("acme"), bus).relay_once() == 1
    assert await ph.events.expire(tenants=["acme"]) == 1


@pytest.mark.parametrize("tenants", [[], "acme", [""]])
async def test_tenants_must_name_at_least_one_tenant(tenants: Any, ph: Pilothouse) -> None:
    with pytest.raises(InvalidFieldError, match="tenants"):
        EventService(ph, MemoryBus(), tenants=tenants)
    with pytest.raises(InvalidFieldError, match="tenants"):
        Worker(ph, MemoryBus(), tenants=tenants)
