from __future__ import annotations

import httpx
import pytest
from server_helpers import auth

from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def test_metrics_count_requests_turns_and_tokens(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(api_key))
    uuid = started.json()["uuid"]
    scripted.script.steps.append(Reply("fine", output_tokens=7))
    sent = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "hi"}, headers=auth(api_key)
    )
    result = sent.json()
    await client.get(f"/v1/conversations/{uuid}", headers=auth(api_key))
    await client.get("/no/such/route")
    text = (await client.get("/metrics")).text
    route = 'method="GET",route="/v1/conversations/{uuid}",status="200"'
    assert f"pilothouse_http_requests_total{{{route}}} 1.0" in text
    assert 'route="<unmatched>",status="404"' in text
    assert uuid not in text
    assert 'pilothouse_turns_total{status="CO",tenant="default"} 1.0' in text
    output = float(result["output_tokens"])
    assert f'pilothouse_tokens_total{{direction="output",tenant="default"}} {output}' in text
    assert 'pilothouse_model_calls_total{outcome="ok",tenant="default"} 1.0' in text
    assert 'pilothouse_turn_duration_seconds_count{tenant="default"} 1.0' in text
    assert "pilothouse_cost_total" in text
    # The same turn per provider and model (its AI marker's).
    model = 'model="scripted",provider="SCRP"'
    assert f'pilothouse_model_turns_total{{{model},status="CO"}} 1.0' in text
    assert f'pilothouse_model_tokens_total{{direction="output",{model}}} {output}' in text
    assert f"pilothouse_model_turn_duration_seconds_count{{{model}}} 1.0" in text
