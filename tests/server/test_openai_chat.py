"""The OpenAI-compatible endpoints, through raw HTTP and the official client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
from fastapi import FastAPI
from pydantic_ai.messages import ModelRequest, ModelResponse, SystemPromptPart, UserPromptPart
from server_helpers import ExamplesAnd

from database_templates import Seed
from pilothouse.api import CommandApi
from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.server._state import ServerState
from pilothouse.testing import Fail, Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


# A skill-free action and an agent for it, beside the examples: these tests
# are about the wire format, not about prompt assembly of the examples.
# CHAT's model is not the local one: the runtime does not stream local models
# (llama.cpp cannot stream while tools are offered); the scripted model
# replaces it anyway, and streams.
EXTRA = """
providers:
  - code: OAIT
    kind: openai
    base_url: http://127.0.0.1:9/v1
models:
  - code: OAITESTM
    provider: OAIT
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
tools:
  - code: LOOKUP
    name: lookup
    kind: schema
    description: Look a brand up; the caller answers.
    input_schema:
      type: object
      properties:
        q: {type: string}
actions:
  - code: CHAT
    name: Chat about a document
    goal_description: Answers questions about a document.
    model: OAITESTM
    configuration: DFLT
    memory_strategy: W20
    prompt: "Answer about this document:\\n{document}"
  - code: CHATTOOL
    name: Chat with a caller-answered tool
    model: SMOLLM2
    configuration: DFLT
    tools: [LOOKUP]
    prompt: Look things up when asked.
agents:
  - code: HELPER
    name: Helper
    application: BRANDS
    prompt: Be helpful.
    goal_action: CHAT
"""


@pytest.fixture
def database_seed() -> Seed:
    return ExamplesAnd(EXTRA)


@pytest.fixture
async def oai(app: FastAPI, client: httpx.AsyncClient, api_key: str) -> AsyncIterator[Any]:
    # ``client`` runs the app's lifespan; the official client shares its transport.
    # The official client is built on httpx2; its transport calls the app in-process.
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(
        base_url="http://testserver/v1", api_key=api_key, http_client=http, max_retries=0
    ) as sdk:
        yield sdk


@pytest.fixture
def separate_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The conversations started in a transaction of their own, before their turn.

    A request without history to replay has its conversation written by the
    turn, with the user's message: none should land here.
    """
    started: list[str] = []
    original = CommandApi.start_conversation

    async def spy(self: CommandApi, *args: Any, **kwargs: Any) -> Any:
        conversation = await original(self, *args, **kwargs)
        started.append(conversation.uuid)
        return conversation

    monkeypatch.setattr(CommandApi, "start_conversation", spy)
    return started


async def _only_conversation(server_state: ServerState) -> tuple[Any, list[tuple[Any, str]]]:
    """The one stored conversation and its messages as ``(role, content)``."""
    facade = server_state.facade("default")
    page = await facade.query.list_conversations()
    assert page.total == 1
    stored = page.items[0]
    messages = await facade.query.get_conversation_messages(stored.uuid)
    return stored, [(m.role, m.content) for m in messages]


def _events(body: str) -> list[Any]:
    out: list[Any] = []
    for line in body.splitlines():
        if line.startswith("data: "):
            payload = line.removeprefix("data: ")
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


async def test_models_list_actions_and_agents(oai: Any) -> None:
    page = await oai.models.list()
    ids = [m.id for m in page.data]
    assert {"action:CHAT", "action:SUMBRAND", "agent:HELPER", "agent:WRITER"} <= set(ids)
    # Actions first, then agents, each sorted by code; plain codes are aliases, not listed.
    actions = [i for i in ids if i.startswith("action:")]
    agents = [i for i in ids if i.startswith("agent:")]
    assert ids == actions + agents and actions == sorted(actions) and agents == sorted(agents)
    assert "CHAT" not in ids
    assert page.data[0].owned_by == "pilothouse"


async def test_retrieve_model_accepts_plain_codes_and_refuses_unknown(oai: Any) -> None:
    assert (await oai.models.retrieve("CHAT")).id == "CHAT"
    with pytest.raises(openai.NotFoundError):
        await oai.models.retrieve("action:NOPE")


