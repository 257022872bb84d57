"""``/v1/memory``: the scoped memory door over HTTP (tenant and scope boundaries, bad input)."""

from __future__ import annotations

import json

import httpx
import pytest

from pilothouse.server._state import ServerState

pytestmark = pytest.mark.anyio


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


ALICE = {"scope": "user", "user_id": "alice"}


async def test_add_list_search_edit_forget_over_http(
    client: httpx.AsyncClient, api_key: str
) -> None:
    added = await client.post(
        "/v1/memory",
        json={**ALICE, "content": "Alice prefers invoices by email.", "memory_type": "preference"},
        headers=auth(api_key),
    )
    assert added.status_code == 201, added.text
    memory_id = added.json()["id"]
    listed = await client.get("/v1/memory", params=ALICE, headers=auth(api_key))
    assert [i["id"] for i in listed.json()["items"]] == [memory_id]
    found = await client.post(
        "/v1/memory/search",
        json={"query": "how to send invoices", "scopes": [{**ALICE, "limit": 3}]},
        headers=auth(api_key),
    )
    assert found.json()["hits"][0]["id"] == memory_id
    edited = await client.patch(
        f"/v1/memory/{memory_id}", json={**ALICE, "importance": 0.3}, headers=auth(api_key)
    )
    assert edited.status_code == 200 and edited.json()["importance"] == 0.3
    # Bob's scope does not reach Alice's record: 404, as a missing one.
    bob = {"scope": "user", "user_id": "bob"}
    assert (
        await client.delete(f"/v1/memory/{memory_id}", params=bob, headers=auth(api_key))
    ).status_code == 404
    assert (
        await client.get(f"/v1/memory/{memory_id}", params=bob, headers=auth(api_key))
    ).status_code == 404
    gone = await client.delete(f"/v1/memory/{memory_id}", params=ALICE, headers=auth(api_key))
    assert gone.status_code == 204
    assert (await client.get("/v1/memory", params=ALICE, headers=auth(api_key))).json() == {
        "items": []
    }


async def test_another_tenants_key_sees_nothing(
    client: httpx.AsyncClient, api_key: str, other_tenant_key: str
) -> None:
    added = await client.post(
        "/v1/memory", json={**ALICE, "content": "Alice is left-handed."}, headers=auth(api_key)
    )
    memory_id = added.json()["id"]
    theirs = await client.get("/v1/memory", params=ALICE, headers=auth(other_tenant_key))
    assert theirs.json() == {"items": []}
    assert (
        await client.delete(f"/v1/memory/{memory_id}", params=ALICE, headers=auth(other_tenant_key))
    ).status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"scope": "user", "content": "x"}, "user_id"),
        ({**ALICE, "content": ""}, "content"),
        ({**ALICE, "content": "x", "memory_type": "learning"}, "memory_type"),
        ({**ALICE, "content": "x", "importance": 2}, "importance"),
        ({"scope": "galaxy", "content": "x"}, "scope"),
        ({**ALICE, "content": "x", "colour": "red"}, "colour"),
    ],
)
async def test_bad_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, api_key: str, body: dict[str, object], field: str
) -> None:
    response = await client.post("/v1/memory", json=body, headers=auth(api_key))
    assert response.status_code == 422, response.text
    assert field in response.text


async def test_erase_user_needs_admin_and_reports_counts(
    client: httpx.AsyncClient, api_key: str, admin_key: str
) -> None:
    await client.post(
        "/v1/memory", json={**ALICE, "content": "Alice is vegan."}, headers=auth(api_key)
    )
    refused = await client.post(
        "/v1/memory/erase-user", json={"user_id": "alice"}, headers=auth(api_key)
    )
    assert refused.status_code == 403
    done = await client.post(
        "/v1/memory/erase-user",
        json={"user_id": "alice", "reason": "Art. 17"},
        headers=auth(admin_key),
    )
    assert done.status_code == 200
    assert done.json()["records"] == 1
    jobs = await client.get("/v1/memory/jobs", headers=auth(admin_key))
    assert jobs.json() == {"jobs": []}
    ran = await client.post("/v1/memory/jobs/run", headers=auth(admin_key))
    assert ran.json() == {"outcomes": []}


async def test_erasure_event_names_the_key_that_asked(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await client.post(
        "/v1/memory", json={**ALICE, "content": "Alice is vegan."}, headers=auth(admin_key)
    )
    done = await client.post(
        "/v1/memory/erase-user", json={"user_id": "alice"}, headers=auth(admin_key)
    )
    assert done.status_code == 200, done.text
    prefix = admin_key.split("_")[1]
    assert done.json()["requested_by"] == f"api-key:{prefix}"
    [event] = await server_state.pilothouse.memory.erasures("alice")
    assert event["requested_by"] == f"api-key:{prefix}"
    # The event names the key by its public prefix, never the key itself.
    assert admin_key not in json.dumps(event)


async def test_versions_and_export_over_http(
    client: httpx.AsyncClient, api_key: str, admin_key: str, other_tenant_key: str
) -> None:
    added = await client.post(
        "/v1/memory", json={**ALICE, "content": "Alice's manager is Dana."}, headers=auth(api_key)
    )
    memory_id = added.json()["id"]
    edited = await client.patch(
        f"/v1/memory/{memory_id}",
        json={**ALICE, "content": "Alice's manager is Eli."},
        headers=auth(api_key),
    )
    assert edited.status_code == 200, edited.text
    versions = await client.get(
        f"/v1/memory/{memory_id}/versions", params=ALICE, headers=auth(api_key)
    )
    assert versions.status_code == 200, versions.text
    old, current = versions.json()["versions"]
    assert (old["content"], old["replaced_by"]) == ("Alice's manager is Dana.", "edit")
    assert (current["content"], current["valid_to"]) == ("Alice's manager is Eli.", None)
    assert current["valid_from"] == old["valid_to"]
    bob = {"scope": "user", "user_id": "bob"}
    assert (
        await client.get(f"/v1/memory/{memory_id}/versions", params=bob, headers=auth(api_key))
    ).status_code == 404

    path = "/v1/memory/users/alice/export"
    assert (await client.get(path, headers=auth(api_key))).status_code == 403
    exported = await client.get(path, headers=auth(admin_key))
    assert exported.status_code == 200, exported.text
    document = exported.json()
    assert document["user_id"] == "alice" and document["tenant"] == "default"
    [memory] = document["memories"]
    assert [v["content"] for v in memory["versions"]] == [
        "Alice's manager is Dana.",
        "Alice's manager is Eli.",
    ]
    # Another tenant's admin key exports that tenant's Alice: nothing here.
    theirs = (await client.get(path, headers=auth(other_tenant_key))).json()
    assert theirs["memories"] == [] and theirs["tenant"] == "other"
    blank = await client.get("/v1/memory/users/%20/export", headers=auth(admin_key))
    assert blank.status_code == 422 and "user_id" in blank.text

    erased = await client.post(
        "/v1/memory/erase-user", json={"user_id": "alice"}, headers=auth(admin_key)
    )
    assert erased.json()["versions"] == 1
    assert (
        await client.get(f"/v1/memory/{memory_id}/versions", params=ALICE, headers=auth(api_key))
    ).status_code == 404
