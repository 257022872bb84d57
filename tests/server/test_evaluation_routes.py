"""``/v1/evaluation``: a dataset from recorded conversations, a replay and a report over REST."""

from __future__ import annotations

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
