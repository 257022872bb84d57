"""Tenant B's admin key against tenant A's objects, on every route, JSON-RPC method and MCP tool.

The routes are read from the app's own route table, the methods from the
JSON-RPC registry, the tools from what the MCP server lists to B: a new one
that ``tenant_probes`` does not classify fails here. B reads, writes, runs
and lists with A's conversation uuids, catalog codes, memory ids, document
sources and chat memory id; the walk fails on any effect on A:

- A's text (:data:`~tenant_world.MARK`) in any answer B gets;
- A's text in any model request made while B's calls run (A's memory,
  documents or transcript reaching B's turn, or A's job run for B);
- any change to a row A owns (every table, compared before and after);
- any answer of 500 or more.

It runs on SQLite and on PostgreSQL, over the ASGI app in this process.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from tenant_probes import A_ONLY_TOOLS, ASK, REST, ROUTED, RPC, Call, Global, mcp_arguments
from tenant_world import MARK, World, build_world, dump_rows, seed_tenants

from database_templates import PostgresDatabases, SqliteTemplates
from pilothouse.server._jsonrpc_methods import METHODS
from pilothouse.server._rpc_router import RpcRoute
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

MODERN = "2026-07-28"
ORIGIN = "http://testserver"


@pytest.fixture
def server_config() -> ServerSettings:
    """No background worker: the operator's memory worker and question sweep run every
    tenant's work by design, and what B's calls do must not hide among it."""
    return ServerSettings(
        host="127.0.0.1",
        shutdown_grace_seconds=2.0,
        memory_worker_seconds=0,
        question_sweep_seconds=0,
        jsonrpc_actions=ROUTED,
    )


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def server_settings(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_templates: SqliteTemplates
) -> Settings:
    """The two tenants' catalogs on a fresh SQLite file or PostgreSQL database."""
    if request.param == "sqlite":
        url = sqlite_templates.fresh(tmp_path / "walk.db", seed_tenants)
    else:
        databases: PostgresDatabases = request.getfixturevalue("postgres_databases")
        url = databases.fresh(seed_tenants)
    return Settings(database_url=url, secrets_file=None)


@pytest.fixture
async def database(server_settings: Settings) -> AsyncIterator[Database]:
    """A connection of the test's own to the service's database (A's rows are read here)."""
    db = Database(server_settings.database_url)
    yield db
    await db.dispose()


def _route_table(app: FastAPI) -> set[tuple[str, str]]:
    table: set[tuple[str, str]] = set()
    for context in iter_route_contexts(app.routes):
        methods = context.methods or {"GET"}
        path = str(context.path_format)
        table.update((method, path) for method in methods)
    return table


class Walk:
    """Sends B's calls and records every sign of A."""

    def __init__(self, api: httpx.AsyncClient, ui: httpx.AsyncClient, scripted: ScriptedModel):
        self.api = api
        self.ui = ui
        self.scripted = scripted
        self.findings: list[str] = []
        self.calls = 0
        self.succeeded = 0
        self.routed: list[RpcRoute] = []
        # What A's own turns asked the model before the walk is not B's doing.
        self._asked = len(scripted.requests)

    def _look(self, what: str, status: int, text: str) -> None:
        self.calls += 1
        self.succeeded += status < 300
        if status >= 500:
            self.findings.append(f"{what}: answered {status}: {text[:300]}")
        if MARK in text:
            self.findings.append(f"{what}: A's data in B's answer: {text[:400]}")
        seen = self.scripted.requests[self._asked :]
        self._asked = len(self.scripted.requests)
        for request in seen:
            if MARK in repr(request.messages):
                self.findings.append(f"{what}: A's data sent to the model on B's call")

    async def http(self, call: Call, key: str) -> httpx.Response:
        client = self.ui if call.ui else self.api
        headers = {"Origin": ORIGIN, **call.headers}
        if not call.ui:
            headers["Authorization"] = f"Bearer {key}"
        response = await client.request(
            call.method,
            call.path,
            json=call.json,
            params=call.params,
            data=call.data,
            files=call.files,
            headers=headers,
        )
        self._look(
            f"{call.method} {call.path} {call.params or ''}", response.status_code, response.text
        )
        return response

    async def rpc(self, method: str, params: dict[str, Any], key: str) -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        response = await self.api.post("/jsonrpc", json=body, headers=_bearer(key))
        self._look(f"JSON-RPC {method} {params}", response.status_code, response.text)

    async def mcp(self, method: str, params: dict[str, Any], key: str, path: str = "/mcp") -> Any:
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            **_bearer(key),
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        if "name" in params:
            headers["Mcp-Name"] = str(params["name"])
        # The MCP transport on a loopback bind accepts loopback Host headers only.
        response = await self.api.post(f"http://127.0.0.1:8000{path}", json=body, headers=headers)
        self._look(f"MCP {method} {params}", response.status_code, response.text)
        return _mcp_result(response)


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _mcp_result(response: httpx.Response) -> Any:
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = data[-1] if data else "{}"
    return json.loads(text)


