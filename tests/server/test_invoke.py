"""The one-call connector ``POST /v1/invoke``: validation, memory, secrets."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart

from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Fail, Json, Reply, ScriptedModel

pytestmark = pytest.mark.anyio


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
def server_settings(server_settings: Settings) -> Settings:
    # These tests point baseUrl and mcpServers at loopback: the operator's
    # allow-list lets them; the egress tests below use the default policy.
    return server_settings.model_copy(update={"egress_allow": ["127.0.0.1"]})


PLANTED_KEY = "sk-planted-invoke-secret-0042"


def _body(**extra: Any) -> dict[str, Any]:
    return {"agentName": "Support bot", "model": "SMOLLM2", "message": "Hello", **extra}


async def _invoke(client: httpx.AsyncClient, key: str, **extra: Any) -> httpx.Response:
    return await client.post("/v1/invoke", json=_body(**extra), headers=auth(key))


async def test_invoke_answers_with_output_and_a_generated_memory_id(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("Hi there!", input_tokens=5, output_tokens=2))
    response = await _invoke(
        client,
        api_key,
        agentDescription="Helps customers.",
        instruction="Be brief.",
        instructionMode="replace",
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output"] == "Hi there!"
    assert body["outputAiMeta"]["aiGenerated"] is True
    assert body["status"] == "CO"
    usage = body["usage"]
    assert usage["outputTokens"] == 2
    assert usage["totalTokens"] == usage["inputTokens"] + 2
    assert usage["cost"] == "0"
    assert len(body["memoryId"]) == 36
    system = next(
        p for p in scripted.requests[0].messages[0].parts if isinstance(p, SystemPromptPart)
    )
    assert system.content.startswith("Be brief.")
    assert "You are Support bot. Helps customers." in system.content
    stored = await server_state.facade("default").query.get_conversation(body["conversationUuid"])
    assert (stored.action_code, stored.agent_code, stored.memory_id) == (
        "INVOKE",
        None,
        body["memoryId"],
    )


async def test_same_memory_id_continues_one_conversation(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.extend([Reply("first answer"), Reply("second answer")])
    memory = {"memoryId": "flow-7", "useChatMemory": True}
    first = (await _invoke(client, api_key, message="first", **memory)).json()
    second = (await _invoke(client, api_key, message="second", **memory)).json()
    assert first["conversationUuid"] == second["conversationUuid"]
    assert second["memoryId"] == "flow-7"
    # The second call's model request carries the first exchange as history.
    history = scripted.requests[1].messages
    texts = [p.content for m in history for p in m.parts if isinstance(p, UserPromptPart)]
    assert texts == ["first", "second"]
    messages = await server_state.facade("default").query.get_conversation_messages(
        first["conversationUuid"]
    )
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    assert messages[0].data is not None
    assert messages[0].data["invoke"]["agentName"] == "Support bot"


async def test_memory_window_limits_history(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend([Reply("a1"), Reply("a2"), Reply("a3")])
    for text in ("m1", "m2", "m3"):
        await _invoke(
            client,
            api_key,
            message=text,
            memoryId="win",
            useChatMemory=True,
            chatMemoryMaxMessages=3,
        )
    last = scripted.requests[2].messages
    texts = [p.content for m in last for p in m.parts if isinstance(p, UserPromptPart)]
    assert texts == ["m2", "m3"]


async def test_without_chat_memory_each_call_is_fresh(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend([Reply("a"), Reply("b")])
    first = (await _invoke(client, api_key, useChatMemory=False, memoryId="x")).json()
    second = (await _invoke(client, api_key, useChatMemory=False, memoryId="x")).json()
    assert first["conversationUuid"] != second["conversationUuid"]
    assert first["memoryId"] != "x"
    assert "memoryId is ignored without useChatMemory" in first["warnings"]
    assert len(scripted.requests[1].messages) == 1


async def test_persist_chat_log_false_turns_the_audit_off(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("quiet"))
    body = (await _invoke(client, api_key, persistChatLog=False)).json()
    transcript = await server_state.facade("default").query.get_transcript(body["conversationUuid"])
    assert transcript.audit is False
    assert transcript.timeline == []


async def test_base_url_model_never_stores_or_echoes_the_api_key(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    scripted.script.steps.append(Reply("from a compatible server"))
    response = await _invoke(
        client,
        api_key,
        model="my-model",
        baseUrl="http://user:pw@127.0.0.1:9/v1?token=abc",
        apiKey=PLANTED_KEY,
        customHeaders={"X-Token": PLANTED_KEY},
    )
    assert response.status_code == 200
    assert PLANTED_KEY not in response.text
    transcript = await server_state.facade("default").query.get_transcript(
        response.json()["conversationUuid"]
    )
    dumped = transcript.model_dump_json()
    assert PLANTED_KEY not in dumped
    assert "pw@" not in dumped and "token=abc" not in dumped
    record = transcript.messages[0].data
    assert record is not None
    assert record["invoke"]["baseUrl"] == "http://127.0.0.1:9/v1"
    # outputAiMeta names the vendor's protocol, not the INVOKE placeholder.
    assert response.json()["outputAiMeta"]["provider"] == "openai-compatible"
    assert record["invoke"]["customHeaderNames"] == ["X-Token"]


async def test_connector_defaults_are_stateless_and_replace_the_instruction(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    # Seed 003: useChatMemory defaults to false, instructionMode to replace.
    scripted.script.steps.extend([Reply("one"), Reply("two")])
    first = (await _invoke(client, api_key, message="first", instruction="Only this.")).json()
    second = (await _invoke(client, api_key, message="second", instruction="Only this.")).json()
    assert first["conversationUuid"] != second["conversationUuid"]
    request = scripted.requests[1].messages
    assert "first" not in str(request)
    system = next(p for p in request[0].parts if isinstance(p, SystemPromptPart))
    assert system.content.startswith("Only this.")
    assert "working inside a business application" not in system.content  # the default


async def test_failed_turn_is_a_502_problem_with_the_conversation(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    from pilothouse.errors import ProviderAuthError

    scripted.script.steps.append(Fail(ProviderAuthError("upstream refused")))
    response = await _invoke(client, api_key, memoryId="failing", useChatMemory=True)
    assert response.status_code == 502
    assert response.headers["content-type"] == "application/problem+json"
    assert response.headers["x-pilothouse-memory-id"] == "failing"
    # The next call with that memory id starts a new conversation with the same memory.
    scripted.script.steps.append(Reply("recovered"))
    again = (await _invoke(client, api_key, memoryId="failing", useChatMemory=True)).json()
    assert again["conversationUuid"] != response.headers["x-pilothouse-conversation-uuid"]
    assert again["status"] == ProcessStatus.COMPLETED.value


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"model": "m", "baseUrl": "http://169.254.169.254/latest/meta-data"}, "baseUrl"),
        ({"model": "m", "baseUrl": "http://10.0.0.5:5432/v1"}, "baseUrl"),
        ({"model": "m", "baseUrl": "http://[::ffff:169.254.169.254]/v1"}, "baseUrl"),
        ({"model": "m", "baseUrl": "http://127.0.0.2:8000/v1"}, "baseUrl"),
        ({"mcpServers": [{"url": "http://192.168.1.1/mcp"}]}, "mcpServers[0].url"),
    ],
)
async def test_invoke_egress_policy_refuses_private_and_metadata_addresses(
    client: httpx.AsyncClient,
    api_key: str,
    server_state: ServerState,
    extra: dict[str, Any],
    field: str,
) -> None:
    # SSRF: the allow-list names 127.0.0.1 only; metadata,
    # private networks and other loopback names stay refused, before any call.
    response = await _invoke(client, api_key, **extra)
    assert response.status_code == 400, response.text
    assert response.json()["errors"][0]["field"] == field
    assert "PILOTHOUSE_EGRESS_ALLOW" in response.text
    page = await server_state.facade("default").query.list_conversations()
    assert page.total == 0


async def test_invoke_egress_policy_refuses_loopback_by_default(
    server_settings: Settings, scripted: ScriptedModel
) -> None:
    settings = server_settings.model_copy(update={"egress_allow": []})
    state = ServerState(settings, model=scripted)
    await state.open()
    try:
        key, _ = await state.pilothouse.keys.create(name="egress")
        app = create_app(settings, state=state)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
        ):
            response = await _invoke(http, key, model="m", baseUrl="http://127.0.0.1:9/v1")
        assert response.status_code == 400
        assert "127.0.0.1 is a private, local or reserved address" in response.json()["detail"]
        assert scripted.requests == []
    finally:
        await state.aclose()


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"instructionMode": "sideways"}, "instructionMode"),
        ({"agentName": ""}, "agentName"),
        ({"message": ""}, "message"),
        ({"model": "NOSUCH"}, "model"),
        ({"model": None}, "model"),
        ({"tools": ["NOSUCHTOOL"]}, "tools[0]"),
        ({"mcpServers": [{"url": "ftp://x"}]}, "mcpServers[0].url"),
        (
            {"mcpServers": [{"url": "http://x", "transport": "carrier-pigeon"}]},
            "mcpServers[0].transport",
        ),
        ({"baseUrl": "not a url", "model": "m"}, "baseUrl"),
        ({"memoryId": "has spaces"}, "memoryId"),
        ({"chatMemoryMaxMessages": 0}, "chatMemoryMaxMessages"),
        ({"maxRagResults": 0}, "maxRagResults"),
        ({"minRagScore": 2}, "minRagScore"),
        ({"collection": "NOCOLL"}, "collection"),
        ({"surprise": 1}, "surprise"),
        ({"surprise_me": 1}, "surprise_me"),
        ({"apiKey": "k"}, "apiKey"),
        # A header's name is the caller's data, named as written: never camel-cased.
        ({"customHeaders": {"X-Team": 5}}, 'customHeaders["X-Team"]'),
        (
            {"mcp_servers": [{"url": "http://x", "headers": {"X-Team": 5}}]},
            'mcpServers[0].headers["X-Team"]',
        ),
    ],
)
async def test_bad_input_is_a_400_naming_the_field(
    client: httpx.AsyncClient,
    api_key: str,
    server_state: ServerState,
    extra: dict[str, Any],
    field: str,
) -> None:
    body = _body(**extra)
    if body.get("model") is None:
        body.pop("model")
    response = await client.post("/v1/invoke", json=body, headers=auth(api_key))
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == field
    assert field in problem["detail"]
    # Nothing was written.
    page = await server_state.facade("default").query.list_conversations()
    assert page.total == 0


async def test_unreachable_mcp_server_fails_the_turn_with_the_reason(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("ok"))
    response = await _invoke(
        client,
        api_key,
        mcpServers=[{"url": "http://127.0.0.1:1/mcp", "headers": {"Authorization": "x-secret"}}],
    )
    assert response.status_code == 502
    assert "tools unavailable" in response.text
    assert "x-secret" not in response.text


async def test_invoke_needs_a_key(client: httpx.AsyncClient) -> None:
    response = await client.post("/v1/invoke", json=_body())
    assert response.status_code == 401


async def test_malformed_json_is_400(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/v1/invoke",
        content=b"[1,",
        headers={**auth(api_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    assert isinstance(scripted_messages := response.json()["detail"], str)
    assert "not valid JSON" in scripted_messages


def _first_request(scripted: ScriptedModel) -> ModelRequest:
    first = scripted.requests[0].messages[0]
    assert isinstance(first, ModelRequest)
    return first


async def test_an_output_schema_makes_the_output_parsed_json(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    schema = {
        "type": "object",
        "properties": {"sentiment": {"enum": ["positive", "negative"]}},
        "required": ["sentiment"],
    }
    # The first answer breaks the schema: it goes back to the model with the errors.
    scripted.script.steps.extend([Json({"sentiment": "meh"}), Json({"sentiment": "positive"})])
    response = await _invoke(client, api_key, message="I love it", outputSchema=schema)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output"] == {"sentiment": "positive"}
    assert len(scripted.requests) == 2
    transcript = await server_state.facade("default").query.get_transcript(body["conversationUuid"])
    system = transcript.messages[0]
    assert "Output data structure:" in system.content
    assert (system.data or {})["invoke"]["outputSchemaGiven"] is True


async def test_an_output_schema_that_is_no_schema_is_400(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await _invoke(client, api_key, outputSchema={"type": 12})
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "outputSchema"
