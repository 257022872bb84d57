"""JSON-RPC 2.0 at /jsonrpc: methods, batches, notifications, errors, legacy envelope."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_helpers import ExamplesAnd

from database_templates import Seed
from pilothouse.server._jsonrpc_methods import METHODS
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# A skill-free action beside the examples: these tests are about the protocol.
EXTRA = """
actions:
  - code: CHAT
    name: Chat about a document
    model: SMOLLM2
    configuration: DFLT
    prompt: "Answer about this document:\\n{document}"
"""


@pytest.fixture
def database_seed() -> Seed:
    return ExamplesAnd(EXTRA)


Q = "pilothouse/query/{}/v1"
C = "pilothouse/command/{}/v1"


def call(method: str, params: Any = None, id: Any = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        body["params"] = params
    if id is not None:
        body["id"] = id
    return body


async def rpc(client: httpx.AsyncClient, key: str, body: Any) -> httpx.Response:
    return await client.post("/jsonrpc", json=body, headers=auth(key))


async def test_every_facade_operation_has_a_method() -> None:
    from pilothouse.api import CommandApi, QueryApi

    def camel(name: str) -> str:
        head, *rest = name.split("_")
        return head + "".join(part.title() for part in rest)

    expected = {Q.format(camel(n)) for n in vars(QueryApi) if not n.startswith("_")} | {
        C.format(camel(n))
        for n in vars(CommandApi)
        # Streaming needs a stream: REST SSE or the OpenAI-compatible endpoint.
        if not n.startswith("_")
        and n not in ("stream_message", "start_and_stream", "stream_adhoc", "stream_answers")
    }
    assert expected <= set(METHODS)


async def test_query_method_returns_catalog_entities(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await rpc(client, api_key, call(Q.format("findActionByCode"), {"code": "SUMBRAND"}))
    assert response.status_code == 200
    body = response.json()
    assert body["id"] == 1 and body["jsonrpc"] == "2.0"
    assert body["result"]["code"] == "SUMBRAND"
    assert body["result"]["model"] == "QWEN05"
    missing = await rpc(client, api_key, call(Q.format("findActionByCode"), {"code": "NOPE"}))
    assert missing.json()["result"] is None


async def test_conversation_round_trip(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    started = await rpc(
        client,
        api_key,
        call(C.format("startConversation"), {"action": "CHAT", "memoryId": "m-1"}),
    )
    uuid = started.json()["result"]["uuid"]
    assert started.json()["result"]["status"] == "NS"
    listed = await rpc(client, api_key, call(Q.format("listConversations"), {"limit": 5}))
    page = listed.json()["result"]
    assert (page["total"], page["items"][0]["uuid"]) == (1, uuid)
    cancelled = await rpc(client, api_key, call(C.format("cancel"), {"uuid": uuid}))
    assert cancelled.json()["result"] == {"abortedRunningTurn": False}
    got = await rpc(client, api_key, call(Q.format("getTranscript"), {"uuid": uuid}))
    assert got.json()["result"]["status"] == "TE"
    # TE takes new messages, so it can be cancelled again (a message may be on its way).
    again = await rpc(client, api_key, call(C.format("cancel"), {"uuid": uuid}))
    assert again.json()["result"] == {"abortedRunningTurn": False}
    del scripted


async def test_send_message_returns_the_turn_result(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    started = await rpc(client, api_key, call(C.format("startConversation"), {"action": "CHAT"}))
    uuid = started.json()["result"]["uuid"]
    scripted.script.steps.append(Reply("summary"))
    sent = await rpc(
        client,
        api_key,
        call(C.format("sendMessage"), {"uuid": uuid, "text": "t", "inputData": {"document": "d"}}),
    )
    result = sent.json()["result"]
    assert (result["status"], result["output"]) == ("CO", "summary")
    messages = await rpc(client, api_key, call(Q.format("getConversationMessages"), {"uuid": uuid}))
    assert [m["role"] for m in messages.json()["result"]] == ["SY", "US", "AS"]


async def test_start_and_send_starts_the_conversation_with_its_first_turn(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("summary"))
    sent = await rpc(
        client,
        api_key,
        call(
            C.format("startAndSend"),
            {"action": "CHAT", "text": "t", "memoryId": "m-1", "inputData": {"document": "d"}},
        ),
    )
    result = sent.json()["result"]
    assert (result["status"], result["output"]) == ("CO", "summary")
    uuid = result["conversation_uuid"]
    got = await rpc(client, api_key, call(Q.format("getConversation"), {"uuid": uuid}))
    assert got.json()["result"]["memory_id"] == "m-1"
    messages = await rpc(client, api_key, call(Q.format("getConversationMessages"), {"uuid": uuid}))
    assert [m["role"] for m in messages.json()["result"]] == ["SY", "US", "AS"]
    refused = await rpc(
        client, api_key, call(C.format("startAndSend"), {"action": "NOPE", "text": "t"})
    )
    assert "action 'NOPE' not found" in refused.json()["error"]["data"]["detail"]


async def test_batch_answers_in_order_and_skips_notifications(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await rpc(
        client,
        api_key,
        [
            call(Q.format("findAgentByCode"), {"code": "WRITER"}, id="a"),
            call(Q.format("getAllActions"), id=None),
            call(Q.format("nope"), id="b"),
            42,
        ],
    )
    answers = response.json()
    assert [a["id"] for a in answers] == ["a", "b", None]
    assert answers[0]["result"]["goal_action"] == "SUMBRAND"
    assert answers[1]["error"]["code"] == -32601
    assert answers[2]["error"]["code"] == -32600


async def test_all_notification_batch_is_204(client: httpx.AsyncClient, api_key: str) -> None:
    response = await rpc(client, api_key, [call(Q.format("getAllActions"), id=None)] * 2)
    assert response.status_code == 204
    assert response.content == b""
    single = await rpc(client, api_key, call(Q.format("getAllActions"), id=None))
    assert single.status_code == 204


async def test_parse_error(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/jsonrpc", content=b"{oops", headers={**auth(api_key), "Content-Type": "application/json"}
    )
    body = response.json()
    assert body["error"]["code"] == -32700
    assert body["id"] is None


@pytest.mark.parametrize(
    "body",
    [
        [],
        {"method": Q.format("getAllActions"), "id": 1},
        {"jsonrpc": "1.0", "method": Q.format("getAllActions"), "id": 1},
        {"jsonrpc": "2.0", "method": 7, "id": 1},
        {"jsonrpc": "2.0", "method": Q.format("getAllActions"), "id": True},
        "just a string",
    ],
)
async def test_invalid_requests(client: httpx.AsyncClient, api_key: str, body: Any) -> None:
    response = await rpc(client, api_key, body)
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32600


async def test_invalid_params_name_the_field(client: httpx.AsyncClient, api_key: str) -> None:
    response = await rpc(client, api_key, call(C.format("sendMessage"), {"uuid": "x"}))
    error = response.json()["error"]
    assert error["code"] == -32602
    assert error["data"]["status"] == 400
    assert error["data"]["errors"] == [{"field": "text", "rule": "Field required"}]
    positional = await rpc(client, api_key, call(Q.format("findActionByCode"), ["SUMBRAND"]))
    assert positional.json()["error"]["code"] == -32602
    extra = await rpc(client, api_key, call(Q.format("findActionByCode"), {"code": "A", "x": 1}))
    assert extra.json()["error"]["data"]["errors"][0]["field"] == "x"
    # A name the method does not have is named as the caller wrote it.
    snake = await rpc(
        client, api_key, call(Q.format("findActionByCode"), {"code": "A", "not_known": 1})
    )
    assert snake.json()["error"]["data"]["errors"][0]["field"] == "not_known"


async def test_invalid_params_name_a_key_as_written_and_fields_in_camel_case(
    client: httpx.AsyncClient, api_key: str
) -> None:
    params = {
        "name": "probe",
        "message": "Hi",
        "model": "m",
        "mcp_servers": [{"url": "http://mcp.test/mcp", "headers": {"X-Api_Key": 5}}],
    }
    response = await rpc(client, api_key, call(C.format("runAdhoc"), params))
    errors = response.json()["error"]["data"]["errors"]
    assert errors == [
        {"field": 'mcpServers[0].headers["X-Api_Key"]', "rule": "Input should be a valid string"}
    ]


@pytest.mark.parametrize(
    ("model", "errors"),
    [
        (
            {"baseUrl": "http://llm.test/v1", "modelName": 5},
            [{"field": "model.modelName", "rule": "Input should be a valid string"}],
        ),
        (
            {"baseUrl": "http://llm.test/v1"},
            [{"field": "model.modelName", "rule": "Field required"}],
        ),
        (
            {"baseUrl": "http://llm.test/v1", "modelName": "m", "headers": {"team": 1}},
            [{"field": 'model.headers["team"]', "rule": "Input should be a valid string"}],
        ),
        # A header's name is the caller's data, named as written: never camel-cased.
        (
            {"baseUrl": "http://llm.test/v1", "modelName": "m", "headers": {"X-Team": 1}},
            [{"field": 'model.headers["X-Team"]', "rule": "Input should be a valid string"}],
        ),
        (
            {"baseUrl": "http://llm.test/v1", "modelName": "m", "headers": {"x_team.id": 1}},
            [{"field": 'model.headers["x_team.id"]', "rule": "Input should be a valid string"}],
        ),
        (
            7,
            [
                {
                    "field": "model",
                    "rule": "write a catalog model code (a string) or an object "
                    "{baseUrl, modelName, apiKey?, headers?}",
                }
            ],
        ),
    ],
)
async def test_run_adhoc_names_the_model_field_and_what_to_write(
    client: httpx.AsyncClient, api_key: str, model: Any, errors: list[dict[str, str]]
) -> None:
    # The object form was checked against the text form too: every mistake
    # came with a second error, both named by the validator's own types.
    params = {"name": "probe", "message": "Hi", "model": model}
    response = await rpc(client, api_key, call(C.format("runAdhoc"), params))
    error = response.json()["error"]
    assert error["code"] == -32602 and error["data"]["status"] == 400
    assert error["data"]["errors"] == errors
    assert "EndpointParam" not in error["data"]["detail"]
    assert "constrained-str" not in error["data"]["detail"]


async def test_pilothouse_errors_map_to_application_codes(
    client: httpx.AsyncClient, api_key: str
) -> None:
    missing = await rpc(client, api_key, call(Q.format("getConversation"), {"uuid": "nope"}))
    error = missing.json()["error"]
    assert error["code"] == -32001
    assert error["data"]["status"] == 404
    assert "nope" in error["data"]["detail"]
    started = await rpc(client, api_key, call(C.format("startConversation"), {"action": "CHAT"}))
    uuid = started.json()["result"]["uuid"]
    await rpc(client, api_key, call(C.format("cancel"), {"uuid": uuid}))
    finished = await rpc(
        client, api_key, call(C.format("sendMessage"), {"uuid": uuid, "text": "x"})
    )
    assert finished.json()["error"]["code"] in (-32002, -32004)
    bad_config = await rpc(
        client,
        api_key,
        call(
            C.format("checkMessage"),
            {"action": "CHAT", "text": "x", "runtimeConfig": {"nonsense": 1}},
        ),
    )
    assert bad_config.json()["error"]["code"] == -32004


async def test_tenants_are_isolated(
    client: httpx.AsyncClient, api_key: str, other_tenant_key: str
) -> None:
    started = await rpc(client, api_key, call(C.format("startConversation"), {"action": "CHAT"}))
    uuid = started.json()["result"]["uuid"]
    theirs = await rpc(client, other_tenant_key, call(Q.format("getConversation"), {"uuid": uuid}))
    assert theirs.json()["error"]["code"] == -32001


async def test_needs_a_key(client: httpx.AsyncClient) -> None:
    response = await client.post("/jsonrpc", json=call(Q.format("getAllActions")))
    assert response.status_code == 401


async def test_legacy_envelope_is_answered_in_its_own_shape(
    client: httpx.AsyncClient, api_key: str
) -> None:
    envelope = {
        "host": "erp-1",
        "service": "query",
        "action": "findAgentByCode",
        "version": "v1",
        "data": {"code": "ANALYST"},
    }
    response = await rpc(client, api_key, envelope)
    body = response.json()
    assert {k: body[k] for k in ("host", "service", "action", "version")} == {
        "host": "erp-1",
        "service": "query",
        "action": "findAgentByCode",
        "version": "v1",
    }
    assert body["data"]["code"] == "ANALYST"
    assert "error" not in body
    failing = await rpc(client, api_key, {**envelope, "action": "nope"})
    assert failing.json()["error"]["code"] == -32601
    assert "data" not in failing.json()


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"t": NaN}}', "NaN"),
        (b'{"jsonrpc": "2.0", "id": 1, "method": "x", "params": {"t": -Infinity}}', "Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "nests too deeply"),
    ],
)
async def test_non_json_numbers_and_deep_nesting_are_parse_errors_not_500(
    client: httpx.AsyncClient, api_key: str, body: bytes, detail: str
) -> None:
    response = await client.post(
        "/jsonrpc",
        content=body,
        headers={**auth(api_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 200
    error = response.json()["error"]
    assert error["code"] == -32700
    assert detail in error["data"]["detail"]
