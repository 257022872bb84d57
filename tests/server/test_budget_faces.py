"""A spent budget is answered the same way on every face, each in its own protocol."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from server_helpers import auth

from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio


async def one_turn_budget(client: httpx.AsyncClient, admin_key: str) -> None:
    """The tenant may run one turn a month; the first turn takes it."""
    created = await client.post(
        "/v1/catalog/budgets",
        json={"code": "ONETURN", "scope": "tenant", "period": "month", "turns": 1},
        headers=auth(admin_key),
    )
    assert created.status_code == 201, created.text


async def downgrade_budget(
    client: httpx.AsyncClient, admin_key: str, thresholds: list[int] | None = None
) -> None:
    """The tenant's turns past the first of the month run on SMOLLM2 instead."""
    created = await client.post(
        "/v1/catalog/budgets",
        json={
            "code": "ONETURN",
            "scope": "tenant",
            "period": "month",
            "turns": 1,
            "on_limit": "downgrade",
            "downgrade_to": "SMOLLM2",
            "thresholds": thresholds or [],
        },
        headers=auth(admin_key),
    )
    assert created.status_code == 201, created.text


async def streamed_chunks(client: httpx.AsyncClient, admin_key: str) -> list[dict[str, Any]]:
    """The chunks of a streamed OpenAI-face completion of ECHO, parsed."""
    streamed = await client.post(
        "/v1/chat/completions",
        json={
            "model": "action:ECHO",
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        },
        headers=auth(admin_key),
    )
    return [
        json.loads(line.removeprefix("data: "))
        for line in streamed.text.splitlines()
        if line.startswith("data: {")
    ]


async def rest_turn(client: httpx.AsyncClient, key: str) -> httpx.Response:
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(key))
    uuid = started.json()["uuid"]
    return await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "Hello"}, headers=auth(key)
    )


async def test_every_face_refuses_a_spent_budget_in_its_own_protocol(
    client: httpx.AsyncClient, admin_key: str, other_tenant_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend([Reply("hi")] * 3)
    await one_turn_budget(client, admin_key)
    first = await rest_turn(client, admin_key)
    assert first.status_code == 200, first.text

    rest = await rest_turn(client, admin_key)
    assert rest.status_code == 429
    problem = rest.json()
    assert problem["type"] == "budget-exceeded"
    assert problem["budget"] == "ONETURN" and problem["limit"] == "turns"
    assert problem["remaining"] == {"turns": "0"}
    assert problem["resets_at"].endswith("+00:00")
    assert int(rest.headers["retry-after"]) >= 1

    openai = await client.post(
        "/v1/chat/completions",
        json={"model": "action:ECHO", "messages": [{"role": "user", "content": "x"}]},
        headers=auth(admin_key),
    )
    assert openai.status_code == 429
    assert openai.json()["error"]["code"] == "insufficient_quota"
    assert openai.json()["error"]["type"] == "insufficient_quota"

    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "pilothouse/command/startAndSend/v1",
        "params": {"action": "ECHO", "text": "x"},
    }
    rpc = (await client.post("/jsonrpc", json=body, headers=auth(admin_key))).json()
    assert rpc["error"]["code"] == -32010
    assert rpc["error"]["data"]["type"] == "budget-exceeded"
    assert rpc["error"]["data"]["status"] == 429

    invoke = await client.post(
        "/v1/invoke",
        json={"agentName": "Support bot", "model": "SMOLLM2", "message": "Hello"},
        headers=auth(admin_key),
    )
    assert invoke.status_code == 429
    assert invoke.json()["budget"] == "ONETURN"

    # The refused turns never reached the model, and another tenant is untouched.
    assert len(scripted.requests) == 1
    other = await rest_turn(client, other_tenant_key)
    assert other.status_code == 200, other.text