async def test_completion_non_streaming(
    oai: Any, scripted: ScriptedModel, server_state: ServerState, separate_starts: list[str]
) -> None:
    scripted.script.steps.append(Reply("Acme sells rockets.", input_tokens=12, output_tokens=4))
    answer = await oai.chat.completions.create(
        model="action:CHAT",
        messages=[
            {"role": "system", "content": "Answer in English."},
            {"role": "user", "content": "Acme brand book"},
        ],
        temperature=0.1,
        max_completion_tokens=50,
    )
    assert answer.object == "chat.completion"
    assert answer.choices[0].message.content == "Acme sells rockets."
    assert answer.choices[0].finish_reason == "stop"
    assert answer.usage.completion_tokens == 4
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + 4
    request = scripted.requests[0]
    first = request.messages[0]
    assert isinstance(first, ModelRequest)
    system = next(p for p in first.parts if isinstance(p, SystemPromptPart))
    assert "Answer in English." in system.content
    # The user's text fills the prompt's {document} placeholder.
    assert "Answer about this document:\nAcme brand book" in system.content
    assert request.info.model_settings is not None
    assert request.info.model_settings.get("temperature") == 0.1
    assert request.info.model_settings.get("max_tokens") == 50
    # One conversation, written with its first turn, named by the answer.
    stored, messages = await _only_conversation(server_state)
    assert separate_starts == []
    assert answer.model_extra["pilothouse"]["conversation_uuid"] == stored.uuid
    assert answer.id == f"chatcmpl-{stored.uuid}"
    assert (stored.action_code, stored.agent_code) == ("CHAT", None)
    assert stored.status is ProcessStatus.COMPLETED
    # The memory id defaults to the conversation's own uuid, as when it was started apart.
    assert stored.memory_id == stored.uuid
    # What the model was told is recorded first (SY), then the exchange.
    assert messages == [
        (MessageRole.SYSTEM, system.content),
        (MessageRole.USER, "Acme brand book"),
        (MessageRole.ASSISTANT, "Acme sells rockets."),
    ]


async def test_agent_model_runs_the_goal_action_as_the_agent(
    oai: Any, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("A summary."))
    answer = await oai.chat.completions.create(
        model="agent:HELPER", messages=[{"role": "user", "content": "text"}]
    )
    uuid = answer.model_extra["pilothouse"]["conversation_uuid"]
    stored = await server_state.facade("default").query.get_conversation(uuid)
    assert (stored.agent_code, stored.action_code) == ("HELPER", "CHAT")


