from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import httpx
import pytest
from server_helpers import auth, parse_sse

from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

DOC = {"document": "Acme sells rockets."}


async def start(client: httpx.AsyncClient, key: str, **extra: Any) -> str:
    body = {"agent": "WRITER", "action": "ECHO", **extra}
    response = await client.post("/v1/conversations", json=body, headers=auth(key))
    assert response.status_code == 201, response.text
    assert response.json()["status"] == "NS"
    return str(response.json()["uuid"])


async def test_start_with_memory_id(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/v1/conversations",
        json={"action": "ECHO", "memoryId": "mem-1"},
        headers=auth(api_key),
    )
    assert response.status_code == 201
    assert response.json()["memory_id"] == "mem-1"
    assert response.json()["agent_code"] is None


async def test_start_unknown_action_is_404(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/v1/conversations", json={"action": "NOPE"}, headers=auth(api_key)
    )
    assert response.status_code == 404
    assert response.json()["detail"] == "action 'NOPE' not found"


async def test_start_with_wrong_types_is_422_naming_fields(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.post(
        "/v1/conversations", json={"action": 5, "agnt": "x"}, headers=auth(api_key)
    )
    assert response.status_code == 422
    body = response.json()
    assert {e["field"] for e in body["errors"]} == {"action", "agnt"}
    assert all(e["rule"] for e in body["errors"])


async def test_a_bad_value_under_a_key_is_named_by_the_key_as_written(
    client: httpx.AsyncClient, api_key: str
) -> None:
    """An answer's id is the caller's data: named as sent, quoted, never camel- or dot-split."""
    response = await client.post(
        "/v1/conversations/any/answers",
        json={"answers": {"Shirt.Size": 5, "fit": "slim"}},
        headers=auth(api_key),
    )
    assert response.status_code == 422, response.text
    assert [e["field"] for e in response.json()["errors"]] == ['answers["Shirt.Size"]']


async def test_malformed_json_is_400(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/v1/conversations",
        content=b'{"action": ',
        headers={**auth(api_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["title"] == "Malformed JSON"


async def test_send_message_returns_the_turn_result(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    uuid = await start(client, api_key)
    scripted.script.steps.append(Reply("Acme makes rockets.", input_tokens=12, output_tokens=4))
    response = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "Summarize.", "inputData": DOC},
        headers=auth(api_key),
    )
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["status"] == "CO"
    assert result["output"] == "Acme makes rockets."
    assert result["input_tokens"] > 0
    assert result["output_tokens"] == 4
    assert result["cost"] == "0"


async def test_send_with_attachments_and_read_transcript(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    uuid = await start(client, api_key)
    scripted.script.steps.append(Reply("Seen."))
    attachments = [
        {"mediaType": "text/plain", "data": base64.b64encode(b"hello").decode(), "name": "a.txt"},
        {"mediaType": "image/png", "url": "https://example.invalid/a.png"},
    ]
    response = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "Look.", "inputData": DOC, "attachments": attachments},
        headers=auth(api_key),
    )
    assert response.status_code == 200, response.text
    transcript = (await client.get(f"/v1/conversations/{uuid}", headers=auth(api_key))).json()
    assert transcript["status"] == "CO"
    user = next(m for m in transcript["messages"] if m["role"] == "US")
    assert [(a["media_type"], a["size"]) for a in user["attachments"]] == [
        ("text/plain", 5),
        ("image/png", None),
    ]
    assert transcript["timeline"]


async def test_attachment_needs_one_source(client: httpx.AsyncClient, api_key: str) -> None:
    uuid = await start(client, api_key)
    response = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "x", "attachments": [{"mediaType": "text/plain"}]},
        headers=auth(api_key),
    )
    assert response.status_code == 422
    assert "exactly one of" in response.json()["errors"][0]["rule"]


async def test_bad_runtime_config_is_4xx(client: httpx.AsyncClient, api_key: str) -> None:
    uuid = await start(client, api_key)
    response = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "x", "inputData": DOC, "runtimeConfig": {"temperature": "hot"}},
        headers=auth(api_key),
    )
    assert response.status_code == 422
    assert response.headers["content-type"] == "application/problem+json"


