from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from server_helpers import auth

from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample ``name`` with exactly these labels."""
    values = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and s.labels == labels
    ]
    assert len(values) == 1, f"{name}{labels}: {values}"
    return values[0]


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


async def test_metrics_per_action_model_call_and_first_token_without_conversation_ids(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("streamed answer", output_tokens=3))
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=auth(api_key))
    uuid = started.json()["uuid"]
    # A streamed turn: the model call reports its time to first token.
    async with client.stream(
        "POST",
        f"/v1/conversations/{uuid}/messages",
        params={"stream": "true"},
        json={"text": "hi"},
        headers=auth(api_key),
    ) as response:
        body = (await response.aread()).decode()
    assert response.status_code == 200, body
    text = (await client.get("/metrics")).text
    labels = {"provider": "SCRP", "model": "scripted", "action": "ECHO"}
    assert sample(text, "pilothouse_action_turns_total", status="CO", **labels) == 1
    assert sample(text, "pilothouse_action_turn_duration_seconds_count", status="CO", **labels)
    assert sample(text, "pilothouse_action_tokens_total", direction="output", **labels) > 0
    call = "pilothouse_model_call_duration_seconds_count"
    assert sample(text, call, status="ok", **labels) == 1
    assert sample(text, "pilothouse_model_time_to_first_token_seconds_count", **labels) == 1
    assert uuid not in text
