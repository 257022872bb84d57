"""Real MCP clients against a real ``pilothouse serve`` and ``pilothouse mcp serve --stdio``.

One ``pilothouse serve`` process for the module, started by ``live_serve`` on
a free loopback port (SQLite file, examples catalog, a key from ``pilothouse
keys create``). Its action ``ASK`` runs on a real OpenAI-compatible HTTP
server on loopback (``fault_upstream``) that answers ``ACK``; so each tool
call below is a whole governed turn over real sockets. The clients:

- the official ``mcp`` client (``mcp.Client``) over streamable HTTP in both
  protocol modes (2026-07-28 stateless, handshake session), over SSE, and
  over stdio (it starts ``pilothouse mcp serve --stdio`` itself);
- MCP Inspector's CLI (``@modelcontextprotocol/inspector`` from npm,
  installed once into its own prefix under ``tests/real/.node``, see
  npm_packages.py), skipped with the reason printed only when node or npm is
  not on PATH; a failed install fails the tests.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI, Request
from fault_upstream import Reply, Upstream, completion, running_upstream
from live_serve import PILOTHOUSE, LiveServer, cli, live_serve
from mcp import Client, StdioServerParameters
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning
from npm_packages import NpmUnavailable, node_executable, npm_package, skip_without
from pydantic import BaseModel
from uvicorn_thread import uvicorn_in_thread

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.types import GatewayCallRecord

pytestmark = [pytest.mark.real, pytest.mark.anyio]

INSPECTOR = "@modelcontextprotocol/inspector@1.0.3"

EXTRA_CATALOG = """\
tools:
  - code: CRM
    name: crm
    kind: rest
    implementation: openapi:{crm_url}/openapi.json
    settings:
      headers:
        X-Gateway-Key: "@secrets(CRM_GATEWAY_KEY)"
      gateway:
        include: [createOrder]
  - code: CUSTOMER
    name: customer
    kind: rest
    description: Read one customer of the CRM.
    implementation: openapi:{crm_url}/openapi.json#readCustomer
  - code: APPROVED
    name: approved
    kind: rest
    description: Read one customer of the CRM, with the user's approval.
    policy: authorized
    implementation: openapi:{crm_url}/openapi.json#readCustomer
providers:
  - code: UPST
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: UPSTREAMM
    provider: UPST
    model_name: mock
    capabilities: [FC]
    input_price: 0
    output_price: 0
actions:
  - code: ASK
    name: Ask about a topic
    goal_description: Answers one question about a topic.
    model: UPSTREAMM
    configuration: DFLT
    prompt: "Answer questions about {{topic}}."
    ask_user: false
  - code: LOOKUP
    name: Look a customer up
    goal_description: Looks a customer up in the CRM.
    model: UPSTREAMM
    configuration: DFLT
    prompt: "Look customers up with your tools."
    ask_user: false
    tools: [CRM]
