r"""Unstorable text from the model, on SQLite and PostgreSQL.

A real OpenAI-compatible upstream on loopback (``fault_upstream``) answers
with text no database can keep as it is: a structured (JSON) answer holding
a lone surrogate (``"\ud800"``), a tool call whose id or tool name holds a
NUL. Each turn must end with its answer stored (escaped and noted) or
refused cleanly: never a 500, never a lost answer, on both stores.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.store import ConversationView

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CATALOG = """\
providers:
  - code: MOCK
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: MOCKMODEL
    provider: MOCK
    model_name: mock
    capabilities: [FC, SR]
configurations:
  - code: ONCE
    max_tokens: 64
    retry_count: 0
tools:
  - code: WEATHER
    name: get_weather
    kind: python
    implementation: "real_tools:get_weather"
    description: Get the current weather in a city.
actions:
  - code: SHAPED
    name: A structured answer
    model: MOCKMODEL
    configuration: ONCE
    prompt: Answer as JSON.
    ask_user: false
    schemas:
      output:
        schema:
          type: object
          properties:
            name: {{type: string}}
          required: [name]
  - code: TOOLS
    name: Answer with a tool
    model: MOCKMODEL
    configuration: ONCE
    prompt: Use the tools.
    tools: [WEATHER]
    ask_user: false
"""


@pytest.fixture
def database_seed() -> None:
    return None


@dataclass
class Service:
    http: httpx.AsyncClient
    key: str
    upstream: Upstream
    state: ServerState

    async def transcript(self, uuid: str) -> ConversationView:
        return await self.state.facade("default").query.get_transcript(uuid)

    async def ask(self, action: str) -> tuple[httpx.Response, str]:
        headers = {"Authorization": f"Bearer {self.key}"}
        started = await self.http.post(
            "/v1/conversations", json={"action": action}, headers=headers
        )
        assert started.status_code == 201, started.text
        uuid = started.json()["uuid"]
        answered = await self.http.post(
            f"/v1/conversations/{uuid}/messages", json={"text": "Go"}, headers=headers
        )
        return answered, uuid

    async def record(self, uuid: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.key}"}
        found = await self.http.get(f"/v1/conversations/{uuid}", headers=headers)
        assert found.status_code == 200, found.text
        body: dict[str, Any] = found.json()
        return body


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


@pytest.fixture
async def service(tmp_path: Path, database_url: str, upstream: Upstream) -> AsyncIterator[Service]:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.format(base_url=upstream.base_url), encoding="utf-8")
    # The operator allows the loopback model server and grants the tool's module.
    settings = Settings(
        database_url=database_url,
        secrets_file=None,
        egress_allow=["127.0.0.1"],
        catalog_code=["real_tools"],
    )
    state = ServerState(settings, server=ServerSettings(host="127.0.0.1"))
    await state.open()
    try:
        await state.facade("default").catalog.import_files([catalog])
        key, _ = await state.pilothouse.keys.create(name="unstorable")
        app: FastAPI = create_app(settings, state=state)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver", timeout=60
            ) as http,
        ):
            yield Service(http, key, upstream, state)
    finally:
        await state.aclose()


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def messages_text(record: dict[str, Any]) -> str:
    return json.dumps(record, ensure_ascii=False)


async def test_lone_surrogate_in_a_structured_answer_is_stored_not_lost(
    service: Service,
) -> None:
    # The model's JSON text holds the escape; parsed, it is a lone surrogate.
    service.upstream.script(Reply(body=completion('{"name": "Ada \\ud800 Lovelace"}')))

    answered, uuid = await service.ask("SHAPED")

    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["status"] == "CO", body
    assert body["output"]["name"].startswith("Ada ")
    assert body["output"]["name"].endswith(" Lovelace")
    record = await service.record(uuid)
    assert record["status"] == "CO"
    assert "Lovelace" in messages_text(record)


async def test_nul_in_a_model_tool_call_id_is_stored_not_a_500(service: Service) -> None:
    service.upstream.script(
        Reply(body=completion(None, [tool_call("call\x00one", "get_weather", {"city": "Oslo"})])),
        Reply(body=completion("Sunny in Oslo.")),
    )

    answered, uuid = await service.ask("TOOLS")

    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["status"] == "CO", body
    assert body["output"] == "Sunny in Oslo."
    record = await service.record(uuid)
    assert record["status"] == "CO"
    (call,) = (await service.transcript(uuid)).tool_calls
    # Stored with the NUL escaped, and the tool really ran.
    assert call.call_id == "call\\u0000one"
    assert call.name == "get_weather"
    assert "Oslo" in (call.result or "")
    # The model was told the result under the id it sent.
    assert service.upstream.requests[1]["messages"][-1]["tool_call_id"] == "call\x00one"


async def test_nul_in_a_model_tool_name_is_refused_cleanly_not_a_500(service: Service) -> None:
    service.upstream.script(
        Reply(body=completion(None, [tool_call("call_1", "get_\x00weather", {"city": "Oslo"})])),
        Reply(body=completion("never asked")),
    )

    answered, uuid = await service.ask("TOOLS")

    # No such tool: the turn fails with the reason (retry_count 0 allows no
    # repair round), recorded in full on both stores.
    assert answered.status_code == 200, answered.text
    body = answered.json()
    assert body["status"] == "FA", body
    assert "unknown tool 'get_" in body["error"]
    assert "did you mean 'get_weather'" in body["error"]
    record = await service.record(uuid)
    assert record["status"] == "FA"
    transcript = await service.transcript(uuid)
    assert transcript.error_detail is not None
    assert "unknown tool 'get_" in transcript.error_detail
    assert len(service.upstream.requests) == 1
