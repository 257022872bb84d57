"""MCP resources: transcripts and skill prompts, tenant-scoped and paged (official client)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from server_helpers import serve_on_loopback

from pilothouse._facade import mcpresources
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(host="127.0.0.1", mcp_list_changed_seconds=0.1)


@asynccontextmanager
async def connect(base_url: str, key: str, **options: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy", **options) as client:
            yield client


async def run_echo(client: Client) -> str:
    result = await client.call_tool("action_ECHO", {"message": "hello", "input": "x"})
    assert result.meta is not None
    return str(result.meta["pilothouse/conversation_uuid"])


async def test_transcripts_and_skill_prompts_are_resources_of_the_keys_tenant(
    base_url: str,
    api_key: str,
    other_tenant_key: str,
    scripted: ScriptedModel,
) -> None:
    scripted.script.steps.append(Reply("hi there"))
    async with connect(base_url, api_key) as client:
        uuid = await run_echo(client)
        listed = await client.list_resources()
        uris = {str(r.uri) for r in listed.resources}
        transcript = await client.read_resource(f"pilothouse://conversations/{uuid}")
        skill = await client.read_resource("pilothouse://skills/BRVOICE")
    assert f"pilothouse://conversations/{uuid}" in uris
    assert "pilothouse://skills/BRVOICE" in uris
    [content] = transcript.contents
    assert isinstance(content, mt.TextResourceContents)
    body = json.loads(content.text)
    assert body["uuid"] == uuid and body["action_code"] == "ECHO"
    [prompt] = skill.contents
    assert isinstance(prompt, mt.TextResourceContents) and prompt.text
    # Another tenant's key neither lists nor reads it.
    async with connect(base_url, other_tenant_key) as client:
        theirs = {str(r.uri) for r in (await client.list_resources()).resources}
        with pytest.raises(MCPError) as refused:
            await client.read_resource(f"pilothouse://conversations/{uuid}")
    assert f"pilothouse://conversations/{uuid}" not in theirs
    assert refused.value.error.code == -32002


async def test_resources_are_paged_with_a_cursor(
    base_url: str,
    api_key: str,
    scripted: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(mcpresources, "_PAGE", 1)
    scripted.script.steps.extend([Reply("one"), Reply("two")])
    async with connect(base_url, api_key) as client:
        first_uuid = await run_echo(client)
        second_uuid = await run_echo(client)
        first = await client.list_resources()
        assert first.next_cursor is not None
        second = await client.list_resources(cursor=first.next_cursor)
    conversations = [
        str(r.uri)
        for page in (first, second)
        for r in page.resources
        if "conversations" in str(r.uri)
    ]
    # Newest first, one a page.
    assert conversations == [
        f"pilothouse://conversations/{second_uuid}",
        f"pilothouse://conversations/{first_uuid}",
    ]


async def test_a_key_with_an_allow_list_sees_resources_only_when_granted(
    base_url: str, server_state: ServerState, scripted: ScriptedModel
) -> None:
    keys = server_state.pilothouse.keys
    narrow, _ = await keys.create(name="actions", mcp_tools=["action_*"])
    granted, _ = await keys.create(name="reader", mcp_tools=["pilothouse_resources"])
    scripted.script.steps.append(Reply("hi"))
    async with connect(base_url, narrow) as client:
        uuid = await run_echo(client)
        hidden = (await client.list_resources()).resources
        with pytest.raises(MCPError):
            await client.read_resource(f"pilothouse://conversations/{uuid}")
    async with connect(base_url, granted) as client:
        shown = {str(r.uri) for r in (await client.list_resources()).resources}
    assert hidden == []
    assert f"pilothouse://conversations/{uuid}" in shown


async def test_a_subscribed_transcript_is_announced_when_the_conversation_gets_a_message(
    base_url: str, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.extend([Reply("first"), Reply("second")])
    updated: list[str] = []
    seen = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            seen.set()

    async with connect(base_url, api_key, message_handler=on_message) as client:
        uuid = await run_echo(client)
        uri = f"pilothouse://conversations/{uuid}"
        # The SDK warns that 2026-07-28 replaced it; the handshake protocols have it.
        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource(uri)
        await server_state.pilothouse.command.send_message(uuid, "and again")
        with anyio.fail_after(20):
            await seen.wait()
        transcript = await client.read_resource(uri)
    assert updated[0] == uri
    [content] = transcript.contents
    assert isinstance(content, mt.TextResourceContents)
    assert "second" in content.text


async def test_another_tenants_resource_cannot_be_subscribed(
    base_url: str, other_tenant_key: str, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("hi"))
    async with connect(base_url, api_key) as client:
        uuid = await run_echo(client)
        resources = client.server_capabilities.resources
        assert resources is not None and resources.subscribe
    async with connect(base_url, other_tenant_key) as other:
        with pytest.raises(MCPError) as refused:
            with pytest.warns(MCPDeprecationWarning):
                await other.subscribe_resource(f"pilothouse://conversations/{uuid}")
    assert refused.value.error.code == -32002


async def test_an_unsubscribed_transcript_is_not_announced_any_more(
    base_url: str, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.extend([Reply("one"), Reply("two"), Reply("three"), Reply("four")])
    updated: list[str] = []
    seen = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mt.ResourceUpdatedNotification):
            updated.append(str(message.params.uri))
            seen.set()

    async with connect(base_url, api_key, message_handler=on_message) as client:
        first = f"pilothouse://conversations/{await run_echo(client)}"
        second = f"pilothouse://conversations/{await run_echo(client)}"
        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource(first)
            await client.subscribe_resource(second)
            await client.unsubscribe_resource(first)
        # The first changes before the second and is checked first: were it
        # still subscribed, its notice would come no later than the second's.
        await server_state.pilothouse.command.send_message(first.rsplit("/", 1)[1], "more")
        await server_state.pilothouse.command.send_message(second.rsplit("/", 1)[1], "more")
        with anyio.fail_after(20):
            await seen.wait()
    assert updated == [second]


@asynccontextmanager
async def connect_modern(base_url: str, key: str) -> AsyncIterator[Client]:
    """A 2026-07-28 client: stateless, no session."""
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="2026-07-28") as client:
            yield client


async def test_a_resource_named_in_a_listen_stream_is_announced_on_the_stateless_protocol(
    base_url: str, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.extend([Reply("one"), Reply("two"), Reply("three"), Reply("four")])
    async with connect_modern(base_url, api_key) as client:
        watched = f"pilothouse://conversations/{await run_echo(client)}"
        quiet = f"pilothouse://conversations/{await run_echo(client)}"
        async with client.listen(resource_subscriptions=[watched]) as stream:
            assert stream.honored.resource_subscriptions == [watched]
            # The unwatched conversation changes first: were it announced, it
            # would come before the watched one.
            await server_state.pilothouse.command.send_message(quiet.rsplit("/", 1)[1], "more")
            await server_state.pilothouse.command.send_message(watched.rsplit("/", 1)[1], "more")
            with anyio.fail_after(20):
                event = await anext(aiter(stream))
        transcript = await client.read_resource(watched)
    assert getattr(event, "uri", None) == watched
    [content] = transcript.contents
    assert isinstance(content, mt.TextResourceContents) and "four" in content.text


async def test_another_tenants_resource_cannot_be_named_in_a_listen_stream(
    base_url: str, api_key: str, other_tenant_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("hi"))
    async with connect_modern(base_url, api_key) as client:
        uri = f"pilothouse://conversations/{await run_echo(client)}"
    async with connect_modern(base_url, other_tenant_key) as other:
        with pytest.raises(MCPError) as refused:
            async with other.listen(resource_subscriptions=[uri]):
                pass
    assert refused.value.error.code == -32002