async def test_a_downgrade_budget_answers_on_every_face_and_each_record_names_both_models(
    client: httpx.AsyncClient, admin_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend([Reply("hi")] * 6)
    await downgrade_budget(client, admin_key, thresholds=[100])
    unknown = await client.post(
        "/v1/catalog/budgets",
        json={"code": "NOPE", "turns": 1, "on_limit": "downgrade", "downgrade_to": "NOSUCH"},
        headers=auth(admin_key),
    )
    assert unknown.status_code == 422 and "NOSUCH" in unknown.text

    first = await rest_turn(client, admin_key)
    rest = await rest_turn(client, admin_key)
    openai = await client.post(
        "/v1/chat/completions",
        json={"model": "action:ECHO", "messages": [{"role": "user", "content": "x"}]},
        headers=auth(admin_key),
    )
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "pilothouse/command/startAndSend/v1",
        "params": {"action": "ECHO", "text": "x"},
    }
    rpc = (await client.post("/jsonrpc", json=body, headers=auth(admin_key))).json()
    invoke = await client.post(
        "/v1/invoke",
        json={"agentName": "Support bot", "model": "SCRIPTEDM", "message": "Hello"},
        headers=auth(admin_key),
    )
    # Past the limit nothing is refused: the turns ran on the cheaper model.
    assert first.status_code == rest.status_code == openai.status_code == 200
    assert invoke.status_code == 200, invoke.text
    assert "error" not in rpc, rpc
    assert len(scripted.requests) == 5
    # The OpenAI face and /v1/invoke name the model that ran, and the one asked for.
    completion = openai.json()
    assert completion["model"] == "SMOLLM2"
    assert completion["pilothouse"]["model"] == "SMOLLM2"
    assert completion["pilothouse"]["requested_model"] == "SCRIPTEDM"
    assert invoke.json()["model"] == "SMOLLM2"
    assert invoke.json()["requestedModel"] == "SCRIPTEDM"
    assert rest.json()["model"] == "SMOLLM2" and rest.json()["requested_model"] == "SCRIPTEDM"
    # Streamed, the chunks after the turn's end name the model that ran.
    chunks = await streamed_chunks(client, admin_key)
    (last,) = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert last["model"] == "SMOLLM2"
    assert last["pilothouse"] == {"model": "SMOLLM2", "requested_model": "SCRIPTEDM"}

    async def budget_events(uuid: str) -> list[dict[str, Any]]:
        read = await client.get(f"/v1/conversations/{uuid}", headers=auth(admin_key))
        assert read.status_code == 200, read.text
        events = [e["data"] for e in read.json()["timeline"] if e["kind"] == "budget"]
        return [e for e in events if "threshold" not in e]  # the alert is asserted below

    assert await budget_events(first.json()["conversation_uuid"]) == []
    for uuid in (rest.json()["conversation_uuid"], rpc["result"]["conversation_uuid"]):
        (event,) = await budget_events(uuid)
        assert event["downgraded"] is True and event["budget"] == "ONETURN"
        assert event["requested_model"] == "SCRIPTEDM" and event["model"] == "SMOLLM2"
    # /metrics counts the one alert (the first turn spent the one turn) and
    # the five switched calls.
    metrics = (await client.get("/metrics")).text
    alert = 'pilothouse_budget_alerts_total{budget="ONETURN",scope="tenant",threshold="100"} 1.0'
    assert alert in metrics
    assert 'pilothouse_budget_downgrades_total{budget="ONETURN",model="SMOLLM2"} 5.0' in metrics


async def test_usage_is_the_same_on_rest_and_json_rpc_and_stays_in_the_tenant(
    client: httpx.AsyncClient, admin_key: str, other_tenant_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend([Reply("hi", input_tokens=7, output_tokens=3)] * 3)
    for _ in range(2):
        assert (await rest_turn(client, admin_key)).status_code == 200
    assert (await rest_turn(client, other_tenant_key)).status_code == 200

    rest = await client.get(
        "/v1/usage", params=[("by", "action"), ("by", "day")], headers=auth(admin_key)
    )
    assert rest.status_code == 200, rest.text
    (row,) = rest.json()
    assert row["group"]["action"] == "ECHO"
    assert (row["conversations"], row["input_tokens"], row["output_tokens"]) == (2, 14, 6)

    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "pilothouse/query/usage/v1",
        "params": {"by": ["action", "day"]},
    }
    rpc = (await client.post("/jsonrpc", json=body, headers=auth(admin_key))).json()
    assert rpc["result"] == rest.json()

    other = await client.get("/v1/usage", headers=auth(other_tenant_key))
    assert [r["conversations"] for r in other.json()] == [1]

    wrong = await client.get("/v1/usage", params={"by": "colour"}, headers=auth(admin_key))
    assert wrong.status_code == 422
    assert "write one or more of tenant, key, agent" in wrong.text
    bad_day = await client.get("/v1/usage", params={"since": "12/01"}, headers=auth(admin_key))
    assert bad_day.status_code == 422 and "since" in bad_day.text
    # The last day a date can name: counting up to the midnight after it overflowed (500).
    everything = {"by": ["action", "day"], "until": "9999-12-31"}
    last_day = await client.get("/v1/usage", params=everything, headers=auth(admin_key))
    assert last_day.status_code == 200 and last_day.json() == rest.json()


async def test_a_downgraded_stream_names_the_model_that_ran_in_every_chunk(
    client: httpx.AsyncClient, admin_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend([Reply("hi there, said in a few words")] * 2)
    await downgrade_budget(client, admin_key)
    assert (await rest_turn(client, admin_key)).status_code == 200
    chunks = await streamed_chunks(client, admin_key)
    texts = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert texts, chunks
    # The role chunk, every text chunk and the last: each names the model that wrote them.
    assert {c["model"] for c in chunks} == {"SMOLLM2"}
    assert "".join(c["choices"][0]["delta"]["content"] for c in texts) == (
        "hi there, said in a few words"
    )


async def test_answers_through_rest_are_charged_to_the_key_that_gives_them(
    client: httpx.AsyncClient, api_key: str, admin_key: str, scripted: ScriptedModel
) -> None:
    """A budget per API key: the turn the answers resume spends on the answering key."""
    created = await client.post(
        "/v1/catalog/budgets",
        json={"code": "PERKEY", "scope": "api_key", "period": "month", "turns": 1},
        headers=auth(admin_key),
    )
    assert created.status_code == 201, created.text
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(api_key))
    uuid = started.json()["uuid"]
    question = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}
    scripted.script.steps.extend(
        [ToolCall("AskUserQuestion", question, call_id="q1"), Reply("Ordered size M.")]
    )
    paused = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "Order"}, headers=auth(api_key)
    )
    assert paused.json()["status"] == "WA", paused.text
    # The starting key's one turn is spent; the answering key still has its own.
    done = await client.post(
        f"/v1/conversations/{uuid}/answers",
        json={"answers": {"size": "M"}},
        headers=auth(admin_key),
    )
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "CO"
    # Each key spent its one turn: neither starts another.
    for key in (api_key, admin_key):
        again = await rest_turn(client, key)
        assert again.status_code == 429, again.text
        assert again.json()["budget"] == "PERKEY"
