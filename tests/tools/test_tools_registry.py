"""The registry's catalog side: kinds, caching per row version, definition checks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from tool_rows import tool_row

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.providers._secrets import SecretResolver
from pilothouse.tools import (
    PythonTool,
    SchemaTool,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolRegistry,
    validate_definition,
)

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="default", conversation_uuid="conv-1", call_id="call-1")
QUESTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"question": {"type": "string"}},
    "required": ["question"],
}


@pytest.fixture
async def registry() -> AsyncIterator[ToolRegistry]:
    async with ToolRegistry(SecretResolver({})) as reg:
        yield reg


async def test_schema_tool_definition_comes_from_the_catalog_and_it_refuses_to_run(
    registry: ToolRegistry,
) -> None:
    row = tool_row(
        ToolKind.SCHEMA,
        name="ask_manager",
        description="Ask the manager.",
        input_schema=QUESTION_SCHEMA,
        policy=ExecutionPolicy.AUTHORIZED,
    )
    built = await registry.from_catalog(row)
    assert isinstance(built, SchemaTool)
    assert built.kind is ToolKind.SCHEMA
    assert built.policy is ExecutionPolicy.AUTHORIZED
    assert built.definition == ToolDefinition("ask_manager", "Ask the manager.", QUESTION_SCHEMA)
    result = await built.execute({"question": "?"}, CONTEXT)
    assert (result.is_error, result.error_code) == (True, "tool.exec.not_executable")
    assert "ask_manager" in result.content


async def test_python_row_uses_the_catalog_name_description_and_policy(
    registry: ToolRegistry,
) -> None:
    row = tool_row(
        ToolKind.PYTHON,
        name="weather",
        implementation="tool_samples:get_weather",
        policy=ExecutionPolicy.AUTHORIZED,
    )
    built = await registry.from_catalog(row)
    assert isinstance(built, PythonTool)
    assert built.definition.name == "weather"
    assert built.definition.description.startswith("Get the weather forecast")
    assert built.definition.parameters["required"] == ["city"]
    assert built.policy is ExecutionPolicy.AUTHORIZED
    result = await built.execute({"city": "Rome"}, CONTEXT)
    assert result.content == '{"city": "Rome", "degrees": 22.5, "unit": "celsius"}'


async def test_a_catalog_schema_overrides_what_the_model_sees_not_the_validation(
    registry: ToolRegistry,
) -> None:
    shown = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}
    row = tool_row(
        ToolKind.PYTHON,
        name="div",
        description="Divide.",
        implementation="tool_samples:divide",
        input_schema=shown,
        output_schema={"type": "number"},
    )
    built = await registry.from_catalog(row)
    assert built.definition == ToolDefinition("div", "Divide.", shown, {"type": "number"})
    result = await built.execute({"a": 1}, CONTEXT)
    assert (result.is_error, result.error_code) == (True, "tool.args.invalid")


async def test_built_tools_are_cached_per_row_version(registry: ToolRegistry) -> None:
    row = tool_row(ToolKind.PYTHON, name="div", implementation="tool_samples:divide", row_id=7)
    first = await registry.from_catalog(row)
    assert await registry.from_catalog(row) is first
    edited = tool_row(
        ToolKind.PYTHON, name="div2", implementation="tool_samples:divide", row_id=7, version=2
    )
    second = await registry.from_catalog(edited)
    assert second is not first
    assert second.definition.name == "div2"
    assert await registry.from_catalog(edited) is second


async def test_a_row_without_an_id_is_built_every_time(registry: ToolRegistry) -> None:
    row = tool_row(ToolKind.PYTHON, name="div", implementation="tool_samples:divide")
    assert await registry.from_catalog(row) is not await registry.from_catalog(row)


async def test_mcp_rows_come_from_the_mcp_pool(registry: ToolRegistry) -> None:
    with pytest.raises(ToolError, match="mcp tools come from the MCP client pool"):
        await registry.from_catalog(tool_row(ToolKind.MCP, name="t", implementation="srv:t"))


@pytest.mark.parametrize(
    ("kind", "implementation", "message"),
    [
        (ToolKind.PYTHON, None, r"tool 'x': implementation is required for kind python"),
        (ToolKind.SCRIPT, "  ", r"tool 'x': implementation is required for kind script"),
        (ToolKind.PYTHON, "tool_samples", r"must name one function as 'package.module:function'"),
        (ToolKind.PYTHON, "tool_samples:Calculator", r"is not a function; a catalog row is one"),
        (ToolKind.PYTHON, "tool_samples:missing", r"'tool_samples' has no attribute 'missing'"),
    ],
)
async def test_bad_implementations_are_tool_errors_naming_the_tool(
    registry: ToolRegistry, kind: ToolKind, implementation: str | None, message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        await registry.from_catalog(tool_row(kind, name="x", implementation=implementation))


@pytest.mark.parametrize(
    ("definition", "message"),
    [
        (ToolDefinition("a" * 65, "", {"type": "object"}), r"name must match"),
        (ToolDefinition("has.dot", "", {"type": "object"}), r"tool 'has.dot': name must match"),
        (ToolDefinition("t", "", {"type": "array"}), r"must have type 'object', not 'array'"),
        (ToolDefinition("t", "", {}), r"must have type 'object', not None"),
        (
            ToolDefinition("t", "", {"type": "object", "properties": {"a": {"type": "nope"}}}),
            r"tool 't': input schema is not a valid JSON Schema: .*\(at properties/a/type\)",
        ),
        (
            ToolDefinition("t", "", {"type": "object"}, {"type": 3}),
            r"tool 't': output schema is not a valid JSON Schema",
        ),
    ],
)
def test_malformed_definitions_are_refused(definition: ToolDefinition, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        validate_definition(definition)


async def test_a_catalog_row_with_a_malformed_schema_is_refused(registry: ToolRegistry) -> None:
    row = tool_row(ToolKind.SCHEMA, name="ask", input_schema={"type": "string"})
    with pytest.raises(ToolError, match="tool 'ask': input schema must have type 'object'"):
        await registry.from_catalog(row)


async def test_a_schema_row_without_a_schema_takes_no_arguments(registry: ToolRegistry) -> None:
    built = await registry.from_catalog(tool_row(ToolKind.SCHEMA, name="done"))
    assert built.definition.parameters == {"type": "object", "properties": {}}


async def test_add_registers_a_built_tool(registry: ToolRegistry) -> None:
    built = await registry.from_catalog(tool_row(ToolKind.SCHEMA, name="done"))
    registry.add(built)
    assert registry.get("done") is built
    with pytest.raises(ToolError, match="already registered: done"):
        registry.add(built)
