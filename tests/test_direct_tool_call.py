"""``ph.command.call_tool`` on SQLite and PostgreSQL: one catalog tool outside a turn.

Governed by the turn's own code (the authorizer, the tool's policy, its
timeout, the argument check) and recorded as a ``TOOLCALL`` conversation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder
from pilothouse.tools import ToolContext, ToolRegistry
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio


def divide(a: float, b: float) -> dict[str, float]:
    """Divide a by b."""
    return {"quotient": a / b}


async def slow() -> str:
    """Take too long."""
    await anyio.sleep(30)
    return "late"


class Lingering:
    """A tool that runs until it is cancelled, and says which conversation runs it."""

    def __init__(self) -> None:
        self.running = anyio.Event()
        self.conversation = ""

    async def lingering(self, context: ToolContext) -> str:
        """Wait for a long time."""
        self.conversation = context.conversation_uuid
        self.running.set()
        await anyio.sleep(30)
        return "late"


@pytest.fixture
def asked() -> list[tuple[str, dict[str, Any]]]:
    return []


@pytest.fixture
async def lingering() -> Lingering:
    return Lingering()


@pytest.fixture
async def ph(
    settings: Settings, asked: list[tuple[str, dict[str, Any]]], lingering: Lingering
) -> AsyncIterator[Pilothouse]:
    registry = ToolRegistry(SecretResolver(env={}))
    registry.register(divide)
    registry.register(slow)
    registry.register(lingering.lingering)

    def authorizer(name: str, arguments: Mapping[str, Any]) -> bool:
        asked.append((name, dict(arguments)))
        return arguments.get("b") != 0

    async with Pilothouse(settings, tools=registry, authorizer=authorizer) as facade:
        await (
            CatalogBuilder()
            .tool("DIVIDE", name="divide", kind="python", implementation="divide")
            .tool(
                "SLOW", name="slow", kind="python", implementation="slow", settings={"timeout": 0.2}
            )
            .tool(
                "LINGER",
                name="lingering",
                kind="python",
                implementation="lingering",
                settings={"timeout": 60},
            )
            .tool(
                "ASKED",
                name="asked",
                kind="schema",
                input_schema={"type": "object", "properties": {}},
            )
            .import_into(facade)
        )
        yield facade


async def test_the_authorizer_decides_and_each_call_is_a_conversation(
    ph: Pilothouse, asked: list[tuple[str, dict[str, Any]]]
) -> None:
    allowed = await ph.command.call_tool("divide", {"a": 6, "b": 3})
    denied = await ph.command.call_tool("divide", {"a": 6, "b": 0})
    assert (allowed.status, allowed.data) == ("succeeded", {"quotient": 2.0})
    assert (denied.status, denied.error_code) == ("denied", "tool.exec.denied")
    assert asked == [("divide", {"a": 6, "b": 3}), ("divide", {"a": 6, "b": 0})]
    done = await ph.query.get_transcript(allowed.conversation_uuid)
    refused = await ph.query.get_transcript(denied.conversation_uuid)
    assert (done.action_code, done.status, refused.status) == ("TOOLCALL", "CO", "FA")
    assert [c.status for c in refused.tool_calls] == ["denied"]


async def test_the_tools_timeout_applies(ph: Pilothouse) -> None:
    outcome = await ph.command.call_tool("slow")
    assert (outcome.status, outcome.error_code) == ("failed", "tool.exec.timeout")
    transcript = await ph.query.get_transcript(outcome.conversation_uuid)
    assert transcript.status == "FA"
    assert transcript.error_detail is not None and "0.2 s" in transcript.error_detail


async def test_callable_tools_leave_out_what_does_not_run_on_its_own(ph: Pilothouse) -> None:
    tools = {tool.name: tool for tool in await ph.command.callable_tools()}
    assert sorted(tools) == ["divide", "lingering", "slow"]
    assert tools["divide"].input_schema["required"] == ["a", "b"]
    with pytest.raises(InvalidFieldError, match="schema tool"):
        await ph.command.call_tool("asked", {})


async def test_a_cancel_stops_a_running_call_and_it_is_recorded_terminated(
    ph: Pilothouse, lingering: Lingering
) -> None:
    # ph.command.cancel used to end the conversation TE under a tool that
    # ran on and then wrote its result into it.
    outcomes: list[Any] = []

    async def call() -> None:
        outcomes.append(await ph.command.call_tool("lingering", {}))

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(call)
        await lingering.running.wait()
        assert await ph.command.cancel(lingering.conversation) is True
    (outcome,) = outcomes
    assert (outcome.status, outcome.error_code) == ("failed", "tool.exec.cancelled")
    assert outcome.conversation_uuid == lingering.conversation
    transcript = await ph.query.get_transcript(outcome.conversation_uuid)
    assert transcript.status == "TE"
    assert [c.status for c in transcript.tool_calls] == ["requested"]
    assert [event.kind for event in transcript.timeline][-2:] == ["cancel", "status_change"]


async def test_a_caller_that_goes_away_leaves_the_call_recorded_terminated(
    ph: Pilothouse, lingering: Lingering
) -> None:
    # An MCP client's cancelled request, an HTTP client that disconnects: the
    # caller's task is cancelled; the conversation must not stay RU.
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(ph.command.call_tool, "lingering", {})
        await lingering.running.wait()
        tasks.cancel_scope.cancel()
    page = await ph.query.list_conversations(action="TOOLCALL", status=ProcessStatus.RUNNING)
    assert page.total == 0
    transcript = await ph.query.get_transcript(lingering.conversation)
    assert transcript.status == "TE"
