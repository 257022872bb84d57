"""The service's side of seed 000: memory cleared over REST, questions expired on its clock."""

from __future__ import annotations

import anyio
import httpx
import pytest
from server_helpers import auth

from pilothouse.server._state import ServerSettings
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio


@pytest.fixture
def server_config() -> ServerSettings:
    # A short sweep, so the test does not wait long for a question to expire.
    return ServerSettings(host="127.0.0.1", shutdown_grace_seconds=2.0, question_sweep_seconds=0.2)


async def _action(client: httpx.AsyncClient, admin_key: str, body: dict[str, object]) -> None:
    base = {"model": "QWEN05", "configuration": "DFLT", "prompt": "Help."}
    created = await client.post(
        "/v1/catalog/actions", json={**base, **body}, headers=auth(admin_key)
    )
    assert created.status_code == 201, created.text


async def test_delete_memory_clears_the_conversations_memory(
    client: httpx.AsyncClient, admin_key: str, scripted: ScriptedModel
) -> None:
    await _action(client, admin_key, {"code": "REMEMBER", "memory_strategy": "W20"})
    headers = auth(admin_key)
    uuid = (
        await client.post("/v1/conversations", json={"action": "REMEMBER"}, headers=headers)
    ).json()["uuid"]
    scripted.script.steps.extend([Reply("Noted."), Reply("You said nothing I remember.")])
    await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "I am Ada."}, headers=headers
    )
    cleared = await client.delete(f"/v1/conversations/{uuid}/memory", headers=headers)
    assert cleared.status_code == 200
    assert cleared.json() == {"memory_id": uuid, "cleared": True}
    await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "Who am I?"}, headers=headers
    )
    sent = scripted.requests[-1].messages
    assert "I am Ada." not in repr(sent)
    assert "Who am I?" in repr(sent)
    missing = await client.delete("/v1/conversations/nope/memory", headers=headers)
    assert missing.status_code == 404


async def test_serve_expires_unanswered_questions_itself(
    client: httpx.AsyncClient, admin_key: str, scripted: ScriptedModel
) -> None:
    await _action(client, admin_key, {"code": "ASKQ", "question_timeout": 1})
    headers = auth(admin_key)
    uuid = (
        await client.post("/v1/conversations", json={"action": "ASKQ"}, headers=headers)
    ).json()["uuid"]
    question = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}
    scripted.script.steps.append(ToolCall("AskUserQuestion", question, call_id="q1"))
    paused = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "Order"}, headers=headers
    )
    assert paused.json()["status"] == "WA"
    # Nobody answers: the service's own sweep ends the conversation.
    status = "WA"
    with anyio.move_on_after(30):
        while status == "WA":
            await anyio.sleep(0.2)
            status = (await client.get(f"/v1/conversations/{uuid}", headers=headers)).json()[
                "status"
            ]
    assert status == "TE"
    view = (await client.get(f"/v1/conversations/{uuid}", headers=headers)).json()
    assert any(event["data"].get("reason") == "questions expired" for event in view["timeline"]), (
        view["timeline"]
    )
