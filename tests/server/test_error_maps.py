"""One error map per face: every category is answered, and the faces agree on what an error is."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_helpers import auth

from pilothouse.errors import ErrorCategory
from pilothouse.server import _invoke, _jsonrpc, _openai
from pilothouse.server._problems import HTTP_STATUS
from pilothouse.server._state import ServerState
from pilothouse.testing import Json, ScriptedModel

pytestmark = pytest.mark.anyio


async def rpc(client: httpx.AsyncClient, key: str, method: str, params: Any) -> dict[str, Any]:
    """Call one JSON-RPC method; return the response object."""
    body = {"jsonrpc": "2.0", "id": 1, "method": f"pilothouse/{method}/v1", "params": params}
    response = await client.post("/jsonrpc", json=body, headers=auth(key))
    answer: dict[str, Any] = response.json()
    return answer


TABLES = {
    "rest": HTTP_STATUS,
    "invoke": _invoke._STATUS,
    "openai": _openai._ERRORS,
    "jsonrpc": _jsonrpc._ERRORS,
}


@pytest.mark.parametrize("face", sorted(TABLES))
def test_every_face_maps_every_category(face: str) -> None:
    assert set(TABLES[face]) == set(ErrorCategory)


def test_the_faces_agree_where_their_protocols_allow() -> None:
    for category in ErrorCategory:
        rest = HTTP_STATUS[category]
        if category is ErrorCategory.INVALID_INPUT:
            # The connector and the OpenAI protocol answer bad input 400; REST 422.
            assert (rest, _invoke._STATUS[category]) == (422, 400)
            continue
        assert _invoke._STATUS[category] == rest


async def test_a_conversation_in_the_wrong_state_is_a_conflict_everywhere_it_can_be(
    client: httpx.AsyncClient, api_key: str
) -> None:
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(api_key))
    uuid = started.json()["uuid"]
    # Answers to a conversation that asked nothing (not WA).
    rest = await client.post(
        f"/v1/conversations/{uuid}/answers", json={"answers": {"q": "x"}}, headers=auth(api_key)
    )
    assert rest.status_code == 409
    assert rest.json()["title"] == "Conflict"
    answer = await rpc(
        client, api_key, "command/submitAnswers", {"uuid": uuid, "answers": {"q": "x"}}
    )
    error = answer["error"]
    assert (error["code"], error["data"]["status"]) == (-32002, 409)


async def test_auth_errors_keep_their_headers_in_every_face(client: httpx.AsyncClient) -> None:
    bad = {"Authorization": "Bearer ph_nope_nope"}
    rest = await client.get("/v1/conversations", headers=bad)
    openai = await client.get("/v1/models", headers=bad)
    assert rest.status_code == openai.status_code == 401
    assert rest.headers["www-authenticate"] == openai.headers["www-authenticate"]
    assert rest.json()["detail"] == openai.json()["error"]["message"]
    assert openai.json()["error"]["code"] == "invalid_api_key"


async def test_a_key_over_its_rate_gets_retry_after_in_openai_shape(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    server_state.limiter.local.per_minute = 1
    first = await client.get("/v1/models", headers=auth(api_key))
    second = await client.get("/v1/models", headers=auth(api_key))
    assert first.status_code == 200
    assert second.status_code == 429
    assert int(second.headers["retry-after"]) >= 1
    assert second.json()["error"]["code"] == "rate_limit_exceeded"


async def test_jsonrpc_runs_an_adhoc_agent(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Json({"answer": 42}))
    params: dict[str, Any] = {
        "name": "Oracle",
        "message": "The answer?",
        "model": "SCRIPTEDM",
        "outputSchema": {"type": "object", "properties": {"answer": {"type": "integer"}}},
        "memory": {"memoryId": "rpc-1"},
    }
    result = (await rpc(client, api_key, "command/runAdhoc", params))["result"]
    assert result["result"]["output"] == {"answer": 42}
    assert result["memory_id"] == "rpc-1"
    refused = await rpc(client, api_key, "command/runAdhoc", {**params, "model": "NOSUCH"})
    error = refused["error"]
    assert (error["code"], error["data"]["status"]) == (-32004, 422)
    assert "model" in error["data"]["detail"]
