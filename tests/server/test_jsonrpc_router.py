"""The JSON-RPC router: application methods, the specification's examples, the legacy envelope.

The specification's examples (https://www.jsonrpc.org/specification,
section 7) are sent as written, with their methods registered as Python
callables; pilothouse's errors carry a problem document in ``data``, which
the comparison leaves out. The legacy light-hybrid-4j envelope and its
JSON-RPC form are the migration plan's own example (seed 002, section 3.1),
verbatim.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from server_helpers import auth

from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.server import RpcRouter
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

LEGACY_EXAMPLE = """{
"host": "lightapi.net",
"service": "service",
"action": "createApiVersion",
"version": "0.1.0",
"title": "Create Api Version",
"success": "/app/success",
"failure": "/app/failure",
"data": {
"apiId": "MCP0001",
"hostId": "01964b05-552a-7c4b-9184-6857e7f3dc5f"
}
}"""

JSONRPC_EXAMPLE = """{
"jsonrpc": "2.0",
"method": "lightapi.net/service/createApiVersion/0.1.0",
"params": {
"apiId": "MCP0001",
"hostId": "01964b05-552a-7c4b-9184-6857e7f3dc5f"
},
"id": 1
}"""


def subtract(minuend: int, subtrahend: int) -> int:
    return minuend - subtrahend


def add_up(*numbers: int) -> int:
    return sum(numbers)


def ignore(*_: Any) -> None:
    return None


async def get_data() -> list[Any]:
    return ["hello", 5]


created: list[dict[str, str]] = []


def create_api_version(apiId: str, hostId: str) -> dict[str, str]:
    created.append({"apiId": apiId, "hostId": hostId})
    return {"apiVersionId": f"{apiId}-0.1.0", "hostId": hostId}


@pytest.fixture(autouse=True)
def routes(server_state: ServerState) -> None:
    rpc = server_state.rpc
    rpc.add("subtract", subtract)
    rpc.add("sum", add_up)
    rpc.add("update", ignore)
    rpc.add("notify_hello", ignore)
    rpc.add("notify_sum", ignore)
    rpc.add("get_data", get_data)
    rpc.add("lightapi.net/service/createApiVersion/0.1.0", create_api_version)
    rpc.add_action("erp-1/llm/echo/1.0.0", "action:ECHO")


def bare(answer: Any) -> Any:
    """The answer without the problem documents pilothouse adds to errors."""
    if isinstance(answer, list):
        return [bare(a) for a in answer]
    if isinstance(answer, dict) and "error" in answer:
        return {**answer, "error": {k: v for k, v in answer["error"].items() if k != "data"}}
    return answer


async def send(client: httpx.AsyncClient, key: str, body: str) -> httpx.Response:
    return await client.post(
        "/jsonrpc", content=body, headers={**auth(key), "Content-Type": "application/json"}
    )


SPEC_EXAMPLES = [
    (
        '{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}',
        {"jsonrpc": "2.0", "result": 19, "id": 1},
    ),
    (
        '{"jsonrpc": "2.0", "method": "subtract", "params": [23, 42], "id": 2}',
        {"jsonrpc": "2.0", "result": -19, "id": 2},
    ),
    (
        '{"jsonrpc": "2.0", "method": "subtract", '
        '"params": {"subtrahend": 23, "minuend": 42}, "id": 3}',
        {"jsonrpc": "2.0", "result": 19, "id": 3},
    ),
    (
        '{"jsonrpc": "2.0", "method": "subtract", '
        '"params": {"minuend": 42, "subtrahend": 23}, "id": 4}',
        {"jsonrpc": "2.0", "result": 19, "id": 4},
    ),
    ('{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}', None),
    ('{"jsonrpc": "2.0", "method": "foobar"}', None),
    (
        '{"jsonrpc": "2.0", "method": "foobar", "id": "1"}',
        {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "1"},
    ),
    (
        '{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]',
        {"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": None},
    ),
    (
        '{"jsonrpc": "2.0", "method": 1, "params": "bar"}',
        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None},
    ),
    (
        """[
  {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
  {"jsonrpc": "2.0", "method"
]""",
        {"jsonrpc": "2.0", "error": {"code": -32700, "message": "Parse error"}, "id": None},
    ),
    (
        "[]",
        {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None},
    ),
    (
        "[1]",
        [{"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None}],
    ),
    (
        "[1,2,3]",
        [
            {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None},
            {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None},
            {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None},
        ],
    ),
    (
        """[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]""",
        [
            {"jsonrpc": "2.0", "result": 7, "id": "1"},
            {"jsonrpc": "2.0", "result": 19, "id": "2"},
            {"jsonrpc": "2.0", "error": {"code": -32600, "message": "Invalid Request"}, "id": None},
            {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found"}, "id": "5"},
            {"jsonrpc": "2.0", "result": ["hello", 5], "id": "9"},
        ],
    ),
    (
        """[
        {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
    ]""",
        None,
    ),
]


@pytest.mark.parametrize(("body", "expected"), SPEC_EXAMPLES)
async def test_the_specifications_examples(
    client: httpx.AsyncClient, api_key: str, body: str, expected: Any
) -> None:
    response = await send(client, api_key, body)
    if expected is None:
        assert response.status_code == 204
        assert response.content == b""
    else:
        assert response.status_code == 200
        assert bare(response.json()) == expected


async def test_the_seeds_legacy_envelope_is_answered_ui_members_ignored(
    client: httpx.AsyncClient, api_key: str
) -> None:
    created.clear()
    response = await send(client, api_key, LEGACY_EXAMPLE)
    assert response.status_code == 200
    assert response.json() == {
        "host": "lightapi.net",
        "service": "service",
        "action": "createApiVersion",
        "version": "0.1.0",
        "data": {"apiVersionId": "MCP0001-0.1.0", "hostId": "01964b05-552a-7c4b-9184-6857e7f3dc5f"},
    }
    # title, success and failure never reach the handler.
    assert created == [{"apiId": "MCP0001", "hostId": "01964b05-552a-7c4b-9184-6857e7f3dc5f"}]


async def test_the_seeds_json_rpc_form_reaches_the_same_handler(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await send(client, api_key, JSONRPC_EXAMPLE)
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "apiVersionId": "MCP0001-0.1.0",
            "hostId": "01964b05-552a-7c4b-9184-6857e7f3dc5f",
        },
    }


async def test_a_legacy_envelope_with_an_id_gets_a_json_rpc_answer(
    client: httpx.AsyncClient, api_key: str
) -> None:
    envelope = {**json.loads(LEGACY_EXAMPLE), "id": 7}
    response = await send(client, api_key, json.dumps(envelope))
    assert response.json()["jsonrpc"] == "2.0"
    assert response.json()["id"] == 7
    assert response.json()["result"]["apiVersionId"] == "MCP0001-0.1.0"
    unknown = {**json.loads(LEGACY_EXAMPLE), "colour": "red"}
    refused = (await send(client, api_key, json.dumps(unknown))).json()
    assert refused["error"]["code"] == -32600
    assert "colour" in refused["error"]["data"]["detail"]


async def test_legacy_entries_are_allowed_in_a_batch(
    client: httpx.AsyncClient, api_key: str
) -> None:
    batch = f"[{LEGACY_EXAMPLE}, {JSONRPC_EXAMPLE}]"
    answers = (await send(client, api_key, batch)).json()
    assert answers[0]["service"] == "service"
    assert answers[0]["data"]["apiVersionId"] == "MCP0001-0.1.0"
    assert answers[1] == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {
            "apiVersionId": "MCP0001-0.1.0",
            "hostId": "01964b05-552a-7c4b-9184-6857e7f3dc5f",
        },
    }


async def test_independent_batch_entries_run_concurrently(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    # Each call waits until the other has started: run one after another,
    # the first would wait for ever (fail_after ends the test instead).
    started = {"a": anyio.Event(), "b": anyio.Event()}

    async def meet(me: str, other: str) -> str:
        started[me].set()
        with anyio.fail_after(30):
            await started[other].wait()
        return me

    server_state.rpc.add("test/rendezvous/a/1", lambda: meet("a", "b"))
    server_state.rpc.add("test/rendezvous/b/1", lambda: meet("b", "a"))
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "test/rendezvous/a/1"},
        {"jsonrpc": "2.0", "id": 2, "method": "test/rendezvous/b/1"},
    ]
    answers = (await send(client, api_key, json.dumps(batch))).json()
    assert [a["result"] for a in answers] == ["a", "b"]


async def test_a_catalog_action_is_a_routed_method(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("echoed"))
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "erp-1/llm/echo/1.0.0",
        "params": {"message": "hi", "input": "x"},
    }
    result = (await send(client, api_key, json.dumps(body))).json()["result"]
    assert result["status"] == "CO"
    assert result["output"] == "echoed"
    positional = {**body, "params": ["hi"]}
    refused = (await send(client, api_key, json.dumps(positional))).json()
    assert refused["error"]["code"] == -32602


async def test_handler_failures_map_to_errors_never_500(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    def missing() -> None:
        raise NotFoundError("no such api")

    def broken() -> None:
        raise RuntimeError("secret internals")

    server_state.rpc.add("test/fail/missing/1", missing)
    server_state.rpc.add("test/fail/broken/1", broken)
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "test/fail/missing/1"},
        {"jsonrpc": "2.0", "id": 2, "method": "test/fail/broken/1"},
        {"jsonrpc": "2.0", "id": 3, "method": "subtract", "params": [1]},
        {"jsonrpc": "2.0", "id": 4, "method": "subtract", "params": "x"},
    ]
    response = await send(client, api_key, json.dumps(batch))
    codes = [a["error"]["code"] for a in response.json()]
    assert codes == [-32001, -32603, -32602, -32602]
    assert "secret" not in response.text


async def test_registration_refuses_reserved_and_misshapen_names() -> None:
    rpc = RpcRouter()
    for name in ("rpc.discover", "pilothouse/query/x/v1", ""):
        with pytest.raises(InvalidFieldError):
            rpc.add(name, ignore)
    with pytest.raises(InvalidFieldError, match="<host>/<service>/<action>/<version>"):
        rpc.add_action("summarize", "action:SUMBRAND")
    with pytest.raises(InvalidFieldError, match="target"):
        rpc.add_action("erp/llm/sum/1", "tool:X")
    rpc.add("a/b/c/1", ignore)
    with pytest.raises(InvalidFieldError, match="routed already"):
        rpc.add("a/b/c/1", ignore)


async def test_the_setting_routes_catalog_actions(server_state: ServerState) -> None:
    settings = ServerSettings(jsonrpc_actions={"erp-1/llm/summarize/1.0.0": "agent:WRITER"})
    state = ServerState(server_state.settings, server=settings)
    route = state.rpc.get("erp-1/llm/summarize/1.0.0")
    assert route is not None and route.target == "agent:WRITER"


async def test_a_sync_handler_runs_in_a_worker_thread_while_the_service_answers(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    import threading

    entered, gate = threading.Event(), threading.Event()

    def hold() -> bool:
        # A blocking handler: on the event loop it would stall every request
        # until the gate's wait gives up (False).
        entered.set()
        return gate.wait(timeout=20)

    server_state.rpc.add("test/blocking/hold/1", hold)
    answers: list[Any] = []
    health: httpx.Response | None = None

    async def call() -> None:
        body = {"jsonrpc": "2.0", "id": 1, "method": "test/blocking/hold/1"}
        answers.append((await send(client, api_key, json.dumps(body))).json())

    async with anyio.create_task_group() as group:
        group.start_soon(call)
        assert await anyio.to_thread.run_sync(entered.wait, 20)
        # While the handler blocks, the service still answers.
        health = await client.get("/healthz")
        gate.set()
    assert health is not None and health.status_code == 200
    assert answers == [{"jsonrpc": "2.0", "id": 1, "result": True}]


async def test_sync_handlers_of_a_batch_run_side_by_side(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    import threading

    # Each call waits for the other to arrive: one after another on the
    # event loop, the first would give up (False) before the second started.
    barrier = threading.Barrier(2, timeout=20)

    def meet(me: str) -> str:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            return f"{me} alone"
        return me

    server_state.rpc.add("test/threads/a/1", lambda: meet("a"))
    server_state.rpc.add("test/threads/b/1", lambda: meet("b"))
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "test/threads/a/1"},
        {"jsonrpc": "2.0", "id": 2, "method": "test/threads/b/1"},
    ]
    answers = (await send(client, api_key, json.dumps(batch))).json()
    assert [a["result"] for a in answers] == ["a", "b"]


async def test_an_unrouted_legacy_call_names_the_method_it_sent(
    client: httpx.AsyncClient, api_key: str
) -> None:
    envelope = {
        "host": "erp-9",
        "service": "billing",
        "action": "closeMonth",
        "version": "2.0.0",
        "data": {},
    }
    answer = (await send(client, api_key, json.dumps(envelope))).json()
    detail = answer["error"]["data"]["detail"]
    assert answer["error"]["code"] == -32601
    assert "'erp-9/billing/closeMonth/2.0.0'" in detail
    assert "pilothouse/" not in detail


async def test_rpc_discover_describes_the_methods_as_openrpc(
    client: httpx.AsyncClient, api_key: str
) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "rpc.discover"}
    document = (await send(client, api_key, json.dumps(body))).json()["result"]
    assert document["openrpc"] == "1.3.2"
    assert document["info"]["title"] == "pilothouse JSON-RPC"
    methods = {m["name"]: m for m in document["methods"]}
    send_message = methods["pilothouse/command/sendMessage/v1"]
    assert send_message["paramStructure"] == "by-name"
    by_name = {p["name"]: p for p in send_message["params"]}
    assert by_name["uuid"]["required"] is True
    subtract = methods["subtract"]
    assert [(p["name"], p["required"], p["schema"]) for p in subtract["params"]] == [
        ("minuend", True, {"type": "integer"}),
        ("subtrahend", True, {"type": "integer"}),
    ]
    assert methods["erp-1/llm/echo/1.0.0"]["params"][0]["name"] == "message"
    # Every reference points into the document's own components.
    text = json.dumps(document)
    assert "#/$defs/" not in text
    for ref in {part.split('"')[0] for part in text.split('"$ref": "')[1:]}:
        assert ref.removeprefix("#/components/schemas/") in document["components"]["schemas"]
