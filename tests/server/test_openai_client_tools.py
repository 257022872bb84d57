"""Client-defined tools and ``response_format`` on ``/v1/chat/completions``.

An OpenAI client's own ``tools`` are offered for that request and their
calls come back as ``tool_calls`` (the client runs them and sends the
results in its next request); ``response_format`` asks for JSON, with or
without a schema. Real clients (the official one, LangChain, pydantic-ai)
are driven against a real server in ``tests/real/test_openai_clients_real.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from pydantic_ai.messages import ModelRequest, ToolReturnPart, UserPromptPart
from server_helpers import ExamplesAnd

from database_templates import Seed
from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.server._state import ServerState
from pilothouse.testing import Calls, Json, Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

EXTRA = """
providers:
  - code: OAIT
    kind: openai
    base_url: http://127.0.0.1:9/v1
models:
  - code: OAITESTM
    provider: OAIT
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
tools:
  - code: LOOKUP
    name: lookup
    kind: schema
    description: Look a brand up; the caller answers.
actions:
  - code: PLAIN
    name: Plain chat
    model: OAITESTM
    configuration: DFLT
    prompt: Be brief.
  - code: WITHTOOL
    name: Chat with a catalog tool
    model: OAITESTM
    configuration: DFLT
    tools: [LOOKUP]
    prompt: Be brief.