async def test_stream_events(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    uuid = await start(client, api_key)
    scripted.script.steps.append(Reply("one two three", input_tokens=3, output_tokens=3))
    async with client.stream(
        "POST",
        f"/v1/conversations/{uuid}/messages?stream=true",
        json={"text": "Go.", "inputData": DOC},
        headers=auth(api_key),
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        text = (await response.aread()).decode()
    events = parse_sse(text)
    names = [name for name, _ in events]
    assert names[0] == "status"
    assert names.count("delta") == 3
    assert names[-1] == "finished"
    assert "".join(d["text"] for n, d in events if n == "delta") == "one two three"
    final = events[-1][1]
    assert final["status"] == "CO"
    assert final["input_tokens"] > 0
    assert final["output_tokens"] > 0
    assert Decimal(final["cost"]) == 0


async def test_stream_refused_turn_is_a_problem(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/v1/conversations/nope/messages?stream=true",
        json={"text": "Go."},
        headers=auth(api_key),
    )
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


async def test_cancel_idle_conversation_terminates_it_and_a_new_message_goes_on(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    uuid = await start(client, api_key)
    response = await client.post(f"/v1/conversations/{uuid}/cancel", headers=auth(api_key))
    assert response.status_code == 200
    assert response.json()["cancelled_running_turn"] is False
    assert response.json()["conversation"]["status"] == "TE"
    # TE takes new messages, so it can be cancelled again (a message may be on its way).
    again = await client.post(f"/v1/conversations/{uuid}/cancel", headers=auth(api_key))
    assert again.status_code == 200
    assert again.json()["cancelled_running_turn"] is False
    assert again.json()["conversation"]["status"] == "TE"
    # TE ends a turn, not the conversation (Ctrl-C in pilothouse chat goes on).
    scripted.script.steps.append(Reply("Going on."))
    again = await client.post(
        f"/v1/conversations/{uuid}/messages",
        json={"text": "x", "inputData": DOC},
        headers=auth(api_key),
    )
    assert again.status_code == 200
    assert again.json()["status"] == "CO"


async def test_list_filters_and_paginates(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    first = await start(client, api_key)
    await start(client, api_key)
    await client.post(
        "/v1/conversations",
        json={"agent": "ANALYST", "action": "COMPETITORS"},
        headers=auth(api_key),
    )
    scripted.script.steps.append(Reply("ok"))
    await client.post(
        f"/v1/conversations/{first}/messages",
        json={"text": "x", "inputData": DOC},
        headers=auth(api_key),
    )
    everything = (await client.get("/v1/conversations", headers=auth(api_key))).json()
    assert everything["total"] == 3
    page = (
        await client.get(
            "/v1/conversations", params={"limit": 1, "offset": 1}, headers=auth(api_key)
        )
    ).json()
    assert (len(page["items"]), page["total"], page["limit"], page["offset"]) == (1, 3, 1, 1)
    done = (
        await client.get("/v1/conversations", params={"status": "CO"}, headers=auth(api_key))
    ).json()
    assert [c["uuid"] for c in done["items"]] == [first]
    summaries = (
        await client.get("/v1/conversations", params={"action": "ECHO"}, headers=auth(api_key))
    ).json()
    assert summaries["total"] == 2
    future = (
        await client.get(
            "/v1/conversations", params={"from": "2999-01-01T00:00:00"}, headers=auth(api_key)
        )
    ).json()
    assert future["total"] == 0
    bad = await client.get("/v1/conversations", params={"status": "XX"}, headers=auth(api_key))
    assert bad.status_code == 422


async def test_tenant_isolation(
    client: httpx.AsyncClient, api_key: str, other_tenant_key: str
) -> None:
    uuid = await start(client, api_key)
    headers = auth(other_tenant_key)
    assert (await client.get(f"/v1/conversations/{uuid}", headers=headers)).status_code == 404
    cancel = await client.post(f"/v1/conversations/{uuid}/cancel", headers=headers)
    assert cancel.status_code == 404
    send = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "x"}, headers=headers
    )
    assert send.status_code == 404
    listed = (await client.get("/v1/conversations", headers=headers)).json()
    assert listed["total"] == 0
    mine = (await client.get(f"/v1/conversations/{uuid}", headers=auth(api_key))).json()
    assert mine["status"] == "NS"


async def test_question_then_answers_resume_the_turn(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    uuid = await start(client, api_key)
    question = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}
    scripted.script.steps.append(ToolCall("AskUserQuestion", question, call_id="q1"))
    paused = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "Order"}, headers=auth(api_key)
    )
    assert paused.json()["status"] == "WA"
    wrong = await client.post(
        f"/v1/conversations/{uuid}/answers", json={"answers": {"size": "XL"}}, headers=auth(api_key)
    )
    assert wrong.status_code == 422
    assert "must be one of" in wrong.json()["detail"]
    scripted.script.steps.append(Reply("Ordered size M."))
    done = await client.post(
        f"/v1/conversations/{uuid}/answers", json={"answers": {"size": "M"}}, headers=auth(api_key)
    )
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["output"]) == ("CO", "Ordered size M.")


async def test_answers_to_a_conversation_not_waiting_is_409(
    client: httpx.AsyncClient, api_key: str
) -> None:
    uuid = await start(client, api_key)
    response = await client.post(
        f"/v1/conversations/{uuid}/answers", json={"answers": {"a": "b"}}, headers=auth(api_key)
    )
    assert response.status_code == 409


async def test_tool_result_for_unknown_conversation_is_404(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.post(
        "/v1/conversations/nope/tool-results",
        json={"toolCallId": "c1", "result": {"ok": True}},
        headers=auth(api_key),
    )
    assert response.status_code == 404
