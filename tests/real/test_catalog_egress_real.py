"""The egress policy on catalog URLs in the service, per tenant.

A real OpenAI-compatible upstream on loopback (``fault_upstream``) stands
for an internal service. Tenants write catalogs through the service's faces
(``PUT /v1/catalog``, ``POST``/``PUT /v1/catalog/{kind}``): every address an
entity names is refused with 422 naming the field, unless the operator's
deployment list or that tenant's own list allows it. At call time the
policy is the calling tenant's, even when two tenants' identical providers
share one HTTP client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.anyio]


def catalog(base_url: str) -> dict[str, Any]:
    return {
        "providers": [{"code": "UP", "kind": "openai-compatible", "base_url": base_url}],
        "models": [{"code": "UPMODEL", "provider": "UP", "model_name": "mock"}],
        "configurations": [{"code": "ONCE", "max_tokens": 64, "retry_count": 0}],
        "actions": [
            {
                "code": "ASK",
                "name": "Ask",
                "model": "UPMODEL",
                "configuration": "ONCE",
                "prompt": "Answer.",
                "ask_user": False,
            }
        ],
    }


@dataclass
class Service:
    http: httpx.AsyncClient
    state: ServerState
    keys: dict[str, str]

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    async def put_catalog(self, tenant: str, document: dict[str, Any]) -> httpx.Response:
        return await self.http.put(
            "/v1/catalog",
            content=yaml.safe_dump(document),
            headers={**self.headers(tenant), "Content-Type": "application/yaml"},
        )

    async def ask(self, tenant: str) -> httpx.Response:
        started = await self.http.post(
            "/v1/conversations", json={"action": "ASK"}, headers=self.headers(tenant)
        )
        assert started.status_code == 201, started.text
        uuid = started.json()["uuid"]
        return await self.http.post(
            f"/v1/conversations/{uuid}/messages", json={"text": "Hi"}, headers=self.headers(tenant)
        )


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        up.script(Reply(body=completion("internal answer")))
        yield up


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    # The deployment allows nothing private; tenant acme may reach loopback.
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'egress.db'}",
        secrets_file=None,
        egress_tenants={"acme": ["127.0.0.1"]},
    )


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[Service]:
    async with open_service(settings) as opened:
        yield opened


@asynccontextmanager
async def open_service(settings: Settings) -> AsyncIterator[Service]:
    state = ServerState(settings, server=ServerSettings(host="127.0.0.1"))
    await state.open()
    try:
        keys: dict[str, str] = {}
        for tenant in ("acme", "beta"):
            keys[tenant], _ = await state.pilothouse.keys.create(
                tenant=tenant, name=tenant, admin=True
            )
        app: FastAPI = create_app(settings, state=state)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver", timeout=60
            ) as http,
        ):
            yield Service(http, state, keys)
    finally:
        await state.aclose()


async def test_catalog_put_refuses_a_private_provider_url_naming_the_field(
    service: Service, upstream: Upstream
) -> None:
    refused = await service.put_catalog("beta", catalog(upstream.base_url))

    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["errors"]
    assert (error["entity"], error["code"], error["field"]) == ("provider", "UP", "base_url")
    assert "127.0.0.1 is a private, local or reserved address" in error["rule"]
    assert "PILOTHOUSE_EGRESS_TENANTS" in error["rule"]
    # Nothing was written: all or nothing.
    missing = await service.http.get("/v1/catalog/providers/UP", headers=service.headers("beta"))
    assert missing.status_code == 404
    assert upstream.requests == []


@pytest.mark.parametrize(
    ("kind", "document", "field"),
    [
        ("providers", {"code": "META", "kind": "openai-compatible",
                       "base_url": "http://169.254.169.254/latest"}, "base_url"),
        ("tools", {"code": "ADMIN", "name": "admin", "kind": "rest",
                   "settings": {"url": "http://10.0.0.5:8080/admin/{id}", "method": "GET"}},
         "settings.url"),
        ("tools", {"code": "SPEC", "name": "spec", "kind": "rest",
                   "implementation": "openapi:http://[::ffff:127.0.0.1]:9/openapi.json#getIt"},
         "implementation"),
        ("mcp_clients", {"name": "inside", "transport": "streamable-http",
                         "url": "http://192.168.1.10/mcp"}, "url"),
        ("vector_stores", {"code": "PGV", "kind": "pgvector",
                           "connection": "postgresql://app@172.16.0.3:5432/rag"}, "connection"),
    ],
)  # fmt: skip
async def test_catalog_entity_routes_refuse_private_urls_of_every_kind(
    service: Service, kind: str, document: dict[str, Any], field: str
) -> None:
    created = await service.http.post(
        f"/v1/catalog/{kind}", json=document, headers=service.headers("beta")
    )

    assert created.status_code == 422, created.text
    errors = created.json()["errors"]
    assert [e["field"] for e in errors] == [field]
    assert "private, local or reserved address" in errors[0]["rule"]
    listed = await service.http.get(f"/v1/catalog/{kind}", headers=service.headers("beta"))
    assert listed.json()["items"] == []


async def test_catalog_update_cannot_move_an_allowed_url_to_a_private_one(
    service: Service,
) -> None:
    public = {"code": "PUB", "kind": "openai-compatible", "base_url": "http://8.8.8.8/v1"}
    created = await service.http.post(
        "/v1/catalog/providers", json=public, headers=service.headers("beta")
    )
    assert created.status_code == 201, created.text

    moved = await service.http.put(
        "/v1/catalog/providers/PUB",
        json={**public, "base_url": "http://127.0.0.1:9/v1"},
        headers={**service.headers("beta"), "If-Match": f'"{created.json()["version"]}"'},
    )

    assert moved.status_code == 422, moved.text
    assert moved.json()["errors"][0]["field"] == "base_url"
    kept = await service.http.get("/v1/catalog/providers/PUB", headers=service.headers("beta"))
    assert kept.json()["base_url"] == "http://8.8.8.8/v1"


async def test_per_tenant_allow_list_applies_to_its_own_tenant_only(
    service: Service, upstream: Upstream, settings: Settings
) -> None:
    # acme's own list allows loopback: its write and its call pass.
    written = await service.put_catalog("acme", catalog(upstream.base_url))
    assert written.status_code == 200, written.text
    answered = await service.ask("acme")
    assert answered.status_code == 200, answered.text
    assert answered.json()["output"] == "internal answer"
    assert len(upstream.requests) == 1

    # beta may not write it...
    refused = await service.put_catalog("beta", catalog(upstream.base_url))
    assert refused.status_code == 422
    # ...nor call it when the operator wrote it into beta's catalog (an
    # identical provider, so the two tenants share one HTTP client).
    async with Pilothouse(settings, tenant="beta") as operator:
        await operator.catalog.import_documents([catalog(upstream.base_url)])
    failed = await service.ask("beta")
    assert failed.status_code == 200, failed.text
    assert failed.json()["status"] == "FA"
    assert "EgressRefusedError" in failed.json()["error"]
    assert "127.0.0.1 is a private, local or reserved address" in failed.json()["error"]
    assert len(upstream.requests) == 1

    # acme still reaches it through the shared client.
    again = await service.ask("acme")
    assert again.status_code == 200, again.text
    assert len(upstream.requests) == 2


async def test_deployment_allow_list_lets_the_operator_catalog_reach_loopback(
    tmp_path: Path, upstream: Upstream
) -> None:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'operator.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.0/8"],
    )
    async with Pilothouse(settings) as operator:
        await operator.catalog.import_documents([catalog(upstream.base_url)])
    async with Pilothouse(settings, catalog_egress=True) as served:
        result = await served.command.start_and_send("Hi", action="ASK")
    assert result.output == "internal answer"
    assert len(upstream.requests) == 1


async def test_rest_tool_outside_the_policy_is_refused_at_call_time_as_a_tool_error(
    tmp_path: Path, upstream: Upstream
) -> None:
    # The model upstream (127.0.0.1) is allowed; the tool's server (127.0.0.2) is not.
    with running_upstream("127.0.0.2") as internal:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'tool.db'}",
            secrets_file=None,
            egress_allow=["127.0.0.1"],
        )
        document = catalog(upstream.base_url)
        document["tools"] = [
            {
                "code": "INSIDE",
                "name": "inside",
                "kind": "rest",
                "description": "An internal service.",
                "settings": {"url": f"{internal.base_url}/secrets", "method": "GET"},
                "input_schema": {"type": "object", "properties": {}},
            }
        ]
        document["actions"][0]["tools"] = ["INSIDE"]
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "inside", "arguments": "{}"},
        }
        upstream.script(
            Reply(body=completion(None, [call])), Reply(body=completion("could not reach it"))
        )
        async with Pilothouse(settings) as operator:
            await operator.catalog.import_documents([document])
        async with Pilothouse(settings, catalog_egress=True) as served:
            result = await served.command.start_and_send("Hi", action="ASK")
            transcript = await served.query.get_transcript(result.conversation_uuid)

    assert result.output == "could not reach it"
    assert internal.requests == []
    (recorded,) = transcript.tool_calls
    assert recorded.status == "failed"
    assert "EgressRefusedError" in (recorded.result or "")


STDIO_CLIENT = {
    "name": "leak",
    "transport": "stdio",
    "command": "cat",
    "args": ["/proc/1/environ"],
}


async def test_a_tenant_may_not_write_a_stdio_mcp_client_unless_the_operator_allows_it(
    service: Service, settings: Settings
) -> None:
    # A stdio client is a command the server runs, with its environment.
    posted = await service.http.post(
        "/v1/catalog/mcp_clients", json=STDIO_CLIENT, headers=service.headers("acme")
    )
    put = await service.put_catalog("beta", {"mcp_clients": [STDIO_CLIENT]})
    for refused in (posted, put):
        assert refused.status_code == 422, refused.text
        (error,) = refused.json()["errors"]
        assert (error["code"], error["field"]) == ("leak", "transport")
        assert "runs a command on the server" in error["rule"]
        assert "PILOTHOUSE_TENANT_MCP_STDIO" in error["rule"]
    for tenant in ("acme", "beta"):
        missing = await service.http.get(
            "/v1/catalog/mcp_clients/leak", headers=service.headers(tenant)
        )
        assert missing.status_code == 404

    # The operator's opt-in: the same write is taken.
    trusting = settings.model_copy(update={"tenant_mcp_stdio": True})
    async with open_service(trusting) as allowed:
        taken = await allowed.http.post(
            "/v1/catalog/mcp_clients", json=STDIO_CLIENT, headers=allowed.headers("acme")
        )
    assert taken.status_code == 201, taken.text


async def test_direct_and_worker_tool_calls_check_the_callers_tenant_policy(
    tmp_path: Path,
) -> None:
    # Tenant acme may reach 127.0.0.2; beta may not; the deployment allows nothing private.
    with running_upstream("127.0.0.2") as internal:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{tmp_path / 'direct.db'}",
            secrets_file=None,
            egress_tenants={"acme": ["127.0.0.2"]},
        )
        tool = {
            "code": "INSIDE",
            "name": "inside",
            "kind": "rest",
            "description": "An internal service.",
            "settings": {"url": f"{internal.base_url}/chat/completions", "method": "POST"},
            "input_schema": {"type": "object", "properties": {}},
        }
        internal.script(
            Reply(body=completion("inside answer")), Reply(body=completion("inside answer"))
        )
        async with Pilothouse(settings) as operator:
            for tenant in ("acme", "beta"):
                await operator.for_tenant(tenant).catalog.import_documents([{"tools": [tool]}])
        async with Pilothouse(settings, catalog_egress=True) as served:
            acme, beta = served.for_tenant("acme"), served.for_tenant("beta")
            allowed = await acme.command.call_tool("inside", {})
            refused = await beta.command.call_tool("inside", {})
            worker_allowed = await acme.events.run_tool("inside", {})
            worker_refused = await beta.events.run_tool("inside", {})

    assert allowed.error_code is None, allowed.content
    assert refused.error_code is not None and "EgressRefusedError" in refused.content
    assert worker_allowed.error is None, worker_allowed
    assert "EgressRefusedError" in (worker_refused.error or "")
    # Only acme's two calls reached the internal service.
    assert len(internal.requests) == 2
