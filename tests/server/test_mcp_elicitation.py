"""MCP elicitation: approval of ``authorized`` tools and an action's questions.

The official ``mcp`` client declares elicitation by giving an
``elicitation_callback``; the server then asks through it, and without one
the answers are as before (denied; questions for ``pilothouse_answer``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback

from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

ADD = {
    "code": "ADD",
    "name": "add",
    "kind": "python",
    "implementation": "mcp_tool_helpers:add",
    "description": "Add two numbers.",
    "policy": "authorized",
}


@pytest.fixture
def server_settings(server_settings: Settings) -> Settings:
    return server_settings.model_copy(update={"catalog_code": ["mcp_tool_helpers"]})


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


class User:
    """Answers elicitations as scripted, and remembers what it was asked."""

    def __init__(self, *replies: mt.ElicitResult) -> None:
        self.replies = list(replies)
        self.asked: list[mt.ElicitRequestParams] = []

    async def __call__(self, context: Any, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        del context
        self.asked.append(params)
        return self.replies.pop(0)


@asynccontextmanager
async def connect(base_url: str, key: str, user: User | None) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"X-API-Key": key}, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy", elicitation_callback=user) as client:
            yield client


def text(result: mt.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


async def status(state: ServerState, result: mt.CallToolResult) -> tuple[str, list[str]]:
    assert result.meta is not None
    transcript = await state.pilothouse.query.get_transcript(
        result.meta["pilothouse/conversation_uuid"]
    )
    return str(transcript.status), [str(c.status) for c in transcript.tool_calls]


async def test_an_authorized_tool_runs_when_the_user_approves_it(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    await server_state.pilothouse.catalog.create("tools", ADD)
    user = User(mt.ElicitResult(action="accept", content={"approve": True}))
    async with connect(base_url, api_key, user) as client:
        result = await client.call_tool("tool_add", {"a": 2, "b": 3})
    assert not result.is_error, text(result)
    assert text(result) == '{"sum": 5}'
    [asked] = user.asked
    assert isinstance(asked, mt.ElicitRequestFormParams)
    assert "'add'" in asked.message and '"a": 2' in asked.message
    assert await status(server_state, result) == ("CO", ["succeeded"])


@pytest.mark.parametrize(
    "reply",
    [
        mt.ElicitResult(action="accept", content={"approve": False}),
        mt.ElicitResult(action="decline"),
        mt.ElicitResult(action="cancel"),
    ],
)
async def test_an_authorized_tool_the_user_does_not_approve_is_denied(
    base_url: str, api_key: str, server_state: ServerState, reply: mt.ElicitResult
) -> None:
    await server_state.pilothouse.catalog.create("tools", ADD)
    async with connect(base_url, api_key, User(reply)) as client:
        result = await client.call_tool("tool_add", {"a": 2, "b": 3})
    assert result.is_error
    assert await status(server_state, result) == ("FA", ["denied"])


async def test_without_elicitation_an_authorized_tool_is_denied_as_before(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    await server_state.pilothouse.catalog.create("tools", ADD)
    async with connect(base_url, api_key, None) as client:
        result = await client.call_tool("tool_add", {"a": 2, "b": 3})
    assert result.is_error and "needs an authorizer" in text(result)


QUESTION = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}


async def test_an_actions_question_is_asked_by_elicitation_and_the_turn_goes_on(
    base_url: str, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.extend(
        [ToolCall("AskUserQuestion", QUESTION, call_id="q1"), Reply("Ordered size M.")]
    )
    user = User(mt.ElicitResult(action="accept", content={"size": "M"}))
    async with connect(base_url, api_key, user) as client:
        result = await client.call_tool("action_ECHO", {"message": "Order", "input": "shirts"})
    assert not result.is_error, text(result)
    assert text(result) == "Ordered size M."
    [asked] = user.asked
    assert isinstance(asked, mt.ElicitRequestFormParams)
    size = asked.requested_schema["properties"]["size"]
    assert (size["title"], size["enum"]) == ("Which size?", ["S", "M"])
    assert (await status(server_state, result))[0] == "CO"


async def test_a_declined_question_comes_back_for_pilothouse_answer(
    base_url: str, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(ToolCall("AskUserQuestion", QUESTION, call_id="q1"))
    user = User(mt.ElicitResult(action="decline"))
    async with connect(base_url, api_key, user) as client:
        result = await client.call_tool("action_ECHO", {"message": "Order", "input": "shirts"})
    assert result.is_error and "pilothouse_answer" in text(result)
    assert len(user.asked) == 1
