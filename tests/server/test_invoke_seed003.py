"""Seed 003's connector example, tried as a BPMN service task sends it.

The seed's XML (quoted verbatim where a test relies on it):

    <camunda:inputParameter name="useChatMemory">true</camunda:inputParameter>
    <camunda:inputParameter name="chatMemoryMaxMessages">20</camunda:inputParameter>
    <camunda:inputParameter name="persistChatLog">true</camunda:inputParameter>
    <camunda:inputParameter name="pgPort">5432</camunda:inputParameter>
    <camunda:inputParameter name="maxRagResults">5</camunda:inputParameter>
    <camunda:inputParameter name="minRagScore">0.7</camunda:inputParameter>
    <camunda:inputParameter name="embeddingDimension">384</camunda:inputParameter>

Every input parameter of a service task is text, so the values arrive as
JSON strings. And of ``model`` the seed says: "Optional. LLM model
identifier ... Defaults to "gpt-5.4-nano"."
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from pilothouse.server._invoke import parse_invoke
from pilothouse.server._problems import ProblemError
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

SEED_TEXT_VALUES = {
    "agentName": "my-agent",
    "message": "Hello",
    "baseUrl": "http://localhost:11434/v1",
    "model": "gpt-5.4-nano",
    "useChatMemory": "true",
    "chatMemoryMaxMessages": "20",
    "persistChatLog": "true",
    "pgHost": "localhost",
    "pgPort": "5432",
    "maxRagResults": "5",
    "minRagScore": "0.7",
    "embeddingDimension": "384",
    "embeddingModelName": "text-embedding-3-small",
}


def test_the_seeds_text_values_are_read_as_the_connector_reads_them() -> None:
    body = parse_invoke(json.dumps(SEED_TEXT_VALUES).encode())
    assert body.use_chat_memory is True
    assert body.persist_chat_log is True
    assert (body.chat_memory_max_messages, body.pg_port, body.max_rag_results) == (20, 5432, 5)
    assert body.min_rag_score == pytest.approx(0.7)
    assert body.embedding_dimension == 384
    sampling = parse_invoke(
        json.dumps({**SEED_TEXT_VALUES, "temperature": "0.2", "maxTokens": "5"}).encode()
    )
    assert sampling.temperature == pytest.approx(0.2)
    assert sampling.max_tokens == 5


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("useChatMemory", "yes"),
        ("useChatMemory", "TRUE"),
        ("persistChatLog", "1"),
        ("chatMemoryMaxMessages", "20.0"),
        ("chatMemoryMaxMessages", " 20"),
        ("pgPort", "0x1538"),
        ("maxRagResults", "5e0"),
        ("maxRagResults", "1_0"),
        ("minRagScore", "NaN"),
        ("minRagScore", ".7"),
        ("temperature", ""),
        ("embeddingDimension", "384 "),
    ],
)
def test_only_the_documented_text_forms_are_read(field: str, value: str) -> None:
    with pytest.raises(ProblemError) as refused:
        parse_invoke(json.dumps({**SEED_TEXT_VALUES, field: value}).encode())
    assert refused.value.status == 400
    assert refused.value.errors is not None
    assert refused.value.errors[0]["field"] == field
    assert "true or false" in refused.value.detail or "number" in refused.value.detail


@pytest.fixture
def server_settings(server_settings: Settings) -> Settings:
    return server_settings.model_copy(
        update={"egress_allow": ["127.0.0.1"], "invoke_default_model": "llama3.2:latest"}
    )


async def test_model_may_be_left_out_at_a_base_url_the_default_model_is_named(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    # "only agentName and message are required, the rest are optional".
    scripted.script.steps.append(Reply("Hi"))
    body: dict[str, Any] = {
        "agentName": "my-agent",
        "message": "Hello",
        "baseUrl": "http://127.0.0.1:11434/v1",
    }
    response = await client.post(
        "/v1/invoke", json=body, headers={"Authorization": f"Bearer {api_key}"}
    )
    assert response.status_code == 200, response.text
    meta = response.json()["outputAiMeta"]
    assert meta["modelSource"] == "deployment default (PILOTHOUSE_INVOKE_DEFAULT_MODEL)"
    transcript = await server_state.facade("default").query.get_transcript(
        response.json()["conversationUuid"]
    )
    record = transcript.messages[0].data
    assert record is not None
    assert record["invoke"]["model"] == "llama3.2:latest"
    assert record["invoke"]["modelDefaulted"] is True


async def test_a_named_model_is_not_marked_as_the_default(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("Hi"))
    body = {
        "agentName": "my-agent",
        "message": "Hello",
        "baseUrl": "http://127.0.0.1:11434/v1",
        "model": "gpt-5.4-nano",
    }
    response = await client.post(
        "/v1/invoke", json=body, headers={"Authorization": f"Bearer {api_key}"}
    )
    assert response.status_code == 200, response.text
    assert "modelSource" not in response.json()["outputAiMeta"]
