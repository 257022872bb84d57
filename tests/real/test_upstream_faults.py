"""A misbehaving upstream, through every face of the service.

A real OpenAI-compatible HTTP server on loopback (``fault_upstream``) reuses
tool-call ids across rounds, answers with no ``choices``, cuts its stream
before the end, or sends a 200 that is not JSON. Each fault must end
recovered, or ``FA`` with a full record and a 4xx/5xx the client can act on,
on every path: REST JSON, REST SSE, OpenAI JSON, OpenAI stream, ``/v1/invoke``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from fault_upstream import Reply, Upstream, chunk, completion, running_upstream, text_stream

from pilothouse.catalog._enums import ProcessStatus, TimelineKind, ToolCallStatus
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
  - code: QUIK
    max_tokens: 64
    retry_count: 1
    retry_delay: 0.01
tools:
  - code: WEATHER
    name: get_weather
    kind: python
    implementation: "real_tools:get_weather"
    description: Get the current weather in a city.
actions:
  - code: FAULTY
    name: Ask a faulty upstream
    model: MOCKMODEL
    configuration: QUIK
    prompt: Answer with the tools.
    tools: [WEATHER]
    ask_user: false
"""

PATHS = ["rest", "sse", "openai", "openai_stream", "invoke"]
STREAMED = {"sse", "openai_stream"}


def weather_call(city: str, call_id: str = "call_0") -> dict[str, Any]:
    arguments = json.dumps({"city": city})
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": arguments},
    }


def call_reply(path: str, city: str) -> Reply:
    """A call to get_weather with id ``call_0``, as the path's model call expects it."""
    if path in STREAMED:
        start = {"index": 0, **weather_call(city)}
        return Reply(
            events=[chunk({"role": "assistant", "tool_calls": [start]}), chunk({}, "tool_calls")]
        )
    return Reply(completion(None, [weather_call(city)]))


def text_reply(path: str, *pieces: str) -> Reply:
    if path in STREAMED:
        return Reply(events=text_stream(*pieces))
    return Reply(completion("".join(pieces)))


@dataclass
class Outcome:
    """What the client got: HTTP status, the text it saw, headers, the error it was told."""

    status: int
    text: str
    headers: Mapping[str, str] | None = None
    error: str | None = None


@dataclass
class Service:
    http: httpx.AsyncClient
    key: str
    state: ServerState
    upstream: Upstream
    app: FastAPI

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def send(self, path: str, text: str, uuid: str | None = None) -> Outcome:
        if path in ("rest", "sse"):
            if uuid is None:
                started = await self.http.post(
                    "/v1/conversations", json={"action": "FAULTY"}, headers=self.headers
                )
                assert started.status_code == 201, started.text
                uuid = started.json()["uuid"]
            url = f"/v1/conversations/{uuid}/messages"
            return await (self._rest(url, text) if path == "rest" else self._sse(url, text))
        if path == "invoke":
            return await self._invoke(text)
        return await self._openai(text, stream=path == "openai_stream")

    async def _rest(self, url: str, text: str) -> Outcome:
        response = await self.http.post(url, json={"text": text}, headers=self.headers)
        body = response.json()
        error = body.get("error") or body.get("detail")
        return Outcome(response.status_code, str(body.get("output") or ""), response.headers, error)

    async def _sse(self, url: str, text: str) -> Outcome:
        seen: list[str] = []
        error = None
        async with self.http.stream(
            "POST", url, params={"stream": "true"}, json={"text": text}, headers=self.headers
        ) as response:
            event = ""
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = json.loads(line[6:])
                    if event == "delta":
                        seen.append(data["text"])
                    elif event == "retry":
                        seen.clear()  # the documented meaning of a retry event
                    elif event in ("error", "finished"):
                        error = data.get("error") or (data.get("result") or {}).get("error")
        return Outcome(response.status_code, "".join(seen), response.headers, error)

    async def _invoke(self, text: str) -> Outcome:
        body = {"agentName": "Faulty", "model": "MOCKMODEL", "message": text, "tools": ["WEATHER"]}
        response = await self.http.post("/v1/invoke", json=body, headers=self.headers)
        answer = response.json()
        error = answer.get("error") or answer.get("detail")
        return Outcome(
            response.status_code, str(answer.get("output") or ""), response.headers, error
        )

    async def _openai(self, text: str, *, stream: bool) -> Outcome:
        # The official client is built on httpx2; its transport calls the app in-process.
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=self.app), timeout=60)
        client = openai.AsyncOpenAI(
            api_key=self.key, base_url="http://testserver/v1", http_client=http, max_retries=2
        )
        messages: list[Any] = [{"role": "user", "content": text}]
        seen: list[str] = []
        try:
            if not stream:
                answer = await client.chat.completions.create(model="FAULTY", messages=messages)
                return Outcome(200, answer.choices[0].message.content or "")
            pieces = await client.chat.completions.create(
                model="FAULTY", messages=messages, stream=True
            )
            async for piece in pieces:
                if piece.choices and piece.choices[0].delta.content:
                    seen.append(piece.choices[0].delta.content)
            return Outcome(200, "".join(seen))
        except openai.APIStatusError as exc:
            return Outcome(exc.status_code, "", exc.response.headers, exc.message)
        except openai.APIError as exc:
            return Outcome(200, "".join(seen), None, exc.message)

    async def conversations(self) -> list[ConversationView]:
        facade = self.state.facade("default")
        page = await facade.query.list_conversations()
        return [await facade.query.get_transcript(c.uuid) for c in page.items]


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


