from __future__ import annotations

import time
from typing import Any, get_args

import httpx
import pytest
from server_helpers import auth

from pilothouse.catalog import KINDS
from pilothouse.server._catalog_routes import KindName

pytestmark = pytest.mark.anyio

PERSONA = {"code": "CRITIC", "name": "Critic", "type": "EDIT", "prompt": "Be critical."}


def test_kind_names_follow_the_catalog() -> None:
    assert list(get_args(KindName)) == list(KINDS)


async def test_list_needs_a_key(client: httpx.AsyncClient) -> None:
    response = await client.get("/v1/catalog/actions")
    assert response.status_code == 401
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["www-authenticate"].startswith("Bearer")


async def test_x_api_key_header_is_accepted(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get("/v1/catalog/actions", headers={"X-API-Key": api_key})
    assert response.status_code == 200


async def test_unknown_key_is_401(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get("/v1/catalog/actions", headers=auth(api_key + "x"))
    assert response.status_code == 401
    assert api_key not in response.text


async def test_list_and_get(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get("/v1/catalog/actions", headers=auth(api_key))
    assert response.status_code == 200
    codes = [item["code"] for item in response.json()["items"]]
    assert codes == sorted(codes)
    assert {"COMPETITORS", "ECHO", "SUMBRAND"} <= set(codes)
    one = await client.get("/v1/catalog/actions/SUMBRAND", headers=auth(api_key))
    assert one.status_code == 200
    assert one.json()["persona"] == "EDITOR"
    assert one.headers["etag"] == f'"{one.json()["version"]}"'


async def test_unknown_kind_is_422_naming_the_kinds(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.get("/v1/catalog/widgets", headers=auth(api_key))
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "path:kind"


async def test_missing_entity_is_404(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.get("/v1/catalog/actions/NOPE", headers=auth(api_key))
    assert response.status_code == 404
    assert response.json()["detail"] == "action 'NOPE' not found"


async def test_create_needs_admin(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post("/v1/catalog/personas", json=PERSONA, headers=auth(api_key))
    assert response.status_code == 403


async def test_create_update_delete(client: httpx.AsyncClient, admin_key: str) -> None:
    headers = auth(admin_key)
    created = await client.post("/v1/catalog/personas", json=PERSONA, headers=headers)
    assert created.status_code == 201, created.text
    assert created.json()["version"] == 1
    assert created.headers["location"] == "/v1/catalog/personas/CRITIC"
    duplicate = await client.post("/v1/catalog/personas", json=PERSONA, headers=headers)
    assert duplicate.status_code == 409

    changed = {**PERSONA, "prompt": "Be very critical."}
    updated = await client.put(
        "/v1/catalog/personas/CRITIC", json=changed, headers={**headers, "If-Match": '"1"'}
    )
    assert updated.status_code == 200, updated.text
    assert updated.json()["version"] == 2
    stale = await client.put(
        "/v1/catalog/personas/CRITIC",
        json={**changed, "prompt": "x", "version": 1},
        headers=headers,
    )
    assert stale.status_code == 409
    assert "version 2" in stale.json()["detail"]
    unversioned = await client.put("/v1/catalog/personas/CRITIC", json=changed, headers=headers)
    assert unversioned.status_code == 428

    deleted = await client.delete("/v1/catalog/personas/CRITIC", headers=headers)
    assert deleted.status_code == 204
    gone = await client.get("/v1/catalog/personas/CRITIC", headers=headers)
    assert gone.status_code == 404


async def test_validation_error_names_field_and_rule(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    bad = {"code": "bad code!", "prompt": "x", "type": "NOPE"}
    response = await client.post("/v1/catalog/personas", json=bad, headers=auth(admin_key))
    assert response.status_code == 422
    body = response.json()
    assert response.headers["content-type"] == "application/problem+json"
    assert body["title"] == "Catalog validation failed"
    fields = {e["field"] for e in body["errors"]}
    assert "code" in fields
    assert all(set(e) == {"entity", "code", "field", "rule"} for e in body["errors"])


async def test_unknown_reference_is_422(client: httpx.AsyncClient, admin_key: str) -> None:
    response = await client.post(
        "/v1/catalog/personas", json={**PERSONA, "type": "NOPE"}, headers=auth(admin_key)
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["rule"] == "unknown persona type 'NOPE'"


async def test_delete_referenced_is_409_naming_the_referrer(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    response = await client.delete("/v1/catalog/personas/EDITOR", headers=auth(admin_key))
    assert response.status_code == 409
    assert "action 'SUMBRAND'" in response.json()["detail"]


async def test_export_yaml_and_json(client: httpx.AsyncClient, api_key: str) -> None:
    yaml = await client.get("/v1/catalog", headers=auth(api_key))
    assert yaml.status_code == 200
    assert yaml.headers["content-type"].startswith("application/yaml")
    assert "SUMBRAND" in yaml.text
    as_json = await client.get(
        "/v1/catalog", headers={**auth(api_key), "Accept": "application/json"}
    )
    assert {"COMPETITORS", "SUMBRAND"} <= {a["code"] for a in as_json.json()["actions"]}


async def test_import_yaml_all_or_nothing(client: httpx.AsyncClient, admin_key: str) -> None:
    headers = {**auth(admin_key), "Content-Type": "application/yaml"}
    good = "personas:\n  - code: CRITIC\n    type: EDIT\n    prompt: Be critical.\n"
    response = await client.put("/v1/catalog", content=good, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["counts"]["personas"]["created"] == 1
    bad = (
        "personas:\n  - code: OTHER\n    type: EDIT\n    prompt: x\n"
        "  - code: BROKEN\n    type: NOPE\n    prompt: y\n"
    )
    refused = await client.put("/v1/catalog", content=bad, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["errors"][0]["rule"] == "unknown persona type 'NOPE'"
    missing = await client.get("/v1/catalog/personas/OTHR", headers=auth(admin_key))
    assert missing.status_code == 404


async def test_yaml_alias_bomb_put_is_422_and_writes_nothing(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    levels = ['a: &a ["x","x","x","x","x","x","x","x","x"]'] + [
        f"{name}: &{name} [{','.join([f'*{prev}'] * 9)}]"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    ]
    headers = {**auth(admin_key), "Content-Type": "application/yaml"}
    refused = await client.put("/v1/catalog", content="\n".join(levels), headers=headers)
    assert refused.status_code == 422
    assert "alias bomb" in refused.text


async def test_yaml_flow_collections_nested_deep_are_refused_at_once(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    # ruamel's scanner keeps a possible key per open flow level and walks
    # them all at each token: 1,600 open brackets (3 kB) cost it seconds of
    # the server's CPU before the parser gave up.
    document = "tools:\n  - settings: " + "[" * 1600 + "]" * 1600 + "\n"
    headers = {**auth(admin_key), "Content-Type": "application/yaml"}
    started = time.monotonic()

    refused = await client.put("/v1/catalog", content=document, headers=headers)

    assert time.monotonic() - started < 1
    assert refused.status_code == 422
    assert refused.json()["errors"] == [
        {
            "entity": "catalog",
            "code": None,
            "field": "yaml",
            "rule": "flow collections ([...] and {...}) nest more than 64 deep; "
            "write the deeper levels in block style or nest them less",
        }
    ]


async def test_a_json_document_nested_too_deep_is_refused_in_json_terms(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    # A JSON document has no block style to move the deeper levels into.
    nested: Any = "x"
    for _ in range(100):
        nested = [nested]
    document = {"tools": [{"code": "T", "settings": {"deep": nested}}]}

    refused = await client.put("/v1/catalog", json=document, headers=auth(admin_key))

    assert refused.status_code == 422
    assert [(e["field"], e["rule"]) for e in refused.json()["errors"]] == [
        ("yaml", "arrays and objects nest more than 64 deep; nest them less")
    ]


async def test_import_json(client: httpx.AsyncClient, admin_key: str) -> None:
    document = {"personas": [{"code": "CRITIC", "type": "EDIT", "prompt": "Be critical."}]}
    response = await client.put("/v1/catalog", json=document, headers=auth(admin_key))
    assert response.status_code == 200, response.text
    assert response.json()["changed"] is True


async def test_import_malformed_json_is_400(client: httpx.AsyncClient, admin_key: str) -> None:
    response = await client.put(
        "/v1/catalog",
        content=b"{nope",
        headers={**auth(admin_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 400


async def test_tenants_never_see_each_other(
    client: httpx.AsyncClient, admin_key: str, other_tenant_key: str
) -> None:
    created = await client.post("/v1/catalog/personas", json=PERSONA, headers=auth(admin_key))
    assert created.status_code == 201
    other = await client.get("/v1/catalog/personas/CRITIC", headers=auth(other_tenant_key))
    assert other.status_code == 404
    deleted = await client.delete("/v1/catalog/personas/CRITIC", headers=auth(other_tenant_key))
    assert deleted.status_code == 404
    listed = await client.get("/v1/catalog/personas", headers=auth(other_tenant_key))
    assert "CRITIC" not in [p["code"] for p in listed.json()["items"]]


async def test_list_renders_lazily_loaded_relationships(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.get("/v1/catalog/skills", headers=auth(api_key))
    assert response.status_code == 200
    assert response.json()["items"]


async def test_lone_surrogate_in_json_is_a_4xx_not_a_500(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    response = await client.put(
        "/v1/catalog",
        content=b'{"\\ud800": []}',
        headers={**auth(admin_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 422
    # The input rules name the key (in a body, its place) and the character.
    assert response.json()["errors"] == [
        {
            "field": "body (a key)",
            "rule": "contains a lone surrogate (U+D800), which cannot be stored; "
            "remove or replace it",
        }
    ]


async def test_post_catalog_actions_and_skills_is_201_not_500(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    # rendering the new row read its links outside the greenlet.
    skill = await client.post(
        "/v1/catalog/skills", json={"code": "KIND", "prompt": "Be kind."}, headers=auth(admin_key)
    )
    assert skill.status_code == 201, skill.text
    action = await client.post(
        "/v1/catalog/actions",
        json={
            "code": "GREET",
            "model": "SMOLLM2",
            "configuration": "DFLT",
            "prompt": "Greet.",
            "skills": ["KIND"],
        },
        headers=auth(admin_key),
    )
    assert action.status_code == 201, action.text
    assert action.json()["skills"] == ["KIND"]
    assert action.headers["location"] == "/v1/catalog/actions/GREET"


@pytest.mark.parametrize(
    ("kind", "body", "entity", "limit"),
    [
        ("providers", {"code": "OPENAI", "kind": "openai"}, "provider", 4),
        ("configurations", {"code": "DEFAULT", "max_tokens": 8}, "configuration", 4),
        ("memory_strategies", {"code": "WINDOW20", "kind": "WINDOW"}, "memory strategy", 4),
        ("personas", {"code": "COPYWRITER", "prompt": "p"}, "persona", 8),
        ("agents", {"code": "ANALYST01", "application": "BRANDS"}, "agent", 8),
    ],
)
async def test_rest_refuses_a_key_longer_than_the_erp_length(
    client: httpx.AsyncClient,
    admin_key: str,
    kind: str,
    body: dict[str, object],
    entity: str,
    limit: int,
) -> None:
    response = await client.post(f"/v1/catalog/{kind}", json=body, headers=auth(admin_key))
    assert response.status_code == 422
    code = str(body["code"])
    assert response.json()["errors"] == [
        {
            "entity": entity,
            "code": code,
            "field": "code",
            "rule": f"at most {limit} characters (got {len(code)})",
        }
    ]
    missing = await client.get(f"/v1/catalog/{kind}/{code}", headers=auth(admin_key))
    assert missing.status_code == 404


async def test_a_script_tool_above_the_deployment_ceilings_is_422_naming_them(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    tool = {
        "code": "NOISY",
        "name": "noisy",
        "kind": "script",
        "implementation": "print('x' * 10**9)",
        "settings": {"max_output_bytes": 1e10, "timeout": 3600},
    }
    response = await client.post("/v1/catalog/tools", json=tool, headers=auth(admin_key))
    assert response.status_code == 422, response.text
    rules = {e["field"]: e["rule"] for e in response.json()["errors"]}
    assert rules["settings.max_output_bytes"].startswith(
        "10000000000 is above this deployment's ceiling of 1048576 bytes "
        "(PILOTHOUSE_SCRIPT_MAX_OUTPUT_BYTES)"
    )
    assert "ceiling of 60 s (PILOTHOUSE_SCRIPT_MAX_TIMEOUT)" in rules["settings.timeout"]
    missing = await client.get("/v1/catalog/tools/NOISY", headers=auth(admin_key))
    assert missing.status_code == 404


async def test_a_rest_tool_url_with_a_format_spec_is_422_naming_the_field(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    tool = {
        "code": "GET_ITEM",
        "name": "get_item",
        "kind": "rest",
        "settings": {"url": "https://api.example.com/items/{id:>4000000000}"},
    }
    response = await client.post("/v1/catalog/tools", json=tool, headers=auth(admin_key))

    assert response.status_code == 422
    assert [(e["field"], e["rule"]) for e in response.json()["errors"]] == [
        (
            "settings.url",
            "template field '{id:>4000000000}' must be a plain name; "
            "write '{id}' (no conversion or format spec)",
        )
    ]
    missing = await client.get("/v1/catalog/tools/GET_ITEM", headers=auth(admin_key))
    assert missing.status_code == 404