async def test_earlier_messages_are_replayed_as_memory(
    oai: Any, scripted: ScriptedModel, server_state: ServerState, separate_starts: list[str]
) -> None:
    scripted.script.steps.append(Reply("Third answer."))
    answer = await oai.chat.completions.create(
        model="CHAT",
        messages=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "first answer"},
            {"role": "user", "content": "second"},
        ],
    )
    sent = scripted.requests[0].messages
    texts = [
        part.content
        for message in sent
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    assert texts == ["first", "second"]
    assert isinstance(sent[1], ModelResponse)
    uuid = answer.model_extra["pilothouse"]["conversation_uuid"]
    messages = await server_state.facade("default").query.get_conversation_messages(uuid)
    assert [(m.role, m.content) for m in messages if m.role is not MessageRole.SYSTEM] == [
        (MessageRole.USER, "first"),
        (MessageRole.ASSISTANT, "first answer"),
        (MessageRole.USER, "second"),
        (MessageRole.ASSISTANT, "Third answer."),
    ]
    # The system prompt is recorded with the turn, after the replayed history.
    assert [m.role for m in messages].index(MessageRole.SYSTEM) == 2
    assert messages[0].data == {"replayed": True}
    # The history is written before the turn, so this conversation is started apart.
    assert separate_starts == [uuid]


async def test_memory_id_makes_the_server_record_the_history(
    oai: Any, scripted: ScriptedModel, server_state: ServerState, separate_starts: list[str]
) -> None:
    scripted.script.steps.extend([Reply("one"), Reply("two")])
    headers = {"X-Pilothouse-Memory-Id": "chat-42"}
    await oai.chat.completions.create(
        model="CHAT", messages=[{"role": "user", "content": "hello"}], extra_headers=headers
    )
    # The client's copy of the history is ignored: the server's memory has it.
    await oai.chat.completions.create(
        model="CHAT",
        messages=[
            {"role": "user", "content": "hello (client copy)"},
            {"role": "assistant", "content": "one"},
            {"role": "user", "content": "again"},
        ],
        extra_headers=headers,
    )
    second = scripted.requests[1].messages
    texts = [p.content for m in second for p in m.parts if isinstance(p, UserPromptPart)]
    assert texts == ["hello", "again"]
    # Neither request replayed history: both conversations came with their turn.
    assert separate_starts == []
    page = await server_state.facade("default").query.list_conversations()
    assert [c.memory_id for c in page.items] == ["chat-42", "chat-42"]


async def test_the_user_field_never_replaces_the_requests_history(
    oai: Any, scripted: ScriptedModel, server_state: ServerState
) -> None:
    # CHATTOOL has no memory strategy: it has no memory of its own, but the
    # history a client sends is this request's and reaches the model whole.
    scripted.script.steps.extend([Reply("Hello Ada."), Reply("You are Bob.")])
    await oai.chat.completions.create(
        model="CHATTOOL", messages=[{"role": "user", "content": "I am Ada."}], user="alice"
    )
    answer = await oai.chat.completions.create(
        model="CHATTOOL",
        messages=[
            {"role": "user", "content": "I am Bob."},
            {"role": "assistant", "content": "Hi Bob."},
            {"role": "user", "content": "Who am I?"},
        ],
        user="alice",
    )
    second = scripted.requests[1].messages
    texts = [p.content for m in second for p in m.parts if isinstance(p, UserPromptPart)]
    assert texts == ["I am Bob.", "Who am I?"]
    uuid = answer.model_extra["pilothouse"]["conversation_uuid"]
    ph = server_state.facade("default")
    conversation = await ph.query.get_conversation(uuid)
    assert conversation.memory_id == uuid  # "alice" is not a memory id
    messages = await ph.query.get_conversation_messages(uuid)
    turn_message = [m for m in messages if m.role is MessageRole.USER][-1]
    assert turn_message.data is not None
    assert turn_message.data["end_user"] == "alice"
    assert turn_message.data["caller"]["face"] == "openai"


async def test_a_memory_id_for_an_action_without_memory_is_refused(
    oai: Any, scripted: ScriptedModel
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="CHATTOOL",
            messages=[{"role": "user", "content": "hello"}],
            extra_headers={"X-Pilothouse-Memory-Id": "chat-7"},
        )
    assert "has no memory strategy" in str(caught.value)
    assert scripted.requests == []


async def test_streaming_chunks_and_usage(
    oai: Any, scripted: ScriptedModel, server_state: ServerState, separate_starts: list[str]
) -> None:
    scripted.script.steps.append(Reply("alpha beta gamma", input_tokens=7, output_tokens=3))
    stream = await oai.chat.completions.create(
        model="action:CHAT",
        messages=[{"role": "user", "content": "doc"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [c async for c in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "alpha beta gamma"
    # Real deltas, not the whole answer at the end.
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 3
    assert chunks[0].choices[0].delta.role == "assistant"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 3
    assert chunks[-1].usage.prompt_tokens > 0
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    # The ids, sent from the first chunk on, name the conversation stored with the turn.
    stored, messages = await _only_conversation(server_state)
    assert separate_starts == []
    assert {c.id for c in chunks} == {f"chatcmpl-{stored.uuid}"}
    assert stored.status is ProcessStatus.COMPLETED
    assert messages[1:] == [(MessageRole.USER, "doc"), (MessageRole.ASSISTANT, "alpha beta gamma")]
    assert messages[0][0] is MessageRole.SYSTEM


async def test_streaming_wire_format_ends_with_done(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("hi there"))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "CHAT", "messages": [{"role": "user", "content": "x"}], "stream": True},
        headers=auth(api_key),
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = _events(response.text)
    assert events[-1] == "[DONE]"
    assert "usage" not in events[0]


async def test_tool_calls_finish_with_tool_calls(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(ToolCall("lookup", {"q": "acme"}, call_id="c1"))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "CHATTOOL", "messages": [{"role": "user", "content": "x"}]},
        headers=auth(api_key),
    )
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": '{"q": "acme"}'},
        }
    ]


async def test_streamed_tool_calls_come_before_the_finish(
    oai: Any, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(ToolCall("lookup", {"q": "acme"}, call_id="c1"))
    stream = await oai.chat.completions.create(
        model="action:CHATTOOL", messages=[{"role": "user", "content": "x"}], stream=True
    )
    chunks = [c async for c in stream]
    calls = [c.choices[0].delta.tool_calls for c in chunks if c.choices[0].delta.tool_calls]
    assert len(calls) == 1
    assert (calls[0][0].index, calls[0][0].id, calls[0][0].function.name) == (0, "c1", "lookup")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_bad_key_is_an_authentication_error(app: FastAPI, client: httpx.AsyncClient) -> None:
    # The official client is built on httpx2; its transport calls the app in-process.
    http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    async with openai.AsyncOpenAI(
        base_url="http://testserver/v1", api_key="ph_wrong", http_client=http, max_retries=0
    ) as sdk:
        with pytest.raises(openai.AuthenticationError) as caught:
            await sdk.chat.completions.create(
                model="CHAT", messages=[{"role": "user", "content": "x"}]
            )
    assert caught.value.code == "invalid_api_key"


@pytest.mark.parametrize("stream", [False, True])
async def test_unknown_model_is_not_found(
    oai: Any, server_state: ServerState, stream: bool
) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        await oai.chat.completions.create(
            model="NOPE", messages=[{"role": "user", "content": "x"}], stream=stream
        )
    assert caught.value.code == "model_not_found"
    assert caught.value.param == "model"
    assert await _conversations(server_state) == 0


async def test_other_tenants_action_is_not_found(
    client: httpx.AsyncClient,
    api_key: str,
    other_tenant_key: str,
    server_state: ServerState,
    tmp_path: Path,
) -> None:
    (tmp_path / "other.yaml").write_text(
        "actions:\n"
        "  - code: SECRETACT\n"
        "    name: Only the other tenant's\n"
        "    model: SMOLLM2\n"
        "    configuration: DFLT\n"
        "    prompt: Say hi.\n"
    )
    # The examples are the other tenant's already (the seed): only the action is new.
    await server_state.facade("other").catalog.import_files([tmp_path / "other.yaml"])
    listed = await client.get("/v1/models", headers=auth(other_tenant_key))
    assert "action:SECRETACT" in [m["id"] for m in listed.json()["data"]]
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "action:SECRETACT", "messages": [{"role": "user", "content": "x"}]},
        headers=auth(api_key),
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    mine = await client.get("/v1/models", headers=auth(api_key))
    assert "action:SECRETACT" not in [m["id"] for m in mine.json()["data"]]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "CHAT", "messages": []}, "messages"),
        (
            {"model": "CHAT", "messages": [{"role": "wizard", "content": "x"}]},
            "messages[0].role",
        ),
        (
            {"model": "CHAT", "messages": [{"role": "user", "content": "x"}], "temperature": 9},
            "temperature",
        ),
        ({"model": "CHAT", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        ({"model": "CHAT", "messages": [{"role": "assistant", "content": "x"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
    ],
)
async def test_bad_requests_are_400_naming_the_param(
    client: httpx.AsyncClient, api_key: str, body: dict[str, Any], param: str
) -> None:
    response = await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert param.split("[")[0] in error["message"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"frobnicate": True}, "Unrecognized request argument supplied: frobnicate"),
        ({"seed": 7}, "seed: not supported by pilothouse: leave it out"),
        ({"logprobs": True}, "logprobs: not supported by pilothouse (only false or null)"),
        ({"top_logprobs": 3}, "top_logprobs: not supported by pilothouse (only 0 or null)"),
        ({"store": False}, "store: pilothouse records every conversation for audit"),
        (
            {"modalities": ["text", "audio"]},
            'modalities: not supported by pilothouse (only ["text"]',
        ),
    ],
)
async def test_a_parameter_pilothouse_would_ignore_is_refused(
    client: httpx.AsyncClient, api_key: str, extra: dict[str, Any], said: str
) -> None:
    # Before: accepted and ignored (n=1 answers to a seed, no logprobs, ...).
    body = {"model": "CHAT", "messages": [{"role": "user", "content": "x"}], **extra}
    response = await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", next(iter(extra)))
    assert error["message"].startswith(said)


async def test_neutral_values_and_nulls_of_unhonoured_parameters_are_accepted(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("Fine."))
    body = {
        "model": "CHAT",
        "messages": [{"role": "user", "content": "x"}],
        "logprobs": False,
        "store": True,
        "metadata": {},
        "service_tier": "auto",
        "seed": None,
        "frobnicate": None,
    }
    response = await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "Fine."


async def test_an_unhonoured_parameter_is_a_bad_request_in_the_official_client(oai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="CHAT", messages=[{"role": "user", "content": "x"}], seed=7
        )
    assert caught.value.param == "seed"


async def test_bad_request_is_a_bad_request_error_in_the_client(oai: Any) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await oai.chat.completions.create(
            model="CHAT", messages=[{"role": "user", "content": "x"}], temperature=5
        )
    assert caught.value.param == "temperature"


async def test_malformed_json_is_400_in_openai_shape(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.post(
        "/v1/chat/completions",
        content=b"{nope",
        headers={**auth(api_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["type"] == "invalid_request_error"


async def test_failed_turn_is_502_and_not_retried(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    from pilothouse.errors import ProviderAuthError

    scripted.script.steps.append(Fail(ProviderAuthError("bad upstream key sk-secret")))
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "CHAT", "messages": [{"role": "user", "content": "x"}]},
        headers=auth(api_key),
    )
    assert response.status_code == 502
    assert response.headers["x-should-retry"] == "false"
    assert response.json()["error"]["code"] == "turn_failed"


async def test_image_parts_become_attachments(oai: Any, scripted: ScriptedModel) -> None:
    scripted.script.steps.append(Reply("A red dot."))
    await oai.chat.completions.create(
        model="CHAT",
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
                    },
                ],
            }
        ],
    )
    last = scripted.requests[0].messages[-1]
    assert "BinaryContent" in repr(last.parts[-1])


