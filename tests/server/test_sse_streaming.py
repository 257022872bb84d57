"""SSE read by a real HTTP client over a real socket while the model streams."""

from __future__ import annotations

import time

import httpx
import pytest
from fastapi import FastAPI
from server_helpers import auth, serve_on_loopback

from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def test_deltas_arrive_while_the_model_streams(
    app: FastAPI, api_key: str, scripted: ScriptedModel
) -> None:
    # Five words 0.2 s apart: a buffered response would deliver every event
    # at once after about a second.
    scripted.script.steps.append(Reply("one two three four five", chunk_delay=0.2))
    async with serve_on_loopback(app) as base, httpx.AsyncClient(base_url=base) as http:
        started = await http.post(
            "/v1/conversations", json={"action": "ECHO"}, headers=auth(api_key)
        )
        uuid = started.json()["uuid"]
        arrivals: list[tuple[str, float]] = []
        async with http.stream(
            "POST",
            f"/v1/conversations/{uuid}/messages",
            params={"stream": "true"},
            json={"text": "Count."},
            headers=auth(api_key),
        ) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    arrivals.append((line.removeprefix("event: "), time.monotonic()))
    names = [name for name, _ in arrivals]
    assert names.count("delta") == 5
    assert names[-1] == "finished"
    deltas = [at for name, at in arrivals if name == "delta"]
    assert deltas[-1] - deltas[0] > 0.5
