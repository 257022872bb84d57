"""pilothouse as an MCP server, with the official ``mcp`` client over real loopback HTTP.

The app runs in this process under uvicorn (``serve_on_loopback``), so the
SDK's transports stream as in production and every line is measured; the
model is the scripted one. Streamable HTTP is tried in both modes of the
protocol (the 2026-07-28 stateless one and the handshake session one), and
SSE.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback

from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.testing import Fail, Json, Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(
        host="127.0.0.1", shutdown_grace_seconds=2.0, mcp_list_changed_seconds=0.1
    )


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@asynccontextmanager
async def connect(
    base_url: str, key: str, *, mode: str = "legacy", transport: str = "http", **options: Any
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"}
    if transport == "sse":
        opened = sse_client(f"{base_url}/sse", headers=headers)
        async with Client(opened, mode="legacy", **options) as client:
            yield client
        return
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode=mode, **options) as client:
            yield client


def text(result: mt.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


@pytest.mark.parametrize(
    ("mode", "transport"), [("legacy", "http"), (MODERN, "http"), ("legacy", "sse")]
)
async def test_a_client_lists_the_actions_and_runs_one_as_an_audited_conversation(
    base_url: str,
    api_key: str,
    scripted: ScriptedModel,
    server_state: ServerState,
    mode: str,
    transport: str,
) -> None:
    async with connect(base_url, api_key, mode=mode, transport=transport) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"action_ECHO", "action_SUMBRAND", "agent_WRITER", "pilothouse_answer"} <= set(
            listed
        )
        echo = listed["action_ECHO"]
        # The prompt's {input} placeholder and the message are the arguments.
        assert echo.input_schema["required"] == ["input", "message"]
        assert echo.output_schema is None
        scripted.script.steps.append(Reply("Hello from ECHO"))
        result = await client.call_tool("action_ECHO", {"message": "hi", "input": "greet me"})
    assert not result.is_error
    assert text(result) == "Hello from ECHO"
    assert result.meta is not None
    uuid = result.meta["pilothouse/conversation_uuid"]
    # The call is a conversation of the key's tenant, recorded like any other.
    transcript = await server_state.pilothouse.query.get_transcript(uuid)
    assert transcript.status == "CO"
    assert [m.content for m in transcript.messages if m.role == "US"] == ["hi"]
    assert "greet me" in str(scripted.script.requests[-1].messages)


async def test_an_output_schema_is_the_tools_and_the_answer_is_structured(
    base_url: str, api_key: str, scripted: ScriptedModel
) -> None:
    async with connect(base_url, api_key) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        competitors = listed["action_COMPETITORS"]
        assert competitors.output_schema is not None
        assert competitors.output_schema["properties"]["items"]["type"] == "array"
        orbital = {"name": "Orbital Co", "website": "", "reason": "named"}
        scripted.script.steps.append(Json([orbital]))
        result = await client.call_tool(
            "action_COMPETITORS", {"message": "who?", "document": "Acme vs Orbital Co"}
        )
    assert not result.is_error, text(result)
    assert result.structured_content == {"items": [orbital]}


async def test_bad_arguments_and_unknown_tools_are_tool_errors(base_url: str, api_key: str) -> None:
    async with connect(base_url, api_key) as client:
        missing = await client.call_tool("action_ECHO", {"message": "hi"})
        unknown = await client.call_tool("action_NOPE", {})
        extra = await client.call_tool("action_ECHO", {"message": "hi", "input": "x", "temp": 1})
    assert missing.is_error and "'input' is a required property" in text(missing)
    assert unknown.is_error and text(unknown) == "unknown tool 'action_NOPE'"
    assert extra.is_error and "temp" in text(extra)


async def test_skills_are_prompts(base_url: str, api_key: str) -> None:
    async with connect(base_url, api_key) as client:
        prompts = {p.name for p in (await client.list_prompts()).prompts}
        assert "BRVOICE" in prompts
        prompt = await client.get_prompt("BRVOICE")
    content = prompt.messages[0].content
    assert isinstance(content, mt.TextContent) and content.text


async def test_without_a_valid_key_the_transports_answer_401(base_url: str) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        for path, method in (("/mcp", "POST"), ("/sse", "GET"), ("/messages/", "POST")):
            answer = await http.request(method, path, json={})
            assert answer.status_code == 401, path
            assert answer.headers["content-type"] == "application/problem+json"
            wrong = await http.request(
                method, path, json={}, headers={"Authorization": "Bearer ph_00000000_nope"}
            )
            assert wrong.status_code == 401


async def test_a_malformed_tools_call_is_a_json_rpc_error_not_a_500(
    base_url: str, api_key: str
) -> None:
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"arguments": "not an object", "_meta": {}},
    }
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.post("/mcp", json=body, headers=headers)
    assert answer.status_code < 500
    assert '"error"' in answer.text


async def test_a_keys_allow_list_hides_and_refuses_the_other_tools(
    base_url: str, server_state: ServerState
) -> None:
    key, info = await server_state.pilothouse.keys.create(name="echo only", mcp_tools=["action_E*"])
    assert info.scopes == ("mcp:tool:action_E*",)
    async with connect(base_url, key) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        denied = await client.call_tool("action_SUMBRAND", {"message": "hi", "document": "d"})
    assert names == ["action_ECHO"]
    assert denied.is_error and text(denied) == "unknown tool 'action_SUMBRAND'"


async def test_a_catalog_change_is_announced_with_tools_list_changed(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    seen: list[str] = []
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ToolListChangedNotification):
            seen.append(message.method)
            changed.set()

    async with connect(base_url, api_key, message_handler=on_message) as client:
        before = {tool.name for tool in (await client.list_tools()).tools}
        assert "action_LATER" not in before
        document = {
            "code": "LATER",
            "name": "Added later",
            "model": "SCRIPTEDM",
            "configuration": "DFLT",
            "prompt": "Say something.",
        }
        await server_state.pilothouse.catalog.create("actions", document)
        with anyio.fail_after(20):
            await changed.wait()
        after = {tool.name for tool in (await client.list_tools()).tools}
    assert seen == ["notifications/tools/list_changed"]
    assert "action_LATER" in after


@pytest.mark.parametrize("server_config", [ServerSettings(host="127.0.0.1", mcp_max_tools=2)])
async def test_past_max_tools_the_actions_are_disclosed_on_demand(
    base_url: str, api_key: str, scripted: ScriptedModel
) -> None:
    async with connect(base_url, api_key) as client:
        names = [tool.name for tool in (await client.list_tools()).tools]
        found = await client.call_tool("pilothouse_find_actions", {"query": "echo"})
        scripted.script.steps.append(Reply("ran"))
        ran = await client.call_tool(
            "pilothouse_run_action",
            {"tool": "action_ECHO", "arguments": {"message": "hi", "input": "x"}},
        )
    shown = [name for name in names if not name.startswith("pilothouse_memory_")]
    assert shown == ["pilothouse_answer", "pilothouse_find_actions", "pilothouse_run_action"]
    assert found.structured_content is not None
    assert [a["tool"] for a in found.structured_content["actions"]] == ["action_ECHO"]
    assert text(ran) == "ran"


@pytest.mark.parametrize("server_config", [ServerSettings(host="127.0.0.1", mcp_max_tools=2)])
async def test_find_actions_ranks_by_meaning_when_no_action_holds_every_word(
    base_url: str, api_key: str
) -> None:
    # Seed 002's description embeddings (the packaged MiniLM): no action's
    # text holds "give" or "short", so the closest in meaning come back.
    async with connect(base_url, api_key) as client:
        found = await client.call_tool(
            "pilothouse_find_actions", {"query": "give me a short summary of our brand"}
        )
    assert found.structured_content is not None
    ranked = [a["tool"] for a in found.structured_content["actions"]]
    assert ranked[0] == "action_SUMBRAND"
    # A few, ranked, not the whole catalog: the other actions follow.
    assert 1 < len(ranked) <= 8 and "action_ECHO" in ranked


async def test_a_question_is_answered_with_pilothouse_answer(
    base_url: str, api_key: str, scripted: ScriptedModel
) -> None:
    question = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}
    scripted.script.steps.append(ToolCall("AskUserQuestion", question, call_id="q1"))
    async with connect(base_url, api_key) as client:
        asked = await client.call_tool("action_ECHO", {"message": "Order", "input": "shirts"})
        assert asked.meta is not None
        uuid = asked.meta["pilothouse/conversation_uuid"]
        wrong = await client.call_tool(
            "pilothouse_answer", {"conversation_uuid": uuid, "answers": {"size": "XL"}}
        )
        scripted.script.steps.append(Reply("Ordered size M."))
        done = await client.call_tool(
            "pilothouse_answer", {"conversation_uuid": uuid, "answers": {"size": "M"}}
        )
        malformed = await client.call_tool("pilothouse_answer", {"answers": {}})
    assert asked.is_error and "Which size?" in text(asked) and uuid in text(asked)
    assert wrong.is_error and "must be one of" in text(wrong)
    assert not done.is_error and text(done) == "Ordered size M."
    assert malformed.is_error and "conversation_uuid" in text(malformed)


async def test_a_failed_turn_is_a_tool_error(
    base_url: str, api_key: str, scripted: ScriptedModel
) -> None:
    from pilothouse.errors import ProviderAuthError

    scripted.script.steps.append(Fail(ProviderAuthError("upstream refused")))
    async with connect(base_url, api_key) as client:
        failed = await client.call_tool("action_ECHO", {"message": "hi", "input": "x"})
    assert failed.is_error and text(failed).startswith("the action failed")


async def test_a_current_protocol_client_hears_of_changes_by_listening(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    from mcp.client.subscriptions import ToolsListChanged

    async with connect(base_url, api_key, mode=MODERN) as client:
        async with client.listen(tools_list_changed=True) as subscription:
            document = {
                "code": "HEARD",
                "name": "Heard of",
                "model": "SCRIPTEDM",
                "configuration": "DFLT",
                "prompt": "Say something.",
            }
            await server_state.pilothouse.catalog.create("actions", document)
            with anyio.fail_after(20):
                event = await subscription.__aiter__().__anext__()
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert isinstance(event, ToolsListChanged)
    assert "action_HEARD" in names