async def _change(server_state: ServerState, tmp_path: Path, yaml: str) -> None:
    """Import a catalog change: entities not in it are kept, and the revision moves on."""
    (tmp_path / "change.yaml").write_text(yaml)
    await server_state.facade("default").catalog.import_files([tmp_path / "change.yaml"])


async def _conversations(server_state: ServerState) -> int:
    page = await server_state.facade("default").query.list_conversations()
    return page.total


CHAT_INACTIVE = """
actions:
  - code: CHAT
    name: Chat about a document
    goal_description: Answers questions about a document.
    model: OAITESTM
    configuration: DFLT
    memory_strategy: W20
    prompt: "Answer about this document:\\n{document}"
    active: false
"""


@pytest.mark.parametrize("model", ["CHAT", "action:CHAT", "agent:HELPER"])
async def test_a_model_deactivated_after_use_is_not_found_and_writes_nothing(
    client: httpx.AsyncClient,
    api_key: str,
    scripted: ScriptedModel,
    server_state: ServerState,
    tmp_path: Path,
    model: str,
) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "x"}]}
    scripted.script.steps.append(Reply("first"))
    assert (
        await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    ).status_code == 200
    before = await _conversations(server_state)
    # The compiled action is cached now; deactivating CHAT (HELPER's goal) must still count.
    await _change(server_state, tmp_path, CHAT_INACTIVE)
    response = await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert (await client.get(f"/v1/models/{model}", headers=auth(api_key))).status_code == 404
    assert await _conversations(server_state) == before