"""
GATEWAY_KEY = "gw-5ecret-value"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        up.script(Reply(body=completion("ACK")))
        yield up


class Order(BaseModel):
    item: str


def crm_app() -> FastAPI:
    app = FastAPI(title="CRM")

    @app.get(
        "/customers/{id}",
        summary="Read a customer",
        operation_id="readCustomer",
        openapi_extra={"x-ai-enabled": True},
    )
    async def read_customer(id: str, request: Request) -> dict[str, Any]:
        return {
            "id": id,
            "name": "Ada",
            "sawAuthorization": "authorization" in request.headers,
            "sawGatewayKey": request.headers.get("x-gateway-key") == GATEWAY_KEY,
        }

    @app.post("/orders", operation_id="createOrder", summary="Place an order")
    async def create_order(order: Order) -> dict[str, Any]:
        return {"item": order.item, "status": "placed"}

    return app


@pytest.fixture(scope="module")
def crm() -> Iterator[str]:
    """A real FastAPI service under uvicorn on a loopback port, in a thread of its own."""
    with uvicorn_in_thread(crm_app(), name="the CRM service", timeout=30) as url:
        yield url


@pytest.fixture(scope="module")
def live(
    tmp_path_factory: pytest.TempPathFactory, upstream: Upstream, crm: str
) -> Iterator[LiveServer]:
    folder = tmp_path_factory.mktemp("mcp-live")
    extra = EXTRA_CATALOG.format(base_url=upstream.base_url, crm_url=crm)
    patch = pytest.MonkeyPatch()
    # The gateway's service is on loopback: the egress policy must allow it.
    patch.setenv("PILOTHOUSE_EGRESS_ALLOW", "127.0.0.1")
    # The gateway's own credential, a secret of the serving process.
    patch.setenv("CRM_GATEWAY_KEY", GATEWAY_KEY)
    patch.setenv("PILOTHOUSE_SECRETS_ENV", '{"default": ["CRM_GATEWAY_KEY"]}')
    try:
        with live_serve(folder, extra) as server:
            yield server
    finally:
        patch.undo()


def root(live: LiveServer) -> str:
    return live.base_url.removesuffix("/v1")


@asynccontextmanager
async def http_client(live: LiveServer, mode: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {live.key}"}, timeout=60
    ) as http:
        async with Client(
            streamable_http_client(f"{root(live)}/mcp", http_client=http), mode=mode
        ) as client:
            yield client


async def ask(client: Client) -> mt.CallToolResult:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert tools["action_ASK"].input_schema["required"] == ["message", "topic"]
    return await client.call_tool("action_ASK", {"message": "Is it safe?", "topic": "rockets"})


def answer_text(result: mt.CallToolResult) -> str:
    assert not result.is_error, result
    first = result.content[0]
    assert isinstance(first, mt.TextContent)
    return first.text


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_official_client_over_streamable_http(
    live: LiveServer, upstream: Upstream, mode: str
) -> None:
    async with http_client(live, mode) as client:
        result = await ask(client)
    assert answer_text(result) == "ACK"
    # The upstream got the governed turn: the action's prompt, filled.
    assert "Answer questions about rockets." in json.dumps(upstream.requests[-1])


async def test_official_client_over_sse(live: LiveServer) -> None:
    opened = sse_client(f"{root(live)}/sse", headers={"X-API-Key": live.key})
    async with Client(opened, mode="legacy") as client:
        result = await ask(client)
    assert answer_text(result) == "ACK"


async def test_each_call_is_an_audited_conversation(live: LiveServer) -> None:
    async with http_client(live, "legacy") as client:
        result = await ask(client)
    assert result.meta is not None
    uuid = result.meta["pilothouse/conversation_uuid"]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.key}"}) as http:
        transcript = (await http.get(f"{live.base_url}/conversations/{uuid}")).json()
    assert transcript["status"] == "CO"
    assert [m["content"] for m in transcript["messages"] if m["role"] == "AS"] == ["ACK"]


async def test_official_client_over_stdio(live: LiveServer, tmp_path: Path) -> None:
    # The stdio server opens the same SQLite file as the live server.
    folder = Path(live.database_url.removeprefix("sqlite+aiosqlite:///")).parent
    parameters = StdioServerParameters(
        command=PILOTHOUSE,
        args=["--database-url", live.database_url, "mcp", "serve", "--stdio"],
        env={"PILOTHOUSE_SECRETS_FILE": ""},
        cwd=str(folder),
    )
    async with Client(parameters, mode="legacy") as client:
        result = await ask(client)
        prompts = {p.name for p in (await client.list_prompts()).prompts}
    assert answer_text(result) == "ACK"
    assert "BRVOICE" in prompts


class User:
    """An MCP client's user: answers each elicitation as scripted."""

    def __init__(self, *replies: mt.ElicitResult) -> None:
        self.replies = list(replies)
        self.asked: list[str] = []

    async def __call__(self, context: Any, params: mt.ElicitRequestParams) -> mt.ElicitResult:
        del context
        self.asked.append(params.message)
        return self.replies.pop(0)


@asynccontextmanager
async def stdio_client(
    live: LiveServer, user: User | None = None, **options: Any
) -> AsyncIterator[Client]:
    """The official client over stdio, on the live server's SQLite file."""
    folder = Path(live.database_url.removeprefix("sqlite+aiosqlite:///")).parent
    parameters = StdioServerParameters(
        command=PILOTHOUSE,
        args=["--database-url", live.database_url, "mcp", "serve", "--stdio"],
        env={"PILOTHOUSE_SECRETS_FILE": "", "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1"},
        cwd=str(folder),
    )
    async with Client(parameters, mode="legacy", elicitation_callback=user, **options) as client:
        yield client