@pytest.fixture
async def service(tmp_path: Path, upstream: Upstream) -> AsyncIterator[Service]:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.format(base_url=upstream.base_url), encoding="utf-8")
    # The upstream is on loopback: the operator allows it (egress policy),
    # and grants the tool's module to tenants' catalogs.
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'faults.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.1"],
        catalog_code=["real_tools"],
    )
    state = ServerState(
        settings, server=ServerSettings(host="127.0.0.1", shutdown_grace_seconds=2.0)
    )
    await state.open()
    try:
        await state.facade("default").catalog.import_files([catalog])
        key, _ = await state.pilothouse.keys.create(name="faults")
        app: FastAPI = create_app(settings, state=state)
        transport = httpx.ASGITransport(app=app)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=transport, base_url="http://testserver", timeout=60
            ) as http,
        ):
            yield Service(http, key, state, upstream, app)
    finally:
        await state.aclose()


@pytest.mark.parametrize("path", PATHS)
async def test_upstream_reusing_call_ids_across_rounds_is_stored(
    service: Service, path: str
) -> None:
    up = service.upstream
    up.script(
        call_reply(path, "Paris"), call_reply(path, "Rome"), text_reply(path, "Sunny in both.")
    )
    outcome = await service.send(path, "Weather in Paris and Rome?")
    assert outcome.status == 200, outcome
    assert outcome.text == "Sunny in both."
    [conversation] = await service.conversations()
    assert conversation.status == ProcessStatus.COMPLETED.value
    calls = conversation.tool_calls
    assert [c.arguments for c in calls] == [{"city": "Paris"}, {"city": "Rome"}]
    assert calls[0].call_id == "call_0" and calls[1].call_id != "call_0"
    assert all(c.status == ToolCallStatus.SUCCEEDED.value for c in calls)
    # The second round's result answers the id the history holds for it.
    last = up.requests[2]["messages"]
    assert last[-1]["tool_call_id"] == last[-2]["tool_calls"][0]["id"] == calls[1].call_id


async def test_upstream_reusing_call_ids_across_turns_is_stored(service: Service) -> None:
    up = service.upstream
    up.script(call_reply("rest", "Paris"), text_reply("rest", "Sunny."))
    first = await service.send("rest", "Paris?")
    [conversation] = await service.conversations()
    up.script(call_reply("rest", "Rome"), text_reply("rest", "Warm."))
    second = await service.send("rest", "Rome?", uuid=conversation.uuid)
    assert (first.status, second.status, second.text) == (200, 200, "Warm.")
    [conversation] = await service.conversations()
    assert len({c.call_id for c in conversation.tool_calls}) == 2


