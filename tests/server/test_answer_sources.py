"""The sources of a retrieval-augmented answer, on every face.

An action linked to a collection answers with the chunks it was given:
REST's ``sources``, the OpenAI face's ``pilothouse.sources`` and
``annotations`` (streamed and not), ``/v1/invoke``'s ``sources``, JSON-RPC's
result and the MCP tool result's ``_meta``: document, heading path, chunk,
score, and which of them the answer cites.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import auth, parse_sse, serve_on_loopback

from pilothouse.server._state import ServerState
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import TextDocument

pytestmark = pytest.mark.anyio

CATALOG = (
    CatalogBuilder(scripted=False)
    .add("vector_stores", code="EMBED")
    .add("document_collections", code="HANDBOOK", store="EMBED", collection_name="handbook")
    .action(
        "ASKHB",
        model="SCRIPTEDM",
        configuration="DFLT",
        prompt="Answer from the handbook.",
        collections=["HANDBOOK"],
    )
)

TEXTS: list[dict[str, Any]] = [
    {
        "source": "hb:badges",
        "title": "Security guide",
        "text": "# Security\n\n## Badges\n\nReport lost badges to the front desk at once.",
        "format": "markdown",
    },
    {"source": "hb:travel", "text": "Book trains for trips under four hours.", "format": "text"},
]

ANSWER = "Report it at the front desk [1]."


@pytest.fixture
async def rag_state(server_state: ServerState, admin_key: str) -> AsyncIterator[ServerState]:
    await server_state.pilothouse.catalog.import_text(CATALOG.yaml())
    yield server_state


async def _ingest(client: httpx.AsyncClient, admin_key: str) -> None:
    response = await client.post(
        "/v1/knowledge/collections/HANDBOOK/documents",
        json={"texts": TEXTS},
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text


def _check(sources: list[dict[str, Any]], *, document: str = "document_id") -> None:
    assert sources, "no sources in the answer"
    first = sources[0]
    assert first["n"] == 1 and first["source"] == "hb:badges"
    assert first["title"] == "Security guide"
    assert first["heading"] == "Security > Badges"
    assert first["collection"] == "HANDBOOK"
    assert first["cited"] is True
    assert "front desk" in first["text"]
    assert first[document] and first["chunk_id" if document == "document_id" else "chunkId"]
    assert 0 < first["similarity"] <= 1 and first["score"] > 0
    # Only what the answer cites is marked cited.
    assert all(not s["cited"] for s in sources[1:])


async def _conversation(client: httpx.AsyncClient, key: str, action: str) -> str:
    created = await client.post("/v1/conversations", json={"action": action}, headers=auth(key))
    assert created.status_code == 201, created.text
    return created.json()["uuid"]


async def test_rest_turn_returns_its_sources(
    client: httpx.AsyncClient, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    await _ingest(client, admin_key)
    scripted.script.steps.append(Reply(ANSWER))
    uuid = await _conversation(client, admin_key, "ASKHB")
    sent = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "I lost my badge, what now?"},
        headers=auth(admin_key),
    )
    assert sent.status_code == 200, sent.text
    _check(sent.json()["sources"])


async def test_rest_stream_finishes_with_the_sources(
    client: httpx.AsyncClient, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    await _ingest(client, admin_key)
    scripted.script.steps.append(Reply(ANSWER))
    uuid = await _conversation(client, admin_key, "ASKHB")
    streamed = await client.post(
        f"/v1/conversations/{uuid}/messages?stream=true",
        json={"text": "I lost my badge, what now?"},
        headers=auth(admin_key),
    )
    assert streamed.status_code == 200, streamed.text
    finished = [data for event, data in parse_sse(streamed.text) if event == "finished"]
    _check(finished[-1]["sources"])


async def test_openai_face_returns_sources_and_citation_annotations(
    app: FastAPI,
    client: httpx.AsyncClient,
    rag_state: ServerState,
    admin_key: str,
    scripted: ScriptedModel,
) -> None:
    await _ingest(client, admin_key)
    scripted.script.steps.append(Reply(ANSWER))
    response = await client.post(
        "/v1/chat/completions",
        json={
            "model": "action:ASKHB",
            "messages": [{"role": "user", "content": "I lost my badge, what now?"}],
        },
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    _check(body["pilothouse"]["sources"])
    message = body["choices"][0]["message"]
    (annotation,) = message["annotations"]
    assert annotation["type"] == "url_citation"
    cite = annotation["url_citation"]
    assert message["content"][cite["start_index"] : cite["end_index"]] == "[1]"
    assert cite["url"] == "hb:badges" and cite["title"] == "Security guide"

    # The official client reads the annotation and keeps the extension.
    from openai import AsyncOpenAI

    # The official client is built on httpx2; its transport calls the app in-process.
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    openai_client = AsyncOpenAI(
        base_url="http://testserver/v1", api_key=admin_key, http_client=http
    )
    scripted.script.steps.append(Reply(ANSWER))
    answer = await openai_client.chat.completions.create(
        model="action:ASKHB",
        messages=[{"role": "user", "content": "I lost my badge, what now?"}],
    )
    annotations = answer.choices[0].message.annotations or []
    assert [a.url_citation.url for a in annotations] == ["hb:badges"]
    extension = (answer.model_extra or {})["pilothouse"]
    _check(extension["sources"])


async def test_openai_stream_carries_annotations_and_sources(
    client: httpx.AsyncClient, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    await _ingest(client, admin_key)
    scripted.script.steps.append(Reply(ANSWER))
    response = await client.post(
        "/v1/chat/completions",
        json={
            "model": "action:ASKHB",
            "stream": True,
            "messages": [{"role": "user", "content": "I lost my badge, what now?"}],
        },
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: {")
    ]
    annotated = [c for c in chunks if c["choices"] and "annotations" in c["choices"][0]["delta"]]
    assert annotated[0]["choices"][0]["delta"]["annotations"][0]["url_citation"]["url"] == (
        "hb:badges"
    )
    extended = [c for c in chunks if "pilothouse" in c]
    _check(extended[-1]["pilothouse"]["sources"])
    assert extended[-1]["choices"][0]["finish_reason"] == "stop"


async def test_invoke_returns_its_sources(
    client: httpx.AsyncClient, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    await _ingest(client, admin_key)
    scripted.script.steps.append(Reply(ANSWER))
    response = await client.post(
        "/v1/invoke",
        json={
            "agentName": "Helpdesk",
            "model": "SMOLLM2",
            "message": "I lost my badge, what now?",
            "collection": "HANDBOOK",
        },
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text
    _check(response.json()["sources"], document="documentId")


async def test_jsonrpc_result_carries_the_sources(
    client: httpx.AsyncClient, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    await _ingest(client, admin_key)
    scripted.script.steps.append(Reply(ANSWER))
    sent = await client.post(
        "/jsonrpc",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "pilothouse/command/startAndSend/v1",
            "params": {"action": "ASKHB", "text": "I lost my badge, what now?"},
        },
        headers=auth(admin_key),
    )
    _check(sent.json()["result"]["sources"])


async def test_mcp_tool_result_carries_the_sources_in_its_meta(
    app: FastAPI, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    await rag_state.pilothouse.knowledge.ingest(
        "HANDBOOK",
        [
            TextDocument(t["source"], t["text"], format=t["format"], title=t.get("title"))
            for t in TEXTS
        ],
    )
    scripted.script.steps.append(Reply(ANSWER))
    async with (
        serve_on_loopback(app) as base_url,
        httpx2.AsyncClient(headers=auth(admin_key), timeout=30) as http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as mcp,
    ):
        called = await mcp.call_tool("action_ASKHB", {"message": "I lost my badge, what now?"})
    assert not called.is_error, called.content
    assert called.meta is not None
    _check(called.meta["pilothouse/sources"])


async def test_a_turn_without_collections_has_no_sources(
    client: httpx.AsyncClient, rag_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("hello"))
    uuid = await _conversation(client, admin_key, "ECHO")
    sent = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "hi", "input_data": {"input": "x"}},
        headers=auth(admin_key),
    )
    assert sent.status_code == 200, sent.text
    assert sent.json()["sources"] == []