@asynccontextmanager
async def elicited_http_client(live: LiveServer, user: User) -> AsyncIterator[Client]:
    """The official client over streamable HTTP (a session), declaring elicitation."""
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {live.key}"}, timeout=60
    ) as http:
        opened = streamable_http_client(f"{root(live)}/mcp", http_client=http)
        async with Client(opened, mode="legacy", elicitation_callback=user) as client:
            yield client


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_an_authorized_tool_asks_the_user_by_elicitation(
    live: LiveServer, transport: str
) -> None:
    user = User(
        mt.ElicitResult(action="accept", content={"approve": True}),
        mt.ElicitResult(action="decline"),
    )
    opened = elicited_http_client(live, user) if transport == "http" else stdio_client(live, user)
    async with opened as client:
        approved = await client.call_tool("tool_approved", {"id": "3"})
        declined = await client.call_tool("tool_approved", {"id": "4"})
    assert not approved.is_error, approved
    assert approved.structured_content is not None
    assert approved.structured_content["name"] == "Ada"
    assert declined.is_error
    assert len(user.asked) == 2 and "'approved'" in user.asked[0]


async def test_without_elicitation_an_authorized_tool_is_denied_over_stdio(
    live: LiveServer,
) -> None:
    async with stdio_client(live) as client:
        result = await client.call_tool("tool_approved", {"id": "3"})
    assert result.is_error


async def test_a_subscribed_skill_is_announced_over_stdio_when_it_changes(
    live: LiveServer,
) -> None:
    skill = {
        "code": "SUBSCRIB",
        "name": "Subscribed skill",
        "type": "BRND",
        "description": "A skill whose prompt changes.",
        "prompt": "First wording.",
    }
    async with Pilothouse(Settings(database_url=live.database_url, secrets_file=None)) as ph:
        created = await ph.catalog.create("skills", skill)
        updated: list[str] = []
        seen = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, mt.ResourceUpdatedNotification):
                updated.append(str(message.params.uri))
                seen.set()

        uri = "pilothouse://skills/SUBSCRIB"
        async with stdio_client(live, message_handler=on_message) as client:
            # The SDK warns that 2026-07-28 replaced it; stdio speaks the handshake protocol.
            with pytest.warns(MCPDeprecationWarning):
                await client.subscribe_resource(uri)
            changed = {**skill, "prompt": "Second wording."}
            await ph.catalog.update("skills", "SUBSCRIB", changed, expected_version=created.version)
            with anyio.fail_after(30):
                await seen.wait()
            [content] = (await client.read_resource(uri)).contents
    assert updated[0] == uri
    assert isinstance(content, mt.TextResourceContents) and "Second wording." in content.text


def _inspector() -> tuple[str, Path]:
    try:
        return node_executable(), npm_package(INSPECTOR, "cli/build/cli.js")
    except NpmUnavailable as missing:
        skip_without(missing, "the MCP Inspector tests")


