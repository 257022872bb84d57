"""The gateway proxy on its own: audit rows per call, and a failed audit never passes silently."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from pilothouse.errors import PilothouseError
from pilothouse.providers import SecretResolver
from pilothouse.providers._egress import EgressPolicy
from pilothouse.store import NewGatewayCall
from pilothouse.tools._gateway import GatewayCaller, GatewayProxy

pytestmark = pytest.mark.anyio

DOCUMENT = {
    "openapi": "3.1.0",
    "info": {"title": "CRM", "version": "1"},
    "servers": [{"url": "http://127.0.0.1:9"}],
    "paths": {
        "/customers/{id}": {
            "get": {
                "x-ai-enabled": True,
                "summary": "Read a customer",
                "parameters": [
                    {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                    {"name": "token", "in": "query", "schema": {"type": "string"}},
                ],
            }
        }
    },
}


def proxy_for(
    tmp_path: Path, audit: list[NewGatewayCall] | None, seen: list[httpx.Request]
) -> tuple[GatewayProxy, Path]:
    async def sink(call: NewGatewayCall) -> None:
        if audit is None:
            raise RuntimeError("INSERT INTO gateway_call ... [parameters: secret-ish]")
        audit.append(call)

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"id": request.url.path.rsplit("/", 1)[-1]})

    proxy = GatewayProxy(
        SecretResolver(env={"CRM_TOKEN": "tok-123"}),
        EgressPolicy.parse(["127.0.0.1"]),
        sink,
        http=httpx.AsyncClient(transport=httpx.MockTransport(answer)),
    )
    document = tmp_path / "crm.json"
    document.write_text(json.dumps(DOCUMENT))
    return proxy, document


def row(document: Path) -> dict[str, object]:
    return {
        "implementation": f"openapi:{document}",
        "settings": {"headers": {"X-Token": "@secrets(CRM_TOKEN)"}, "gateway": {}},
    }


async def test_each_call_hands_one_row_without_values_to_the_sink(tmp_path: Path) -> None:
    audit: list[NewGatewayCall] = []
    seen: list[httpx.Request] = []
    proxy, document = proxy_for(tmp_path, audit, seen)
    [operation] = await proxy.operations("default", "CRM", 1, row(document))
    caller = GatewayCaller("default", "mcp", key_prefix="0a1b2c3d")
    result = await proxy.call(operation, {"id": "7", "token": "query-secret"}, caller)
    await proxy.aclose()
    assert (result.is_error, result.status_code) == (False, 201)
    assert seen[0].headers["x-token"] == "tok-123"
    [call] = audit
    assert (call.operation, call.status_code, call.outcome, call.key_prefix) == (
        "GET /customers/{id}",
        201,
        "ok",
        "0a1b2c3d",
    )
    assert "tok-123" not in repr(call) and "query-secret" not in repr(call)


async def test_a_failed_audit_row_fails_the_call_without_the_databases_text(
    tmp_path: Path,
) -> None:
    seen: list[httpx.Request] = []
    proxy, document = proxy_for(tmp_path, None, seen)
    [operation] = await proxy.operations("default", "CRM", 1, row(document))
    with pytest.raises(PilothouseError) as raised:
        await proxy.call(operation, {"id": "7"}, GatewayCaller("default", "turn"))
    await proxy.aclose()
    assert len(seen) == 1
    assert str(raised.value) == "the call was sent (ok) but its audit row could not be written"