async def test_an_inactive_agent_is_not_found(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState, tmp_path: Path
) -> None:
    await _change(
        server_state,
        tmp_path,
        "agents:\n  - code: HELPER\n    name: Helper\n    application: BRANDS\n"
        "    prompt: Be helpful.\n    goal_action: CHAT\n    active: false\n",
    )
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "agent:HELPER", "messages": [{"role": "user", "content": "x"}]},
        headers=auth(api_key),
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert await _conversations(server_state) == 0
    # The goal action itself is still a model.
    assert (await client.get("/v1/models/action:CHAT", headers=auth(api_key))).status_code == 200


@pytest.mark.parametrize("model", ["tool:CHAT", "agent:CHAT", "action:HELPER", "agent:", ":"])
async def test_model_ids_naming_nothing_are_not_found_and_write_nothing(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState, model: str
) -> None:
    response = await client.post(
        "/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "x"}]},
        headers=auth(api_key),
    )
    assert response.status_code == 404
    assert response.json()["error"] == {
        "message": f"The model '{model}' does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "model_not_found",
    }
    assert await _conversations(server_state) == 0


async def test_a_changed_prompt_is_used_by_the_next_completion(
    client: httpx.AsyncClient,
    api_key: str,
    scripted: ScriptedModel,
    server_state: ServerState,
    tmp_path: Path,
) -> None:
    body = {"model": "agent:HELPER", "messages": [{"role": "user", "content": "the text"}]}
    scripted.script.steps.extend([Reply("one"), Reply("two")])
    assert (
        await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    ).status_code == 200
    await _change(
        server_state,
        tmp_path,
        "agents:\n  - code: HELPER\n    name: Helper\n    application: BRANDS\n"
        "    prompt: 'Be brief about {topic}.'\n    goal_action: CHAT\n",
    )
    assert (
        await client.post("/v1/chat/completions", json=body, headers=auth(api_key))
    ).status_code == 200

    def system(index: int) -> str:
        first = scripted.requests[index].messages[0]
        assert isinstance(first, ModelRequest)
        return next(p.content for p in first.parts if isinstance(p, SystemPromptPart))

    assert "Be helpful." in system(0)
    # The new agent prompt, its new placeholder filled with the user's text.
    assert "Be brief about the text." in system(1)
    assert "Be helpful." not in system(1)