def _empty_choices() -> Reply:
    body = completion("never")
    body["choices"] = []
    return Reply(body)


def _fault(path: str, kind: str) -> Reply:
    if kind == "empty_choices":
        if path in STREAMED:
            return Reply(
                events=[{"id": "x", "object": "chat.completion.chunk", "choices": []}], done=False
            )
        return _empty_choices()
    if kind == "cut_stream":
        return Reply(events=text_stream("ACK ")[:2], done=False)
    return Reply(b"<html>502 from a proxy</html>", content_type="text/html")


FAULTS = [
    (path, kind)
    for path in PATHS
    for kind in ("empty_choices", "not_json", "cut_stream")
    if kind != "cut_stream" or path in STREAMED
]


@pytest.mark.parametrize(("path", "kind"), FAULTS)
async def test_a_fault_once_is_retried_and_recovers(service: Service, path: str, kind: str) -> None:
    service.upstream.script(_fault(path, kind), text_reply(path, "ACK ", "and more."))
    outcome = await service.send(path, "Hello")
    assert outcome.status == 200, outcome
    [conversation] = await service.conversations()
    assert conversation.status == ProcessStatus.COMPLETED.value
    # The client saw exactly the recorded answer, never a re-sent prefix.
    assert outcome.text == "ACK and more."
    errors = [e.data for e in conversation.timeline if e.kind is TimelineKind.ERROR]
    assert [e["error"] for e in errors] == ["UnparseableResponseError"]
    if kind == "cut_stream":
        assert errors[0]["streamed"] == "ACK "  # what the client saw of the failed attempt


@pytest.mark.parametrize(("path", "kind"), FAULTS)
async def test_a_fault_that_persists_ends_failed_with_an_actionable_status(
    service: Service, path: str, kind: str
) -> None:
    service.upstream.script(_fault(path, kind))
    outcome = await service.send(path, "Hello")
    conversations = await service.conversations()
    assert len(conversations) == 1  # no client retry started another one
    [conversation] = conversations
    assert conversation.status == ProcessStatus.FAILED.value
    assert "UnparseableResponseError" in (conversation.error_detail or "")
    attempts = [
        e.data["attempt"]
        for e in conversation.timeline
        if e.kind is TimelineKind.ERROR and "attempt" in e.data
    ]
    # Every attempt recorded: QUIK's one retry (invoke runs its own configuration).
    assert attempts == [1, 2] if path != "invoke" else attempts[:2] == [1, 2]
    assert not [m for m in conversation.messages if m.role == "AS"]
    if path in STREAMED:
        assert outcome.error, outcome  # an error event, not a normal end
        assert outcome.text in ("", "ACK ")
    elif path == "rest":
        # The REST face answers a turn's own failure as its result (docs/http-api.md).
        assert outcome.status == 200
        assert "UnparseableResponseError" in (outcome.error or "")
    else:
        assert 400 <= outcome.status < 600 and outcome.status != 500, outcome
    if path in ("openai", "openai_stream") and outcome.headers is not None:
        assert outcome.headers.get("x-should-retry") == "false"


async def test_a_retried_answer_that_differs_from_the_text_sent_ends_the_stream_with_an_error(
    service: Service,
) -> None:
    cut = Reply(events=text_stream("Yes, ")[:2], done=False)
    service.upstream.script(cut, text_reply("openai_stream", "No, ", "never."))
    outcome = await service.send("openai_stream", "Hello")
    # The client saw only the first attempt's text, then an error naming the record.
    assert outcome.text == "Yes, "
    assert outcome.error is not None and "differs from the text already sent" in outcome.error
    [conversation] = await service.conversations()
    assert conversation.status == ProcessStatus.COMPLETED.value
    errors = [e.data for e in conversation.timeline if e.kind is TimelineKind.ERROR]
    assert errors[0]["streamed"] == "Yes, "  # the record holds what the client saw
    answers = [m.content for m in conversation.messages if m.role == "AS"]
    assert answers == ["No, never."]
