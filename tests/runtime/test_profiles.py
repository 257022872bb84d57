"""The loop follows the model's profile, never the provider kind.

The same scripted model runs under the default profile and under the local
one; with the local profile it must behave as the embedded llama.cpp model
does: a grammar for structured output, no streaming while tools are offered,
tool results read back as text with no tools offered after one round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import pytest
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart

from pilothouse.catalog._enums import ExecutionPolicy, ProcessStatus, ProviderKind, ToolKind
from pilothouse.providers import (
    DEFAULT_PROFILE,
    LOCAL_PROFILE,
    ModelProfile,
    ModelSpec,
    ProviderSpec,
    profile_for,
)
from pilothouse.runtime import CompiledAction, Runner, TextDelta, TurnEvent
from pilothouse.store import Database, SqlTurnStore
from pilothouse.testing import Json, ScriptedModel, ToolCall
from pilothouse.tools import ExecutableTool, ToolContext, ToolDefinition, ToolResult

pytestmark = pytest.mark.anyio

RunnerFactory = Callable[..., Runner]


class WeatherSource:
    """Serves the catalog's tools as one that answers the weather."""

    async def tool(self, row: Any) -> ExecutableTool:
        return Weather(ToolDefinition(row.name, row.description or "", dict(row.input_schema)))

    async def service_tools(self, row: Any) -> list[ExecutableTool]:
        raise AssertionError("no service tools here")

    async def mcp_tools(self, row: Any) -> list[ExecutableTool]:
        return []

    async def mcp_tool(self, row: Any, name: str) -> ExecutableTool:
        raise AssertionError("no MCP here")


class Weather:
    def __init__(self, definition: ToolDefinition) -> None:
        self.definition = definition
        self.kind = ToolKind.PYTHON
        self.policy = ExecutionPolicy.ALLOW

    async def execute(self, arguments: Any, context: ToolContext) -> ToolResult:
        return ToolResult(f"sunny in {arguments.get('city')}")


async def _profiled(runner: Runner, action: str, profile: ModelProfile) -> CompiledAction:
    compiled = await runner.compiler.compile("default", action, None)
    return replace(compiled, model=replace(compiled.model, profile=profile))


async def _start(db: Database, action: str) -> str:
    writer = SqlTurnStore(db)
    return (await writer.create("default", action_code=action, agent_code=None)).uuid


def _deltas_into(deltas: list[str]) -> Callable[[TurnEvent], None]:
    def listen(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            deltas.append(event.text)

    return listen


def test_provider_kinds_map_to_profiles() -> None:
    assert profile_for(ProviderKind.LOCAL) is LOCAL_PROFILE
    assert profile_for(ProviderKind.OPENAI) is DEFAULT_PROFILE
    local = ModelSpec(code="L", provider=ProviderSpec("L", ProviderKind.LOCAL), model_name="m")
    assert local.profile is LOCAL_PROFILE
    # A profile given explicitly wins over the kind's.
    hosted = ModelSpec(
        code="H",
        provider=ProviderSpec("H", ProviderKind.LOCAL),
        model_name="m",
        profile=DEFAULT_PROFILE,
    )
    assert hosted.profile is DEFAULT_PROFILE


@pytest.mark.parametrize("profile", [DEFAULT_PROFILE, LOCAL_PROFILE], ids=["default", "local"])
async def test_structured_output_mode_follows_the_profile(
    catalog: Database, make_runner: RunnerFactory, profile: ModelProfile
) -> None:
    model = ScriptedModel([Json([{"name": "Globex"}])])
    runner = make_runner(model)
    compiled = await _profiled(runner, "COMPETITORS", profile)
    uuid = await _start(catalog, "COMPETITORS")
    result = await runner.send_message(uuid, "Acme vs Globex", compiled=compiled)
    assert result.output == [{"name": "Globex"}]
    info = model.requests[0].info
    extra = cast(dict[str, Any], (info.model_settings or {}).get("extra_body") or {})
    if profile.grammar_output:
        # A grammar in the request; the answer comes as plain text.
        assert extra["response_format"]["type"] == "json_object"
        assert extra["response_format"]["schema"] == compiled.output_object_schema
        assert info.output_tools == []
    else:
        assert "response_format" not in extra
        assert [t.name for t in info.output_tools] == ["final_result"]


@pytest.mark.parametrize("profile", [DEFAULT_PROFILE, LOCAL_PROFILE], ids=["default", "local"])
async def test_tool_rounds_and_streaming_follow_the_profile(
    catalog: Database, make_runner: RunnerFactory, profile: ModelProfile
) -> None:
    model = ScriptedModel([ToolCall("get_weather", {"city": "Paris"}, call_id="w1"), "Sunny."])
    runner = make_runner(model, tool_source=WeatherSource())
    compiled = await _profiled(runner, "TOOLS", profile)
    uuid = await _start(catalog, "TOOLS")
    deltas: list[str] = []
    listen = _deltas_into(deltas)
    result = await runner.send_message(uuid, "Weather?", compiled=compiled, on_event=listen)
    assert (result.status, result.output) == (ProcessStatus.COMPLETED, "Sunny.")
    second = model.requests[1]
    last = second.messages[-1]
    assert isinstance(last, ModelRequest)
    offered = [t.name for t in second.info.function_tools]
    if profile.tool_results_as_text:
        # The result as a user message, and nothing more to call.
        assert isinstance(last.parts[0], UserPromptPart)
        assert "The get_weather tool returned: sunny in Paris" in str(last.parts[0].content)
        assert offered == []
    else:
        assert isinstance(last.parts[0], ToolReturnPart)
        assert "get_weather" in offered
    # The answer streams either way: the local profile offers no tools by then.
    assert "".join(deltas) == "Sunny."


@pytest.mark.parametrize("profile", [DEFAULT_PROFILE, LOCAL_PROFILE], ids=["default", "local"])
async def test_streaming_with_tools_offered_follows_the_profile(
    catalog: Database, make_runner: RunnerFactory, profile: ModelProfile
) -> None:
    model = ScriptedModel(["A short summary."])
    runner = make_runner(model)
    # SUMBRAND offers AskUserQuestion and use_skill on every call.
    compiled = await _profiled(runner, "SUMBRAND", profile)
    uuid = await _start(catalog, "SUMBRAND")
    deltas: list[str] = []
    listen = _deltas_into(deltas)
    result = await runner.send_message(uuid, "Summarize.", compiled=compiled, on_event=listen)
    assert result.output == "A short summary."
    assert "AskUserQuestion" in [t.name for t in model.requests[0].info.function_tools]
    assert "".join(deltas) == ("" if not profile.streams_with_tools else "A short summary.")
