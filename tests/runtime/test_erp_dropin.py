"""Seed 000 behaviour a migrated ERP catalog relies on.

- an action without a memory strategy has no memory; memory can be cleared;
- the assembled system prompt is recorded with the conversation (``SY``);
- a skill contributes ``Your skill: <prompt>.`` unless the action switches
  progressive disclosure on; a parent skill comes with its child.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

from pilothouse.api import Pilothouse
from pilothouse.catalog import Action, McpClient, MessageRole, ProcessStatus
from pilothouse.errors import InvalidStateError
from pilothouse.providers import SecretResolver
from pilothouse.runtime import default_contributors
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel, ToolCall
from pilothouse.tools import ToolRegistry
from pilothouse.types import PromptContext

pytestmark = pytest.mark.anyio


def catalog() -> CatalogBuilder:
    return (
        CatalogBuilder()
        .memory_strategy("FULL", kind="FULL")
        .action("NOMEM", prompt="Answer briefly.")
        .action("FULLMEM", prompt="Answer briefly.", memory_strategy="FULL")
        .tool(
            "LOOKUP",
            name="lookup",
            kind="schema",
            description="Look a brand up.",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        )
        .skill("MARKET", prompt="Know the market", tools=["LOOKUP"])
        .skill("VOICE", prompt="Keep the brand's tone.", parent="MARKET")
        .action("EAGER", prompt="Write a tagline.", skills=["VOICE"], ask_user=False)
        .action(
            "PROGRESS",
            prompt="Write a tagline.",
            skills=["VOICE"],
            progressive_disclosure=True,
            ask_user=False,
        )
    )


@pytest.fixture
async def model() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
async def ph(database_url: str, model: ScriptedModel) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as facade:
        await catalog().import_into(facade)
        yield facade


def _user_texts(model: ScriptedModel) -> list[str]:
    request = model.requests[-1]
    return [
        str(part.content)
        for message in request.messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]


def _system_prompt(model: ScriptedModel) -> str:
    return "\n\n".join(
        part.content
        for message in model.requests[-1].messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, SystemPromptPart)
    )


def _tool_names(model: ScriptedModel) -> list[str]:
    return sorted(tool.name for tool in model.requests[-1].info.function_tools)


async def test_an_action_without_memory_strategy_has_no_memory(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend(["one", "two"])
    first = await ph.command.start_and_send("My name is Ada.", action="NOMEM")
    await ph.command.send_message(first.conversation_uuid, "What is my name?")
    assert _user_texts(model) == ["What is my name?"]


async def test_an_action_with_a_memory_strategy_remembers(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend(["one", "two"])
    first = await ph.command.start_and_send("My name is Ada.", action="FULLMEM")
    await ph.command.send_message(first.conversation_uuid, "What is my name?")
    assert _user_texts(model) == ["My name is Ada.", "What is my name?"]


async def test_memory_is_cleared_explicitly_and_the_transcript_keeps_everything(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend(["one", "two", "three"])
    first = await ph.command.start_and_send("My name is Ada.", action="FULLMEM")
    uuid = first.conversation_uuid
    await ph.command.send_message(uuid, "I live in Paris.")
    conversation = await ph.query.get_conversation(uuid)
    assert await ph.command.clear_memory(conversation.memory_id) is True
    await ph.command.send_message(uuid, "Where do I live?")
    assert _user_texts(model) == ["Where do I live?"]
    messages = await ph.query.get_conversation_messages(uuid)
    assert [m.content for m in messages if m.role is MessageRole.USER] == [
        "My name is Ada.",
        "I live in Paris.",
        "Where do I live?",
    ]
    cleared = [m for m in messages if m.data and m.data.get("memory_cleared")]
    assert [(m.role, m.content) for m in cleared] == [(MessageRole.SYSTEM, "Chat memory cleared.")]
    assert await ph.command.clear_memory("no-such-memory") is False


async def test_memory_of_a_waiting_conversation_is_not_cleared(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.append(
        ToolCall(
            "AskUserQuestion",
            {"questions": [{"question": "Which brand?", "header": "Brand", "options": []}]},
        )
    )
    result = await ph.command.start_and_send("Help me.", action="FULLMEM")
    assert result.status is ProcessStatus.WAITING
    conversation = await ph.query.get_conversation(result.conversation_uuid)
    with pytest.raises(InvalidStateError, match="running or waiting"):
        await ph.command.clear_memory(conversation.memory_id)


async def test_the_system_prompt_is_recorded_once_as_sy(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend(["one", "two"])
    first = await ph.command.start_and_send("Hello.", action="FULLMEM")
    sent = _system_prompt(model)
    await ph.command.send_message(first.conversation_uuid, "Again.")
    messages = await ph.query.get_conversation_messages(first.conversation_uuid)
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    assert messages[0].content == sent
    assert messages[0].data == {"system_prompt": True, "catalog_revision": 1}
    # The recorded prompt is not chat memory: the model sees it once, as the system prompt.
    assert _user_texts(model) == ["Hello.", "Again."]


async def test_a_skill_contributes_your_skill_and_its_tools_by_default(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.append("Fresh.")
    await ph.command.start_and_send("Acme", action="EAGER")
    prompt = _system_prompt(model)
    # The child and, with it, its parent skill (genai-4j), in seed 000's words.
    assert "Your skill: Keep the brand's tone.\nYour skill: Know the market." in prompt
    assert "use_skill" not in prompt
    assert _tool_names(model) == ["lookup"]


async def test_progressive_disclosure_is_a_per_action_switch(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend([ToolCall("use_skill", {"skill": "VOICE"}), "Fresh."])
    result = await ph.command.start_and_send("Acme", action="PROGRESS")
    assert result.output == "Fresh."
    first, second = model.requests
    assert sorted(t.name for t in first.info.function_tools) == ["use_skill"]
    # Activating the child brings its parent's tools.
    assert sorted(t.name for t in second.info.function_tools) == ["lookup", "use_skill"]
    prompt = _system_prompt(model)
    assert "Call use_skill" in prompt
    assert "Your skill: Keep the brand's tone." not in prompt


@dataclass
class _Clause:
    """A contributor another module adds: seed 000's IsPromptContributor seam."""

    name: str = "legal"

    def contribute(self, context: PromptContext) -> str | None:
        return f"Legal entity of action {context.action.code}: Acme GmbH."


