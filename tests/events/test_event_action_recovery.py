"""A ``run_action`` turn a dead process left: run again once, then failed with the reason.

SQLite and PostgreSQL. The turn is left as a killed process leaves it: the
reply noted, the conversation ``RU`` with the user's message, owned by a
process that is gone. The real kill -9 runs in
``tests/real/test_events_actions_real.py``.
"""

from __future__ import annotations

import json
import uuid as uuid_module
from collections.abc import AsyncIterator
from contextlib import aclosing

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import update

from pilothouse.api import Pilothouse
from pilothouse.errors import NotFoundError
from pilothouse.events import EventService, MemoryBus, RunAction, encode
from pilothouse.settings import Settings
from pilothouse.store import Conversation, Database
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio

CATALOG = """
providers:
  - code: TEST
    kind: test
models:
  - code: TESTM
    provider: TEST
    model_name: test
configurations:
  - code: DFLT
    max_tokens: 64
actions:
  - code: ECHO
    model: TESTM
    configuration: DFLT
    prompt: Echo the user.
    ask_user: false
"""


class Gate:
    """The model: holds its calls while ``hold`` is set, else answers ``echo``."""

    def __init__(self) -> None:
        self.hold = True
        self.calls = 0

    def model(self) -> FunctionModel:
        async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            del messages, info
            self.calls += 1
            if self.hold:
                await anyio.sleep_forever()
            return ModelResponse(parts=[TextPart("echo")])

        return FunctionModel(answer, model_name="gate")


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
async def ph(database: Database, gate: Gate) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=gate.model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


async def _status(ph: Pilothouse, uuid: str) -> ProcessStatus | None:
    try:
        return (await ph.query.get_conversation(uuid)).status
    except NotFoundError:
        return None  # not started yet


async def _start(ph: Pilothouse, uuid: str) -> None:
    await ph.command.start_and_send("hello", action="ECHO", conversation_uuid=uuid)


async def _left_running(ph: Pilothouse, database: Database, uuid: str) -> None:
    """The turn as a killed process leaves it: ``RU``, its owner gone."""
    async with database.sessions.begin() as session:
        await session.execute(
            update(Conversation)
            .where(Conversation.uuid == uuid)
            .values(status=ProcessStatus.RUNNING, owner="a-process-that-is-gone")
        )


async def _interrupted_action(ph: Pilothouse, database: Database, correlation_id: str) -> str:
    uuid = str(uuid_module.uuid4())
    assert await ph.events.register_reply(correlation_id, uuid, "replies") == "new"
    async with anyio.create_task_group() as group:
        group.start_soon(_start, ph, uuid)
        with anyio.fail_after(10):
            while await _status(ph, uuid) is not ProcessStatus.RUNNING:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    await _left_running(ph, database, uuid)
    return uuid


async def test_an_interrupted_run_action_is_run_again_once_and_its_answer_goes_to_its_reply_to(
    ph: Pilothouse, database: Database, gate: Gate
) -> None:
    uuid = await _interrupted_action(ph, database, "bpmn-1")
    # Stuck (ST) meanwhile is no answer to send.
    assert await ph.events.finished_replies(120.0) == []
    gate.hold = False
    assert await ph.events.recover_actions(120.0) == (1, 0)
    conversation = await ph.query.get_conversation(uuid)
    assert conversation.status is ProcessStatus.COMPLETED
    replies = await ph.events.finished_replies(120.0)
    assert [(r.correlation_id, r.reply_to, r.result.output) for r in replies] == [
        ("bpmn-1", "replies", "echo")
    ]
    await ph.events.replies_sent(["bpmn-1"])
    # Nothing more to do, and the run-again mark is no completion.
    assert await ph.events.recover_actions(120.0) == (0, 0)
    assert (await ph.events.counts())["processed"] == 0


async def test_a_run_action_interrupted_twice_fails_with_the_reason_and_is_not_run_again(
    ph: Pilothouse, database: Database, gate: Gate
) -> None:
    uuid = await _interrupted_action(ph, database, "bpmn-2")
    # Run again, and interrupted again in that run.
    async with anyio.create_task_group() as group:
        group.start_soon(ph.events.recover_actions, 120.0)
        with anyio.fail_after(10):
            while gate.calls < 2:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    await _left_running(ph, database, uuid)
    gate.hold = False
    assert await ph.events.recover_actions(120.0) == (0, 1)
    assert gate.calls == 2
    conversation = await ph.query.get_conversation(uuid)
    assert conversation.status is ProcessStatus.FAILED
    replies = await ph.events.finished_replies(120.0)
    assert [(r.correlation_id, r.result.status) for r in replies] == [
        ("bpmn-2", ProcessStatus.FAILED)
    ]
    assert "stopped twice" in (replies[0].result.error or "")


async def test_a_turn_its_own_process_runs_is_left_alone(
    ph: Pilothouse, database: Database, gate: Gate
) -> None:
    uuid = str(uuid_module.uuid4())
    await ph.events.register_reply("bpmn-3", uuid, "replies")
    async with anyio.create_task_group() as group:
        group.start_soon(_start, ph, uuid)
        with anyio.fail_after(10):
            while await _status(ph, uuid) is not ProcessStatus.RUNNING:
                await anyio.sleep(0.02)
        # Running here: neither marked stuck nor run again, however old.
        assert await ph.events.recover_actions(0.001) == (0, 0)
        assert (await ph.query.get_conversation(uuid)).status is ProcessStatus.RUNNING
        group.cancel_scope.cancel()


async def test_an_action_with_a_memory_is_run_again_by_its_redelivered_command_in_order(
    ph: Pilothouse, database: Database, gate: Gate
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic="actions")
    command = RunAction(
        action="ECHO", input="hello", memory_id="client-7", correlation_id="m-1", reply_to="r"
    )
    await bus.publish("actions", encode(command))
    # The process dies in the action's model call: the command is not acknowledged.
    async with anyio.create_task_group() as group:
        group.start_soon(_handle_one, service, bus)
        with anyio.fail_after(10):
            while gate.calls < 1:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    (conversation,) = (await ph.query.list_conversations()).items
    await _left_running(ph, database, conversation.uuid)
    gate.hold = False
    # The sweep leaves it to its command, which runs it in its memory's order ...
    assert await ph.events.recover_actions(120.0) == (0, 0)
    # ... delivered again: run again there, before the next action of that memory.
    assert await _handle_one(service, bus) == "recovered"
    assert (await ph.query.get_conversation(conversation.uuid)).status is ProcessStatus.COMPLETED
    assert gate.calls == 2
    assert await service.replies_once() == 1
    answers = [json.loads(m) for m in bus.messages("r")]
    assert [(a["correlationId"], a["status"], a["output"]) for a in answers] == [
        ("m-1", "CO", "echo")
    ]


async def _handle_one(service: EventService, bus: MemoryBus) -> str:
    async with aclosing(bus.consume("actions", "actions")) as stream:
        async for delivery in stream:
            return await service.handle_action(delivery)
    raise AssertionError("no run_action delivered")
