"""``ph.mcp_service()`` in process, on SQLite and PostgreSQL: the SDK server over the facade.

The official client talks to the service's server in memory (no transport,
no key: the caller is fixed), so what the database holds (catalog, its
revision, the recorded conversations) is checked on both engines.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import mcp_types as mt
import pytest
from mcp import Client

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import McpCaller

pytestmark = pytest.mark.anyio


@pytest.fixture
async def ph(settings: Settings) -> AsyncIterator[Pilothouse]:
    async with Pilothouse(settings, model=ScriptedModel([Reply("done")])) as facade:
        catalog = (
            CatalogBuilder()
            .action("BRIEF", prompt="Brief {audience}.", ask_user=False)
            .add(
                "actions",
                code="FORM",
                name="Fill a form",
                model="SCRIPTED",
                configuration="DFLT",
                prompt="Check the form.",
                ask_user=False,
                schemas={
                    "input": {
                        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}
                    },
                    "output": {"schema": {"type": "string"}},
                },
            )
            .application("CRM")
            .agent("BRIEFER", application="CRM", goal_action="BRIEF", prompt="For {team}.")
            .skill("TONE", prompt="Write plainly.", description="Plain writing")
        )
        await catalog.import_into(facade)
        yield facade


async def test_tools_calls_and_changes_on_each_database(ph: Pilothouse) -> None:
    service = ph.mcp_service(lambda _: McpCaller("default"))
    seen: list[Any] = []

    async def on_message(message: Any) -> None:
        seen.append(message)

    async with (
        service.running(),
        Client(service.server, mode="legacy", message_handler=on_message) as client,
    ):
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["agent_BRIEFER"].input_schema["required"] == ["audience", "message", "team"]
        form = tools["action_FORM"]
        assert form.input_schema["required"] == ["data"]
        assert form.output_schema == {
            "type": "object",
            "properties": {"result": {"type": "string"}},
            "required": ["result"],
        }
        result = await client.call_tool(
            "agent_BRIEFER", {"message": "go", "audience": "execs", "team": "sales"}
        )
        assert not result.is_error
        assert result.meta is not None
        uuid = result.meta["pilothouse/conversation_uuid"]
        assert (await ph.query.get_conversation(uuid)).uuid == uuid
        prompts = (await client.list_prompts()).prompts
        assert [(p.name, p.description) for p in prompts] == [("TONE", "Plain writing")]
        assert await service.check_changes() == []
        await ph.catalog.delete("skills", "TONE")
        assert await service.check_changes() == ["default"]
        assert (await client.list_prompts()).prompts == []
    assert any(isinstance(m, mt.ToolListChangedNotification) for m in seen)
    assert any(isinstance(m, mt.PromptListChangedNotification) for m in seen)