def inspector(live: LiveServer, transport: str, *args: str) -> dict[str, Any]:
    node, script = _inspector()
    path = "/mcp" if transport == "http" else "/sse"
    done = subprocess.run(
        [
            node,
            str(script),
            "--cli",
            f"{root(live)}{path}",
            "--transport",
            transport,
            "--header",
            f"Authorization: Bearer {live.key}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
    return json.loads(done.stdout)


@pytest.mark.parametrize("transport", ["http", "sse"])
def test_mcp_inspector_cli_lists_and_calls(live: LiveServer, transport: str) -> None:
    listed = inspector(live, transport, "--method", "tools/list")
    assert "action_ASK" in {tool["name"] for tool in listed["tools"]}
    called = inspector(
        live,
        transport,
        "--method",
        "tools/call",
        "--tool-name",
        "action_ASK",
        "--tool-arg",
        "message=Is it safe?",
        "--tool-arg",
        "topic=rockets",
    )
    assert called["content"][0]["text"] == "ACK"
    assert not called.get("isError")


def test_a_key_allowed_one_tool_sees_only_it(live: LiveServer) -> None:
    created = cli(
        live.database_url, "keys", "create", "--name", "ask only", "--mcp-tool", "action_ASK"
    )
    key = next(word for word in created.split() if word.startswith("ph_"))
    node, script = _inspector()
    done = subprocess.run(
        [
            node,
            str(script),
            "--cli",
            f"{root(live)}/mcp",
            "--transport",
            "http",
            "--header",
            f"Authorization: Bearer {key}",
            "--method",
            "tools/list",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert [tool["name"] for tool in json.loads(done.stdout)["tools"]] == ["action_ASK"]


async def test_gateway_in_front_of_a_real_fastapi_service(live: LiveServer) -> None:
    async with http_client(live, "legacy") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        customer = await client.call_tool("crm__readCustomer", {"id": "7"})
        traversal = await client.call_tool("crm__readCustomer", {"id": "../admin"})
        order = await client.call_tool("crm__createOrder", {"item": "rocket"})
    assert tools["crm__readCustomer"].description == "Read a customer"
    # The pilothouse key (the bearer token) is never passed on.
    assert customer.structured_content == {
        "id": "7",
        "name": "Ada",
        "sawAuthorization": False,
        "sawGatewayKey": True,
    }
    assert traversal.is_error
    assert order.structured_content == {"item": "rocket", "status": "placed"}


async def gateway_calls(live: LiveServer, **filters: Any) -> list[GatewayCallRecord]:
    """The live server's gateway audit rows, read through the public facade."""
    async with Pilothouse(Settings(database_url=live.database_url, secrets_file=None)) as ph:
        return await ph.query.list_gateway_calls(**filters)


async def test_gateway_calls_are_audit_rows_without_secrets(live: LiveServer) -> None:
    async with http_client(live, "legacy") as client:
        customer = await client.call_tool("crm__readCustomer", {"id": "11"})
    assert customer.structured_content is not None
    assert customer.structured_content["sawGatewayKey"] is True
    rows = await gateway_calls(live, gateway="CRM")
    mine = [r for r in rows if r.via == "mcp" and r.operation == "GET /customers/{id}"]
    assert mine, rows
    newest = mine[0]
    assert (newest.tool, newest.status_code, newest.outcome) == ("crm__readCustomer", 200, "ok")
    assert live.key.startswith(f"ph_{newest.key_prefix}_")
    # Never a secret: not the gateway's credential, not the pilothouse key.
    for row in rows:
        assert GATEWAY_KEY not in repr(row) and live.key not in repr(row)


async def test_a_catalog_tool_over_streamable_http_is_a_recorded_conversation(
    live: LiveServer,
) -> None:
    async with http_client(live, "2026-07-28") as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        result = await client.call_tool("tool_customer", {"id": "5"})
    assert tools["tool_customer"].description == "Read one customer of the CRM."
    assert tools["tool_customer"].input_schema["required"] == ["id"]
    assert not result.is_error, result
    # A catalog REST tool sends its own headers only: no gateway key here.
    assert result.structured_content == {
        "id": "5",
        "name": "Ada",
        "sawAuthorization": False,
        "sawGatewayKey": False,
    }
    assert result.meta is not None
    uuid = result.meta["pilothouse/conversation_uuid"]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.key}"}) as http:
        transcript = (await http.get(f"{live.base_url}/conversations/{uuid}")).json()
    assert transcript["action_code"] == "TOOLCALL"
    assert transcript["status"] == "CO"
    [call] = transcript["tool_calls"]
    assert (call["name"], call["arguments"], call["status"]) == (
        "customer",
        {"id": "5"},
        "succeeded",
    )


async def test_an_actions_turn_calls_a_gateway_operation_of_a_real_service(
    live: LiveServer, upstream: Upstream
) -> None:
    arguments = json.dumps({"id": "9"})
    call = {
        "id": "call_gateway1",
        "type": "function",
        "function": {"name": "crm__readCustomer", "arguments": arguments},
    }
    upstream.script(
        Reply(body=completion(None, tool_calls=[call])),
        Reply(body=completion("Customer 9 is Ada.")),
    )
    try:
        async with http_client(live, "legacy") as client:
            result = await client.call_tool("action_LOOKUP", {"message": "Who is customer 9?"})
        sent = list(upstream.requests)
    finally:
        upstream.script(Reply(body=completion("ACK")))
    assert answer_text(result) == "Customer 9 is Ada."
    # The model was offered the gateway's AI-enabled operations as tools.
    offered = [tool["function"]["name"] for tool in sent[0]["tools"]]
    assert {"crm__readCustomer", "crm__createOrder"} <= set(offered)
    # The second request carried the real service's answer back to the model.
    tool_messages = [m for m in sent[1]["messages"] if m.get("role") == "tool"]
    assert ["call_gateway1"] == [m["tool_call_id"] for m in tool_messages]
    assert '"name":"Ada"' in str(tool_messages[0]["content"]).replace(" ", "")
    assert result.meta is not None
    uuid = result.meta["pilothouse/conversation_uuid"]
    [row] = await gateway_calls(live, conversation_uuid=uuid)
    assert (row.via, row.call_id, row.status_code, row.outcome) == (
        "turn",
        "call_gateway1",
        200,
        "ok",
    )
    # The turn's row names the key that started its conversation.
    assert row.key_prefix is not None and live.key.startswith(f"ph_{row.key_prefix}_")
    assert row.operation == "GET /customers/{id}"
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.key}"}) as http:
        transcript = (await http.get(f"{live.base_url}/conversations/{uuid}")).json()
    [recorded] = transcript["tool_calls"]
    assert (recorded["name"], recorded["status"]) == ("crm__readCustomer", "succeeded")
    assert '"sawGatewayKey":true' in recorded["result"].replace(" ", "")


async def test_memory_tools_over_streamable_http_against_the_live_server(
    live: LiveServer,
) -> None:
    """A memory added over MCP is found by meaning (the packaged MiniLM) and read over REST."""
    alice = {"scope": "user", "user_id": "mcp-alice"}
    async with http_client(live, "2026-07-28") as client:
        added = await client.call_tool(
            "pilothouse_memory_add", {**alice, "content": "Alice flies only economy class."}
        )
        found = await client.call_tool(
            "pilothouse_memory_search", {**alice, "query": "which cabin does she book?"}
        )
        elsewhere = await client.call_tool(
            "pilothouse_memory_list", {"scope": "user", "user_id": "mcp-bob"}
        )
    memory_id = json.loads(answer_text(added))["id"]
    assert [hit["id"] for hit in json.loads(answer_text(found))["hits"]] == [memory_id]
    assert json.loads(answer_text(elsewhere)) == {"items": []}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {live.key}"}) as http:
        listed = await http.get(f"{live.base_url}/memory", params=alice)
    assert [item["id"] for item in listed.json()["items"]] == [memory_id]


SUPPORT = {
    "code": "SUPPORT",
    "name": "Support desk",
    "actions": ["ASK"],
    "tools": ["CUSTOMER"],
    "operations": ["CRM:createOrder"],
}


async def test_a_tenant_virtual_server_written_over_rest_serves_its_bundle(
    live: LiveServer,
) -> None:
    created = cli(live.database_url, "keys", "create", "--name", "desk admin", "--admin")
    admin = next(word for word in created.split() if word.startswith("ph_"))
    headers = {"Authorization": f"Bearer {admin}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        # An operation the gateway does not include is refused, naming it.
        refused = await http.post(
            f"{live.base_url}/catalog/virtual_servers",
            json={**SUPPORT, "operations": ["CRM:readCustomer"]},
        )
        written = await http.post(f"{live.base_url}/catalog/virtual_servers", json=SUPPORT)
    assert refused.status_code == 422, refused.text
    assert "gateway 'CRM' does not include 'readCustomer'" in refused.text
    assert written.status_code == 201, written.text
    for mode in ("legacy", "2026-07-28"):
        async with httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {live.key}"}, timeout=60
        ) as http:
            opened = streamable_http_client(f"{root(live)}/mcp/SUPPORT", http_client=http)
            async with Client(opened, mode=mode) as client:
                names = {tool.name for tool in (await client.list_tools()).tools}
                order = await client.call_tool("crm__createOrder", {"item": "kite"})
                outside = await client.call_tool("crm__readCustomer", {"id": "7"})
                asked = await ask(client)
        assert names == {"action_ASK", "tool_customer", "crm__createOrder", "pilothouse_answer"}
        assert order.structured_content == {"item": "kite", "status": "placed"}, mode
        assert outside.is_error and "unknown tool" in str(outside.content), mode
        assert answer_text(asked) == "ACK"
