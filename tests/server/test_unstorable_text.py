"""A NUL character or a lone surrogate, on every face and both stores.

Caller input holding text no database can keep is refused with a 4xx naming
the field and nothing written; a model's answer holding it is stored with
the character escaped and a note, never lost to a 500.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from server_helpers import auth, parse_sse

from pilothouse.catalog._enums import ProcessStatus
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

BAD = ["a\x00b", "a\ud800b"]


@pytest.fixture
def server_settings(database_url: str) -> Settings:
    # SQLite and PostgreSQL: the seed (examples + ECHO) is the server conftest's.
    return Settings(database_url=database_url, secrets_file=None)


def _raw(value: Any) -> bytes:
    # json.dumps writes a lone surrogate as its \ud800 escape, as a client would.
    return json.dumps(value).encode()


async def _post(client: httpx.AsyncClient, key: str, path: str, body: Any) -> httpx.Response:
    headers = {**auth(key), "content-type": "application/json"}
    return await client.post(path, content=_raw(body), headers=headers)


async def _new(client: httpx.AsyncClient, key: str) -> str:
    created = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(key))
    return created.json()["uuid"]


@pytest.mark.parametrize("bad", BAD, ids=["nul", "surrogate"])
async def test_unstorable_text_in_a_rest_message_is_refused_naming_the_field(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState, bad: str
) -> None:
    uuid = await _new(client, api_key)
    for path in (
        f"/v1/conversations/{uuid}/messages",
        f"/v1/conversations/{uuid}/messages?stream=true",
    ):
        answer = await _post(client, api_key, path, {"text": bad})
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"].startswith("text: contains a ")
    nested = await _post(
        client,
        api_key,
        f"/v1/conversations/{uuid}/messages",
        {"text": "hi", "input_data": {"city": bad}},
    )
    assert nested.status_code == 422
    assert "input_data.city" in nested.json()["detail"]
    stored = await server_state.facade("default").query.get_conversation(uuid)
    assert stored.status is ProcessStatus.NOT_STARTED


@pytest.mark.parametrize("bad", BAD, ids=["nul", "surrogate"])
async def test_unstorable_text_on_openai_invoke_and_jsonrpc_is_a_4xx(
    client: httpx.AsyncClient, api_key: str, bad: str
) -> None:
    openai = await _post(
        client,
        api_key,
        "/v1/chat/completions",
        {"model": "action:ECHO", "messages": [{"role": "user", "content": bad}]},
    )
    assert openai.status_code == 400, openai.text
    assert "contains a " in openai.json()["error"]["message"]
    streamed = await _post(
        client,
        api_key,
        "/v1/chat/completions",
        {"model": "action:ECHO", "stream": True, "messages": [{"role": "user", "content": bad}]},
    )
    assert streamed.status_code == 400, streamed.text
    invoke = await _post(
        client,
        api_key,
        "/v1/invoke",
        {"agentName": "Support bot", "model": "SMOLLM2", "message": bad},
    )
    assert invoke.status_code in (400, 422), invoke.text
    assert invoke.json()["detail"].startswith("message: ")
    rpc = await _post(
        client,
        api_key,
        "/jsonrpc",
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "pilothouse/command/startAndSend/v1",
            "params": {"action": "ECHO", "text": bad},
        },
    )
    assert rpc.status_code == 200, rpc.text
    # Bad input (-32004) from the check, or invalid params (-32602) where the
    # parser itself refuses a lone surrogate; either names the field.
    assert rpc.json()["error"]["code"] in (-32004, -32602)
    assert "text" in json.dumps(rpc.json()["error"])


@pytest.mark.parametrize("bad", BAD, ids=["nul", "surrogate"])
async def test_a_model_answer_holding_unstorable_text_is_stored_escaped_with_a_note(
    client: httpx.AsyncClient,
    api_key: str,
    scripted: ScriptedModel,
    server_state: ServerState,
    bad: str,
) -> None:
    escaped = "a\\u0000b" if "\x00" in bad else "a\\ud800b"
    for stream in (False, True):
        uuid = await _new(client, api_key)
        scripted.script.steps.append(Reply(bad))
        suffix = "?stream=true" if stream else ""
        answer = await _post(
            client, api_key, f"/v1/conversations/{uuid}/messages{suffix}", {"text": "hi"}
        )
        assert answer.status_code == 200, answer.text
        if stream:
            events = parse_sse(answer.text)
            assert events[-1][0] == "finished"
            assert events[-1][1]["status"] == "CO"
        else:
            assert answer.json()["status"] == "CO"
        messages = await server_state.facade("default").query.get_conversation_messages(uuid)
        assert messages[-1].content == escaped
        assert messages[-1].data is not None and messages[-1].data["text_escaped"] is True
