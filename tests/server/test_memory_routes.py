"""``/v1/memory``: the scoped memory door over HTTP (tenant and scope boundaries, bad input)."""

from __future__ import annotations

import httpx
import pytest

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