def lookup_order(order_id: int) -> dict[str, str]:
    """Find an order."""
    return {"order": str(order_id), "status": "shipped"}


async def test_registered_tools_and_custom_contributors_are_used(database_url: str) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(lookup_order)
    model = ScriptedModel([ToolCall("orders", {"order_id": 7}), "Shipped."])
    settings = Settings(database_url=database_url, secrets_file=None)
    contributors = [*default_contributors(), _Clause()]
    async with Pilothouse(settings, model=model, tools=registry, contributors=contributors) as ph:
        await (
            CatalogBuilder()
            # The catalog row offers the tool registered in code, under its own name.
            .tool("ORDERS", name="orders", kind="python", implementation="lookup_order")
            .action("TRACK", prompt="Track orders.", tools=["ORDERS"], ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send("Where is order 7?", action="TRACK")
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert result.output == "Shipped."
    tool_messages = [m.content for m in messages if m.role is MessageRole.TOOL]
    assert len(tool_messages) == 1
    assert json.loads(tool_messages[0]) == {"order": "7", "status": "shipped"}
    assert _system_prompt(model).endswith("Legal entity of action TRACK: Acme GmbH.")


async def test_an_unregistered_implementation_names_what_is_registered(
    database_url: str,
) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(lookup_order)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=ScriptedModel(["x"]), tools=registry) as ph:
        await (
            CatalogBuilder()
            .tool("ORDERS", name="orders", kind="python", implementation="find_order")
            .action("TRACK", prompt="Track orders.", tools=["ORDERS"], ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send("Where is order 7?", action="TRACK")
    assert result.status is ProcessStatus.FAILED
    assert "registered: lookup_order" in (result.error or "")


async def test_input_and_output_schema_helpers(ph: Pilothouse) -> None:
    await (
        CatalogBuilder()
        .action(
            "EXTRACT",
            prompt="Extract.",
            schemas={
                "input": {"schema": {"type": "object"}},
                "memory": {"schema": {"type": "object", "title": "m"}},
                "output": {"cardinality": "list", "schema": {"type": "object", "title": "o"}},
            },
        )
        .import_into(ph)
    )
    extract = await ph.query.find_action_by_code("EXTRACT")
    plain = await ph.query.find_action_by_code("NOMEM")
    assert extract is not None and plain is not None
    assert [s.direction.value for s in extract.get_input_schemas()] == ["I", "M"]
    assert extract.get_output_agent_schema().json_schema == {"type": "object", "title": "o"}
    assert plain.get_input_schemas() == []
    with pytest.raises(InvalidStateError, match="action 'NOMEM' has no output schema; exactly one"):
        plain.get_output_agent_schema()


def test_mcp_client_schemas_are_in_the_system_prompt() -> None:
    client = McpClient(
        name="crm",
        description="The CRM.",
        input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        output_schema={"type": "object", "properties": {"rows": {"type": "array"}}},
    )
    action = Action(code="A", prompt="Go.")
    context = PromptContext(action=action, agent=None, mcp_clients=[client])
    (part,) = [
        text
        for contributor in default_contributors()
        if contributor.name == "mcp_clients"
        for text in [contributor.contribute(context)]
        if text
    ]
    assert part.startswith("Available tool 'crm': The CRM.\nInput data structure:\n{")
    assert '"rows"' in part and "Output data structure:" in part


def convert(amount: float, currency: str, rounding: dict[str, int]) -> dict[str, object]:
    """Convert an amount."""
    return {"amount": amount, "currency": currency, "rounding": rounding}


async def test_defaults_of_a_tools_input_schema_are_applied(database_url: str) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(convert)
    model = ScriptedModel([ToolCall("convert", {"amount": 2, "rounding": {}}), "Done."])
    settings = Settings(database_url=database_url, secrets_file=None)
    schema = {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "currency": {"type": "string", "default": "EUR"},
            "rounding": {
                "type": "object",
                "properties": {"digits": {"type": "integer", "default": 2}},
            },
        },
        "required": ["amount", "currency"],
    }
    async with Pilothouse(settings, model=model, tools=registry) as ph:
        await (
            CatalogBuilder()
            .tool(
                "CONVERT",
                name="convert",
                kind="python",
                implementation="convert",
                input_schema=schema,
            )
            .action("PRICE", prompt="Convert.", tools=["CONVERT"], ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send("2 please", action="PRICE")
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert result.output == "Done."
    (tool_message,) = [m for m in messages if m.role is MessageRole.TOOL]
    assert json.loads(tool_message.content) == {
        "amount": 2,
        "currency": "EUR",
        "rounding": {"digits": 2},
    }


def book(seat: str) -> str:
    """Book a seat."""
    return f"booked {seat}"


@pytest.mark.parametrize(
    ("access", "authorizer", "ran"),
    [("read", None, True), ("write", None, False), ("execute", None, False), ("write", True, True)],
)
async def test_a_skill_tool_access_level_is_enforced_by_the_tool_policy(
    database_url: str, access: str, authorizer: bool | None, ran: bool
) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(book)
    model = ScriptedModel([ToolCall("book", {"seat": "12A"}), "Done."])
    settings = Settings(database_url=database_url, secrets_file=None)
    approve = (lambda name, arguments: authorizer) if authorizer is not None else None
    async with Pilothouse(settings, model=model, tools=registry, authorizer=approve) as ph:
        catalog = (
            CatalogBuilder()
            .tool("BOOK", name="book", kind="python", implementation="book")
            .skill("TRAVEL", prompt="Book travel.", tools=[{"tool": "BOOK", "access": access}])
            .action("TRIP", prompt="Plan.", skills=["TRAVEL"], ask_user=False)
        )
        await catalog.import_into(ph)
        exported = await ph.catalog.get("skills", "TRAVEL")
        result = await ph.command.start_and_send("Book 12A", action="TRIP")
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    expected_link: object = "BOOK" if access == "read" else {"tool": "BOOK", "access": access}
    assert exported.document["tools"] == [expected_link]
    (tool_message,) = [m for m in messages if m.role is MessageRole.TOOL]
    if ran:
        assert tool_message.content == "booked 12A"
    else:
        assert "needs an authorizer's approval" in tool_message.content