async def test_tenant_b_reaches_nothing_of_tenant_a(
    app: FastAPI,
    client: httpx.AsyncClient,
    server_state: ServerState,
    scripted: ScriptedModel,
    database: Database,
) -> None:
    world = await build_world(server_state, scripted, database)
    # Every turn B runs gets an answer; none of them may carry A's text.
    scripted.script.steps.extend(Reply("Bravo's answer.") for _ in range(400))

    routes = _route_table(app)
    unclassified = sorted(routes - set(REST))
    assert not unclassified, f"routes tenant_probes.REST does not classify: {unclassified}"
    assert not set(REST) - routes, f"classified routes the app lacks: {set(REST) - routes}"
    unknown_methods = sorted(set(METHODS) - set(RPC))
    assert not unknown_methods, f"JSON-RPC methods tenant_probes.RPC lacks: {unknown_methods}"

    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as ui:
        login = await ui.post("/login", data={"api_key": world.b_key}, headers={"Origin": ORIGIN})
        assert login.status_code == 303, login.text
        walk = Walk(client, ui, scripted)
        walk.routed = server_state.rpc.routes()
        assert {r.method for r in walk.routed} == set(ROUTED)
        await _controls(walk, world)
        # After the controls: A's own key marks its last use on A's key row.
        before = await dump_rows(database, "acme")
        assert all(
            before[t] for t in ("conversation", "memory_job", "memory_record", "knowledge_chunk")
        )
        await _walk_all(walk, world)
    after = await dump_rows(database, "acme")
    changed = {
        table: _diff(before[table], after[table])
        for table in before
        if before[table] != after[table]
    }
    assert not walk.findings and not changed, _report(walk.findings, changed)
    # B's calls did work (its own rows), not merely bounce off authentication.
    assert walk.calls > 300 and walk.succeeded > 100, (walk.calls, walk.succeeded)


async def _controls(walk: Walk, world: World) -> None:
    """B is who the walk says over each face, and A's text is what it looks for."""
    own = await walk.api.get("/v1/catalog/actions/ECHO", headers=_bearer(world.b_key))
    assert own.status_code == 200 and "bravo" in own.text, own.text
    page = await walk.ui.get("/catalog/actions/ECHO")
    assert page.status_code == 200 and "bravo" in page.text, page.status_code
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "pilothouse/query/findActionByCode/v1",
        "params": {"code": "ECHO"},
    }
    rpc = await walk.api.post("/jsonrpc", json=body, headers=_bearer(world.b_key))
    assert "bravo" in rpc.text and MARK not in rpc.text, rpc.text
    mine = await walk.api.get(f"/v1/conversations/{world.done}", headers=_bearer(world.a_key))
    assert mine.status_code == 200 and MARK in mine.text, mine.text


async def _walk_all(walk: Walk, world: World) -> None:
    key = world.b_key
    calls = [
        call for probes in REST.values() if not isinstance(probes, Global) for call in probes(world)
    ]
    for call in [c for c in calls if not c.late] + [c for c in calls if c.late]:
        await walk.http(call, key)
    for method, params_of in RPC.items():
        for params in params_of(world):
            await walk.rpc(method, params, key)
    for route in walk.routed:
        # The deployment's own methods: catalog targets run in the caller's tenant.
        assert route.target is not None, f"{route.method}: classify the application's method"
        await walk.rpc(route.method, {"message": ASK}, key)
    listed = await walk.mcp("tools/list", {}, key)
    names = [tool["name"] for tool in listed["result"]["tools"]]
    assert "pilothouse_answer" in names and "action_ECHO" in names, names
    for name in [*names, *A_ONLY_TOOLS]:
        arguments = mcp_arguments(name, world) if name in names else [{"message": "hi"}]
        for args in arguments:
            await walk.mcp("tools/call", {"name": name, "arguments": args}, key)
    # B's virtual server of the code A uses too serves B's bundle; A's own
    # virtual server is unknown at its path, listing and calling alike.
    desk = await walk.mcp("tools/list", {}, key, path="/mcp/DESK")
    assert {t["name"] for t in desk["result"]["tools"]} == {
        "action_ECHO",
        "tool_add",
        "pilothouse_answer",
    }, desk
    for method, params in (("tools/list", {}), ("tools/call", {"name": "action_ACMEONLY"})):
        theirs = await walk.mcp(method, params, key, path="/mcp/ACMEVS")
        assert theirs["status"] == 404, theirs
    prompts = await walk.mcp("prompts/list", {}, key)
    for prompt in prompts["result"]["prompts"]:
        await walk.mcp("prompts/get", {"name": prompt["name"]}, key)


def _diff(before: list[str], after: list[str]) -> dict[str, list[str]]:
    return {
        "gone or changed": [row[:1500] for row in before if row not in after],
        "new or changed": [row[:1500] for row in after if row not in before],
    }


def _report(findings: list[str], changed: dict[str, dict[str, list[str]]]) -> str:
    lines = [f"{len(findings)} sign(s) of tenant A in tenant B's calls:", *findings[:40]]
    for table, diff in changed.items():
        lines.append(f"A's rows of {table} changed: {diff}")
    return "\n".join(lines)
