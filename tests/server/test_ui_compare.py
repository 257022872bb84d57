"""Compare in the browser UI, through the app: one prompt, two or three columns, each a turn.

A scripted model answers; each column must be a conversation of its own
(audited, priced), sent with the configuration its column chose, and a
refused column must say why without stopping the others.
"""

from __future__ import annotations

import httpx
import pytest
from server_helpers import parse_sse

from pilothouse.server._state import ServerState
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def _login(client: httpx.AsyncClient, key: str) -> None:
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303, response.text


async def test_each_column_is_a_turn_of_its_own_with_its_configuration(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    page = await client.get("/compare")
    assert page.status_code == 200
    assert 'id="compare-target-0"' in page.text and 'value="PREC"' in page.text
    scripted.script.steps.extend([Reply("First answer."), Reply("Second answer.")])
    response = await client.post(
        "/ui/compare",
        json={
            "text": "Name a colour.",
            "columns": [
                {"target": "action:ECHO"},
                {"target": "model:QWEN05", "configuration": "PREC"},
            ],
        },
    )
    assert response.status_code == 200, response.text
    events = parse_sse(response.text)
    assert events[-1][0] == "done"
    finished = {int(str(d["index"])): d for name, d in events if name == "finished"}
    assert finished[0]["output"] == "First answer." and finished[1]["output"] == "Second answer."
    for result in finished.values():
        assert result["status"] == "CO"
        assert isinstance(result["latency_ms"], int) and result["latency_ms"] >= 0
        assert int(str(result["input_tokens"])) > 0
    uuids = {int(str(d["index"])): str(d["uuid"]) for name, d in events if name == "column"}
    assert len(set(uuids.values())) == 2
    ph = server_state.pilothouse
    # Each column is a normal audited conversation, named by the prompt.
    for index, uuid in uuids.items():
        view = await ph.query.get_transcript(uuid)
        assert view.timeline, index
        assert (await ph.history.get(uuid)).title == "Compare: Name a colour."
    assert (await ph.query.get_transcript(uuids[1])).action_code == "INVOKE"
    # The second column was sent with PREC's options (temperature 0, max_tokens 512).
    settings = scripted.requests[-1].info.model_settings or {}
    assert settings.get("temperature") == 0 and settings.get("max_tokens") == 512
    first = scripted.requests[-2].info.model_settings or {}
    assert first.get("max_tokens") != 512


async def test_a_refused_column_says_why_and_the_others_run(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Still here."))
    response = await client.post(
        "/ui/compare",
        json={
            "text": "Hi",
            "columns": [
                {"target": "action:NOPE"},
                {"target": "action:ECHO", "configuration": "NOCONF"},
                {"target": "action:ECHO"},
            ],
        },
    )
    events = parse_sse(response.text)
    errors = {int(str(d["index"])): str(d["detail"]) for name, d in events if name == "error"}
    assert "NOPE" in errors[0] and "NOCONF" in errors[1]
    assert [int(str(d["index"])) for n, d in events if n == "finished"] == [2]
    # One column, or four, is refused before anything runs.
    for columns in ([{"target": "action:ECHO"}], [{"target": "action:ECHO"}] * 4):
        refused = await client.post("/ui/compare", json={"text": "Hi", "columns": columns})
        assert refused.status_code == 422
    unknown = await client.post(
        "/ui/compare",
        json={"text": "Hi", "columns": [{"target": "action:ECHO", "temp": 1}] * 2},
    )
    assert unknown.status_code == 422 and "temp" in unknown.text
