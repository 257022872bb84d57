"""Every conversation records the face it came through and the API key that started it.

REST, the OpenAI-compatible face, ``/v1/invoke``, JSON-RPC, MCP and the
playground, each through the app; the key's prefix and name are kept, the
key never. The conversation's API output and its export show them. Each
face writes the turn's cost in plain notation: the example models cost 0,
which ``str(Decimal)`` wrote as ``0E-6``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import auth, parse_sse, serve_on_loopback

from pilothouse.server._state import ServerState
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

KEY_NAME = "test"  # the conftest's api_key fixture names its key so


async def _recorded(state: ServerState, key: str, uuid: str) -> tuple[str | None, str | None]:
    """The face and key name the conversation holds; its prefix is the key's."""
    conversation = await state.pilothouse.query.get_conversation(uuid)
    assert conversation.caller_key_prefix is not None
    # An API key is ph_<prefix>_<secret>: the prefix names it, the secret stays out.
    assert key.startswith(f"ph_{conversation.caller_key_prefix}_")
    return conversation.face, conversation.caller_key_name


async def test_rest_records_its_face_and_key_and_shows_them(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(api_key))
    assert started.status_code == 201, started.text
    body = started.json()
    # The API output names the caller: the face, the key's prefix and name, never the key.
    assert (body["face"], body["caller_key_name"]) == ("rest", KEY_NAME)
    assert api_key.startswith(f"ph_{body['caller_key_prefix']}_")
    assert api_key not in started.text
    scripted.script.steps.append(Reply("hi"))
    sent = await client.post(
        f"/v1/conversations/{body['uuid']}/messages",
        json={"text": "hello", "inputData": {"input": "x"}},
        headers=auth(api_key),
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["cost"] == "0"
    read = await client.get(f"/v1/conversations/{body['uuid']}", headers=auth(api_key))
    assert (read.json()["face"], read.json()["caller_key_name"]) == ("rest", KEY_NAME)
    assert read.json()["estimated_cost"] == "0"
    assert await _recorded(server_state, api_key, body["uuid"]) == ("rest", KEY_NAME)
    # Each message says who sent it: a later turn may come through another face.
    messages = await server_state.pilothouse.query.get_conversation_messages(body["uuid"])
    (sent_by,) = [m.data["caller"] for m in messages if m.role == "US" and m.data]
    prefix = body["caller_key_prefix"]
    assert sent_by == {"face": "rest", "key_prefix": prefix, "key_name": KEY_NAME}
    # The export carries it too.
    exported = await server_state.pilothouse.history.export(body["uuid"])
    assert exported["conversation"]["face"] == "rest"
    assert exported["conversation"]["caller_key_name"] == KEY_NAME


async def test_the_openai_face_records_itself(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("hi"))
    answer = await client.post(
        "/v1/chat/completions",
        json={"model": "action:ECHO", "messages": [{"role": "user", "content": "hello"}]},
        headers=auth(api_key),
    )
    assert answer.status_code == 200, answer.text
    uuid = answer.json()["pilothouse"]["conversation_uuid"]
    assert answer.json()["pilothouse"]["cost"] == "0"
    assert await _recorded(server_state, api_key, uuid) == ("openai", KEY_NAME)


async def test_invoke_records_itself(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("hi"))
    answer = await client.post(
        "/v1/invoke",
        json={"agentName": "Bot", "message": "hello", "model": "SMOLLM2"},
        headers=auth(api_key),
    )
    assert answer.status_code == 200, answer.text
    uuid = answer.json()["conversationUuid"]
    assert answer.json()["usage"]["cost"] == "0"
    assert await _recorded(server_state, api_key, uuid) == ("invoke", KEY_NAME)


async def test_json_rpc_records_itself(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("hi"))
    answer = await client.post(
        "/jsonrpc",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "pilothouse/command/startAndSend/v1",
            "params": {"action": "ECHO", "text": "hello", "inputData": {"input": "x"}},
        },
        headers=auth(api_key),
    )
    assert answer.status_code == 200, answer.text
    uuid = answer.json()["result"]["conversation_uuid"]
    assert answer.json()["result"]["cost"] == "0"
    assert await _recorded(server_state, api_key, uuid) == ("jsonrpc", KEY_NAME)


async def test_the_playground_records_itself(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    # The browser UI's pages post from its own origin, as a browser says.
    client.headers["Origin"] = "http://testserver"
    login = await client.post("/login", data={"api_key": api_key})
    assert login.status_code == 303, login.text
    scripted.script.steps.append(Reply("hi"))
    response = await client.post("/ui/chat", json={"target": "action:ECHO", "text": "hello"})
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    uuid = str(events[0][1]["uuid"])
    (finished,) = [data for name, data in events if name == "finished"]
    assert finished["cost"] == "0"
    assert await _recorded(server_state, api_key, uuid) == ("playground", KEY_NAME)


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


async def test_mcp_records_itself(
    base_url: str, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("hi"))
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as mcp:
            result = await mcp.call_tool("action_ECHO", {"message": "hello", "input": "x"})
    assert not result.is_error
    assert result.meta is not None
    uuid = result.meta["pilothouse/conversation_uuid"]
    assert await _recorded(server_state, api_key, uuid) == ("mcp", KEY_NAME)