async def test_the_list_leaves_out_inactive_actions_and_agents_with_an_inactive_goal(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState, tmp_path: Path
) -> None:
    async def listed() -> list[str]:
        response = await client.get("/v1/models", headers=auth(api_key))
        return [m["id"] for m in response.json()["data"]]

    before = await listed()
    assert {"action:CHAT", "agent:HELPER"} <= set(before)
    await _change(server_state, tmp_path, CHAT_INACTIVE)
    after = await listed()
    assert "action:CHAT" not in after and "agent:HELPER" not in after
    assert after == [i for i in before if i not in {"action:CHAT", "agent:HELPER"}]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_model_deactivated_after_the_check_is_refused_and_writes_nothing(
    client: httpx.AsyncClient,
    api_key: str,
    server_state: ServerState,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    stream: bool,
) -> None:
    from pilothouse.server import _openai

    check = _openai._check

    async def check_then_deactivate(*args: Any, **kwargs: Any) -> None:
        await check(*args, **kwargs)
        await _change(server_state, tmp_path, CHAT_INACTIVE)

    # The window between the request's checks and its turn: the turn that
    # writes the new conversation checks the catalog again.
    monkeypatch.setattr(_openai, "_check", check_then_deactivate)
    response = await client.post(
        "/v1/chat/completions",
        json={"model": "CHAT", "messages": [{"role": "user", "content": "x"}], "stream": stream},
        headers=auth(api_key),
    )
    if stream:
        # The response has started by then: the refusal is an error event.
        assert response.status_code == 200
        events = _events(response.text)
        assert events[0]["choices"][0]["delta"]["role"] == "assistant"
        error = events[1]["error"]
        assert events[2:] == ["[DONE]"]
    else:
        assert response.status_code == 400
        error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "CHAT" in error["message"]
    assert await _conversations(server_state) == 0
