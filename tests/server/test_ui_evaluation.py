"""The evaluation page: two replay runs side by side, the words that differ marked."""

from __future__ import annotations

import html

import httpx
import pytest
from fastapi import FastAPI
from server_helpers import auth

from pilothouse.server._ui._evaluation import word_diff
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def _login(client: httpx.AsyncClient, key: str) -> None:
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303


def test_word_diff_marks_only_the_words_that_differ() -> None:
    left, right = word_diff("Orca sells fish food.", "Orca sells <b>cat</b> food.")
    assert left == [("same", "Orca sells "), ("del", "fish"), ("same", " food.")]
    assert right == [("same", "Orca sells "), ("ins", "<b>cat</b>"), ("same", " food.")]
    assert word_diff("same", "same") == ([("same", "same")], [("same", "same")])


async def test_two_runs_side_by_side(
    app: FastAPI,
    client: httpx.AsyncClient,
    admin_key: str,
    api_key: str,
    scripted: ScriptedModel,
) -> None:
    headers = auth(admin_key)
    scripted.script.steps.extend(
        [
            Reply("Orca sells fish food."),
            Reply("Orca sells fish food."),
            Reply("Orca sells <b>cat</b> food."),
        ]
    )
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=headers)
    uuid = started.json()["uuid"]
    sent = await client.post(
        f"/v1/conversations/{uuid}/messages", json={"text": "what does Orca sell?"}, headers=headers
    )
    assert sent.status_code == 200, sent.text
    made = await client.post(
        "/v1/evaluation/datasets",
        json={"name": "orca", "from_conversations": True},
        headers=headers,
    )
    assert made.status_code == 201, made.text
    for run in ("base", "new"):
        replayed = await client.post(
            "/v1/evaluation/replays", json={"dataset": "orca", "run": run}, headers=headers
        )
        assert replayed.status_code == 200, replayed.text

    await _login(client, admin_key)
    listed = await client.get("/ui/evaluation")
    assert listed.status_code == 200
    assert "/ui/evaluation/compare?run=new" in listed.text and "orca" in listed.text
    page = await client.get("/ui/evaluation/compare", params={"run": "new", "against": "base"})
    assert page.status_code == 200, page.text
    text = page.text
    # Side by side: the baseline's word struck out, the run's marked, its markup escaped.
    assert "<del>fish</del>" in text
    assert f"<ins>{html.escape('<b>cat</b>')}</ins>" in text
    assert "<b>cat</b>" not in text
    assert "exact FAIL" in text and "tool_sequence pass" in text
    recorded = await client.get("/ui/evaluation/compare", params={"run": "base"})
    assert recorded.status_code == 200
    assert "against the recording" in recorded.text and "<del>" not in recorded.text
    missing = await client.get(
        "/ui/evaluation/compare", params={"run": "nope"}, headers={"Accept": "text/html"}
    )
    assert missing.status_code == 404 and "no replay run" in missing.text

    # A key without the admin scope sees neither the page nor the link.
    plain = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=client.base_url)
    async with plain:
        await _login(plain, api_key)
        assert (await plain.get("/ui/evaluation")).status_code == 403
        assert "/ui/evaluation" not in (await plain.get("/catalog/actions")).text
