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
from pilothouse.tools import ToolRegistry

pytestmark = pytest.mark.anyio


def divide(a: float, b: float) -> dict[str, float]:
    """Divide a by b."""
    return {"quotient": a / b}


async def slow() -> str:
    """Take too long."""
    await anyio.sleep(30)
    return "late"


@pytest.fixture
def asked() -> list[tuple[str, dict[str, Any]]]:
    return []


@pytest.fixture
async def ph(
    settings: Settings, asked: list[tuple[str, dict[str, Any]]]
) -> AsyncIterator[Pilothouse]:
    registry = ToolRegistry(SecretResolver(env={}))
    registry.register(divide)
    registry.register(slow)

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
    assert sorted(tools) == ["divide", "slow"]
    assert tools["divide"].input_schema["required"] == ["a", "b"]
    with pytest.raises(InvalidFieldError, match="schema tool"):
        await ph.command.call_tool("asked", {})
