"""Scoped memory over JSON-RPC: the same operations and tenant rules as REST's ``/v1/memory``."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_helpers import auth

from pilothouse.server._state import ServerState

pytestmark = pytest.mark.anyio

M = "pilothouse/memory/{}/v1"


async def rpc(client: httpx.AsyncClient, key: str, method: str, params: Any) -> dict[str, Any]:
    response = await client.post(
        "/jsonrpc",
        json={"jsonrpc": "2.0", "id": 1, "method": M.format(method), "params": params},
        headers=auth(key),
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_memory_operations_over_jsonrpc_stay_in_the_keys_tenant(
    client: httpx.AsyncClient,
    server_state: ServerState,
    api_key: str,
    other_tenant_key: str,
) -> None:
    alice = {"scope": "user", "userId": "alice"}
    added = await rpc(client, api_key, "add", {**alice, "content": "Alice is allergic to peanuts."})
    memory_id = added["result"]["id"]
    found = await rpc(
        client, api_key, "search", {"query": "food allergy", "scopes": [{**alice, "limit": 3}]}
    )
    assert [h["content"] for h in found["result"]["hits"]] == ["Alice is allergic to peanuts."]
    listed = await rpc(client, api_key, "list", alice)
    assert [i["id"] for i in listed["result"]["items"]] == [memory_id]
    edited = await rpc(
        client,
        api_key,
        "edit",
        {**alice, "memoryId": memory_id, "content": "Alice is allergic to shellfish."},
    )
    assert edited["result"]["content"] == "Alice is allergic to shellfish."
    versions = await rpc(client, api_key, "versions", {**alice, "memoryId": memory_id})
    assert len(versions["result"]["versions"]) == 2

    # Another tenant's key reaches none of it: not found, nothing listed.
    other = await rpc(client, other_tenant_key, "get", {**alice, "memoryId": memory_id})
    assert other["error"]["code"] == -32001
    assert (await rpc(client, other_tenant_key, "list", alice))["result"]["items"] == []
    assert (await rpc(client, other_tenant_key, "forget", {**alice, "memoryId": memory_id}))[
        "error"
    ]["code"] == -32001

    # A scope without its key is refused, naming the field.
    missing = await rpc(client, api_key, "list", {"scope": "user"})
    assert missing["error"]["code"] == -32004
    assert "user_id" in str(missing["error"])

    assert (await rpc(client, api_key, "forget", {**alice, "memoryId": memory_id}))["result"] == {
        "forgotten": memory_id
    }
    assert (await rpc(client, api_key, "list", alice))["result"]["items"] == []