"""

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture
def database_seed() -> Seed:
    return ExamplesAnd(EXTRA)


@pytest.fixture
async def oai(app: FastAPI, client: httpx.AsyncClient, api_key: str) -> AsyncIterator[Any]:
    # ``client`` runs the app's lifespan; the official client (built on
    # httpx2) calls the app in-process.
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(
        base_url="http://testserver/v1", api_key=api_key, http_client=http, max_retries=0
    ) as sdk:
        yield sdk


async def test_client_tools_are_offered_and_their_calls_returned(
    oai: Any, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(ToolCall("get_weather", {"city": "Paris"}, call_id="w1"))
    answer = await oai.chat.completions.create(
        model="PLAIN", messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER]
    )
    offered = {t.name: t for t in scripted.requests[0].info.function_tools}
    # Beside the built-in AskUserQuestion, the client's tool as it sent it.
    assert set(offered) == {"get_weather", "AskUserQuestion"}
    assert offered["get_weather"].parameters_json_schema == WEATHER["function"]["parameters"]
    assert offered["get_weather"].description == "The weather in a city."
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert (call.id, call.function.name) == ("w1", "get_weather")
    assert json.loads(call.function.arguments) == {"city": "Paris"}


async def test_tool_results_sent_back_continue_the_turn_from_them(
    oai: Any, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("Sunny, 21 degrees in Paris."))
    answer = await oai.chat.completions.create(
        model="PLAIN",
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "w1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "w1", "content": "sunny, 21 C"},
        ],
    )
    assert answer.choices[0].message.content == "Sunny, 21 degrees in Paris."
    # The model's request ends with the tool's result, no empty user message after it.
    last = scripted.requests[0].messages[-1]
    assert isinstance(last, ModelRequest)
    assert [type(p) for p in last.parts] == [ToolReturnPart]
    assert isinstance(last.parts[0], ToolReturnPart)
    assert (last.parts[0].tool_call_id, last.parts[0].content) == ("w1", "sunny, 21 C")
    assert not any(
        isinstance(p, UserPromptPart) and p.content == ""
        for m in scripted.requests[0].messages
        if isinstance(m, ModelRequest)
        for p in m.parts
    )
    facade = server_state.facade("default")
    page = await facade.query.list_conversations()
    stored = page.items[0]
    assert stored.status is ProcessStatus.COMPLETED
    messages = await facade.query.get_conversation_messages(stored.uuid)
    roles = [m.role for m in messages]
    assert roles[:3] == [MessageRole.USER, MessageRole.ASSISTANT, MessageRole.TOOL]
    assert (messages[-1].role, messages[-1].content) == (
        MessageRole.ASSISTANT,
        "Sunny, 21 degrees in Paris.",
    )


async def test_a_tool_result_for_an_unknown_call_is_400(oai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="PLAIN",
            messages=[
                {"role": "user", "content": "x"},
                {"role": "tool", "tool_call_id": "nope", "content": "y"},
            ],
        )
    assert caught.value.param == "messages[1].tool_call_id"


async def test_tool_choice_none_offers_no_client_tool(oai: Any, scripted: ScriptedModel) -> None:
    scripted.script.steps.append(Reply("No tools."))
    await oai.chat.completions.create(
        model="PLAIN",
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER],
        tool_choice="none",
    )
    assert [t.name for t in scripted.requests[0].info.function_tools] == ["AskUserQuestion"]


@pytest.mark.parametrize(
    ("choice", "sent"),
    [
        ("required", "required"),
        ({"type": "function", "function": {"name": "get_weather"}}, ["get_weather"]),
    ],
)
async def test_a_forced_tool_choice_reaches_the_model(
    oai: Any, scripted: ScriptedModel, choice: Any, sent: Any
) -> None:
    # LangChain's bind_tools(tool_choice="any") sends "required";
    # with_structured_output(method="function_calling") names its function.
    scripted.script.steps.append(ToolCall("get_weather", {"city": "Paris"}))
    answer = await oai.chat.completions.create(
        model="PLAIN",
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER],
        tool_choice=choice,
    )
    assert answer.choices[0].finish_reason == "tool_calls"
    assert scripted.requests[0].info.model_settings is not None
    assert scripted.requests[0].info.model_settings.get("tool_choice") == sent


async def test_parallel_tool_calls_false_makes_one_call(oai: Any, scripted: ScriptedModel) -> None:
    # LangChain's with_structured_output(method="function_calling") sends it.
    scripted.script.steps.append(
        Calls(
            (ToolCall("get_weather", {"city": "Paris"}), ToolCall("get_weather", {"city": "Oslo"}))
        )
    )
    answer = await oai.chat.completions.create(
        model="PLAIN",
        messages=[{"role": "user", "content": "x"}],
        tools=[WEATHER],
        parallel_tool_calls=False,
    )
    calls = answer.choices[0].message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [{"city": "Paris"}]
    assert (scripted.requests[0].info.model_settings or {}).get("parallel_tool_calls") is False


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tool_choice": "sometimes"}, "tool_choice"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name",
        ),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
        ({"response_format": {"type": "xml"}}, "response_format.type"),
    ],
)
async def test_settings_we_cannot_honour_are_refused_by_name(
    client: httpx.AsyncClient, api_key: str, extra: dict[str, Any], param: str
) -> None:
    body = {"model": "PLAIN", "messages": [{"role": "user", "content": "x"}], "tools": [WEATHER]}
    response = await client.post(
        "/v1/chat/completions",
        json={**body, **extra},
        headers={"Authorization": f"Bearer {api_key}"},
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


async def test_a_client_tool_named_like_a_catalog_tool_is_refused(oai: Any) -> None:
    clash = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="WITHTOOL", messages=[{"role": "user", "content": "x"}], tools=[clash]
        )
    assert "lookup" in caught.value.message


async def test_json_schema_response_format_is_the_answers_schema(
    oai: Any, scripted: ScriptedModel
) -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "founded": {"type": "integer"}},
        "required": ["name", "founded"],
        "additionalProperties": False,
    }
    scripted.script.steps.append(Json({"name": "Acme", "founded": 1947}))
    answer = await oai.chat.completions.create(
        model="PLAIN",
        messages=[{"role": "user", "content": "Acme, founded 1947."}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "brand", "schema": schema, "strict": True},
        },
    )
    assert json.loads(answer.choices[0].message.content) == {"name": "Acme", "founded": 1947}
    assert answer.choices[0].finish_reason == "stop"
    info = scripted.requests[0].info
    # The model's function-calling route carries the schema as the output tool.
    assert [t.parameters_json_schema for t in info.output_tools] == [schema]


async def test_an_answer_breaking_the_schema_is_retried(oai: Any, scripted: ScriptedModel) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    scripted.script.steps.extend([Json({"n": "three"}), Json({"n": 3})])
    answer = await oai.chat.completions.create(
        model="PLAIN",
        messages=[{"role": "user", "content": "three"}],
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
    )
    assert json.loads(answer.choices[0].message.content) == {"n": 3}
    assert len(scripted.requests) == 2


async def test_json_object_response_format_asks_for_an_object(
    oai: Any, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Json({"ok": True}))
    answer = await oai.chat.completions.create(
        model="PLAIN",
        messages=[{"role": "user", "content": "Answer in JSON."}],
        response_format={"type": "json_object"},
    )
    assert json.loads(answer.choices[0].message.content) == {"ok": True}


async def test_an_invalid_json_schema_is_400(oai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="PLAIN",
            messages=[{"role": "user", "content": "x"}],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "bad", "schema": {"type": "object", "required": 5}},
            },
        )
    assert "output_schema" in caught.value.message
