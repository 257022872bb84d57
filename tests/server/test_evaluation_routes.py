"""``/v1/evaluation``: a dataset from recorded conversations, a replay and a report over REST."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_helpers import auth

from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def test_dataset_replay_and_report(
    client: httpx.AsyncClient, admin_key: str, api_key: str, scripted: ScriptedModel
) -> None:
    headers = auth(admin_key)
    scripted.script.steps.extend([Reply("echoed"), Reply("echoed"), Reply("changed")])
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=headers)
    uuid = started.json()["uuid"]
    sent = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "say it"}, headers=headers
    )
    assert sent.status_code == 200, sent.text
    created = await client.post(
        "/v1/evaluation/datasets",
        json={"name": "echo", "from_conversations": True, "action": "ECHO"},
        headers=headers,
    )
    assert created.status_code == 201, created.text
    assert created.json()["cases"] == 1
    cases = (await client.get("/v1/evaluation/datasets/echo/cases", headers=headers)).json()
    assert cases[0]["expected_output"] == "echoed"
    base = await client.post(
        "/v1/evaluation/replays", json={"dataset": "echo", "run": "base"}, headers=headers
    )
    assert base.status_code == 200, base.text
    assert base.json()["results"][0]["output"] == "echoed"
    new = await client.post(
        "/v1/evaluation/replays", json={"dataset": "echo", "run": "new"}, headers=headers
    )
    assert new.json()["results"][0]["output"] == "changed"
    report = await client.post(
        "/v1/evaluation/replays/new/report",
        json={"against": "base", "scorers": ["exact"], "thresholds": {"exact": 1}},
        headers=headers,
    )
    assert report.status_code == 200, report.text
    assert report.json()["passed"] is False
    assert report.json()["pass_rates"] == {"exact": 0.0}
    unknown = await client.post(
        "/v1/evaluation/replays", json={"dataset": "echo", "speed": 2}, headers=headers
    )
    assert unknown.status_code == 422
    # Plain keys may not build datasets (they read every conversation).
    plain = await client.get("/v1/evaluation/datasets", headers=auth(api_key))
    assert plain.status_code == 403
    gone = await client.delete("/v1/evaluation/datasets/echo", headers=headers)
    assert gone.status_code == 204


async def _rpc(client: httpx.AsyncClient, key: str, action: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": f"pilothouse/evaluation/{action}/v1"}
    response = await client.post("/jsonrpc", json={**body, "params": params}, headers=auth(key))
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_same_over_json_rpc_for_admin_keys_only(
    client: httpx.AsyncClient, admin_key: str, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend(
        [Reply("changed"), Reply('{"reason": "no", "score": 0, "passed": false}')]
    )
    created = await _rpc(
        client,
        admin_key,
        "createDataset",
        {
            "name": "hand",
            "cases": [{"action": "ECHO", "input_text": "hi", "expected_output": "hi"}],
        },
    )
    assert created["result"]["cases"] == 1, created
    listed = await _rpc(client, admin_key, "listDatasets", {})
    assert [d["name"] for d in listed["result"]] == ["hand"]
    cases = await _rpc(client, admin_key, "getDatasetCases", {"name": "hand"})
    assert cases["result"][0]["expected_output"] == "hi"
    run = await _rpc(client, admin_key, "replay", {"dataset": "hand", "run": "r1"})
    assert run["result"]["results"][0]["output"] == "changed"
    again = await _rpc(client, admin_key, "getRun", {"run": "r1"})
    assert again["result"] == run["result"]
    runs = await _rpc(client, admin_key, "listRuns", {})
    assert [r["name"] for r in runs["result"]] == ["r1"]
    report = await _rpc(
        client,
        admin_key,
        "report",
        {"run": "r1", "scorers": ["exact", "judge:SCRIPTEDM"], "rubric": "Says hi."},
    )
    assert "result" in report, report
    result = report["result"]
    assert result["pass_rates"] == {"exact": 0.0, "judge:SCRIPTEDM": 0.0}, result
    judged = result["cases"][0]["scores"]["judge:SCRIPTEDM"]
    assert judged["detail"] == "no" and judged["conversation_uuid"]
    # Bad params name the field; plain keys are refused as over REST.
    bad = await _rpc(client, admin_key, "replay", {"dataset": "hand", "speed": 2})
    assert bad["error"]["code"] == -32602
    for action, params in (("listDatasets", {}), ("deleteDataset", {"name": "hand"})):
        refused = await _rpc(client, api_key, action, params)
        assert refused["error"]["code"] == -32007, refused
    deleted = await _rpc(client, admin_key, "deleteDataset", {"name": "hand"})
    assert deleted["result"] == {"deleted": "hand"}
    missing = await _rpc(client, admin_key, "getDatasetCases", {"name": "hand"})
    assert missing["error"]["data"]["status"] == 404


async def test_cases_and_recorded_conversations_together_are_refused_on_both_faces(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    # Each face names the flag the way its caller wrote it.
    cases = [{"action": "ECHO", "input_text": "hi", "expected_output": "hi"}]
    rest = await client.post(
        "/v1/evaluation/datasets",
        json={"name": "both", "from_conversations": True, "cases": cases},
        headers=auth(admin_key),
    )
    assert rest.status_code == 422, rest.text
    assert "give cases or from_conversations, not both" in rest.json()["detail"]
    rpc = await _rpc(
        client,
        admin_key,
        "createDataset",
        {"name": "both", "fromConversations": True, "cases": cases},
    )
    assert "give cases or fromConversations, not both" in rpc["error"]["data"]["detail"], rpc
    listed = await _rpc(client, admin_key, "listDatasets", {})
    assert listed["result"] == []


async def test_a_time_without_zone_or_a_bare_day_reads_as_utc_on_both_faces(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    # As /v1/conversations reads its from/to; a naive time reached the store
    # and failed there (500, and -32603 on JSON-RPC).
    for i, since in enumerate(("2024-01-01T00:00:00", "2024-01-01")):
        rest = await client.post(
            "/v1/evaluation/datasets",
            json={"name": f"rest{i}", "from_conversations": True, "since": since},
            headers=auth(admin_key),
        )
        assert rest.status_code == 201, rest.text
        rpc = await _rpc(
            client,
            admin_key,
            "createDataset",
            {"name": f"rpc{i}", "fromConversations": True, "until": since},
        )
        assert rpc["result"]["name"] == f"rpc{i}", rpc
