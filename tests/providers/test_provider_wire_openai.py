"""Wire format of the OpenAI-SDK family: OpenAI chat and responses, compatible servers,
Azure, Ollama and local llama.cpp; exact bodies, headers and parsed answers."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
import respx
from provider_helpers import bridge, chat_completion, model_spec, sent_json
from pydantic_ai.messages import ModelMessage, ModelRequest, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import ModelFactory, ModelOptions, ProviderConfigError, to_model_settings

pytestmark = pytest.mark.anyio

HELLO: list[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart("hello")], instructions="Be brief.")
]


OPTIONS = ModelOptions(
    temperature=0.2,
    max_tokens=64,
    top_p=0.9,
    top_k=40,
    stop=["END"],
    presence_penalty=0.1,
    frequency_penalty=0.3,
)


async def test_openai_chat_sends_mapped_options_and_parses_answer(
    factory: ModelFactory, router: respx.Router, caplog: pytest.LogCaptureFixture
) -> None:
    route = router.post("https://api.openai.com/v1/chat/completions").respond(
        json=chat_completion("Hi there")
    )
    spec = model_spec(ProviderKind.OPENAI, "gpt-4o-mini")
    model = await factory.model(spec)
    with caplog.at_level(logging.DEBUG, logger="pilothouse.providers._options"):
        settings = to_model_settings(spec, OPTIONS)
    response = await model.request(HELLO, settings, ModelRequestParameters())

    assert response.parts == [TextPart(content="Hi there")]
    assert response.usage.input_tokens == 12
    assert response.usage.output_tokens == 3
    body = sent_json(route)
    assert body["model"] == "gpt-4o-mini"
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hello"},
    ]
    assert body["temperature"] == 0.2
    assert body["max_completion_tokens"] == 64
    assert body["top_p"] == 0.9
    assert body["stop"] == ["END"]
    assert body["presence_penalty"] == 0.1
    assert body["frequency_penalty"] == 0.3
    assert "top_k" not in body  # not an OpenAI option: dropped, not sent
    assert "top_k" in caplog.text and "openai" in caplog.text
    request = route.calls.last.request
    assert request.headers["authorization"] == "Bearer sk-test-secret-123456"


async def test_openai_chat_reasoning_effort(factory: ModelFactory, router: respx.Router) -> None:
    route = router.post("https://api.openai.com/v1/chat/completions").respond(
        json=chat_completion("ok", "o4-mini")
    )
    spec = model_spec(ProviderKind.OPENAI, "o4-mini")
    model = await factory.model(spec)
    settings = to_model_settings(spec, ModelOptions(reasoning_effort="high"))
    await model.request(HELLO, settings, ModelRequestParameters())
    assert sent_json(route)["reasoning_effort"] == "high"


def responses_body(text: str, model: str = "o4-mini") -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1700000000,
        "status": "completed",
        "model": model,
        "output": [
            {
                "type": "reasoning",
                "id": "rs_1",
                "summary": [{"type": "summary_text", "text": "Thought briefly."}],
            },
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 9,
            "output_tokens": 4,
            "total_tokens": 13,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 2},
        },
    }


async def test_reasoning_summary_switches_openai_to_responses_api(
    factory: ModelFactory, router: respx.Router
) -> None:
    route = router.post("https://api.openai.com/v1/responses").respond(json=responses_body("Paris"))
    spec = model_spec(ProviderKind.OPENAI, "o4-mini")
    options = ModelOptions(
        max_tokens=100, reasoning_effort="low", reasoning_summary="concise", stop=["x"]
    )
    model = await factory.model(spec, options)
    chat_model = await factory.model(spec)
    assert model is not chat_model
    response = await model.request(
        HELLO, to_model_settings(spec, options), ModelRequestParameters()
    )

    body = sent_json(route)
    assert body["reasoning"] == {"effort": "low", "summary": "concise"}
    assert body["max_output_tokens"] == 100
    assert body["instructions"] == "Be brief."
    assert "stop" not in body  # the Responses API has no stop sequences
    texts = [p.content for p in response.parts if isinstance(p, TextPart)]
    assert texts == ["Paris"]


async def test_settings_api_responses_selects_responses_api(
    factory: ModelFactory, router: respx.Router
) -> None:
    route = router.post("https://api.openai.com/v1/responses").respond(
        json=responses_body("ok", "gpt-4.1")
    )
    spec = model_spec(ProviderKind.OPENAI, "gpt-4.1", settings={"api": "responses"})
    model = await factory.model(spec)
    await model.request(
        HELLO, to_model_settings(spec, ModelOptions(temperature=0.5)), ModelRequestParameters()
    )
    assert sent_json(route)["temperature"] == 0.5


async def test_openai_compatible_sends_custom_headers_and_top_k(
    factory: ModelFactory, router: respx.Router
) -> None:
    route = router.post("http://127.0.0.1:8000/v1/chat/completions").respond(
        json=chat_completion("vllm says hi", "meta-llama/Llama-3.1-8B-Instruct")
    )
    spec = model_spec(
        ProviderKind.OPENAI_COMPATIBLE,
        "meta-llama/Llama-3.1-8B-Instruct",
        base_url="http://127.0.0.1:8000/v1",
        api_key=None,
        headers={"X-Tenant": "acme", "X-Api-Token": "tok-secret"},
    )
    model = await factory.model(spec)
    response = await model.request(
        HELLO,
        to_model_settings(spec, ModelOptions(top_k=20, max_tokens=5)),
        ModelRequestParameters(),
    )

    assert response.parts == [TextPart(content="vllm says hi")]
    request = route.calls.last.request
    assert request.headers["x-tenant"] == "acme"
    assert request.headers["x-api-token"] == "tok-secret"
    body = sent_json(route)
    assert body["top_k"] == 20
    assert body["max_completion_tokens"] == 5


async def test_azure_uses_deployment_url_api_version_and_api_key_header(
    factory: ModelFactory, router: respx.Router
) -> None:
    route = router.post(
        "https://acme.openai.azure.com/openai/deployments/prod-4o/chat/completions",
        params={"api-version": "2024-10-21"},
    ).respond(json=chat_completion("from azure", "gpt-4o"))
    spec = model_spec(
        ProviderKind.AZURE,
        "gpt-4o",
        api_key="azure-key-987654",
        settings={"resource": "acme", "deployment": "prod-4o", "api_version": "2024-10-21"},
    )
    model = await factory.model(spec)
    response = await model.request(
        HELLO, to_model_settings(spec, ModelOptions(temperature=0.0)), ModelRequestParameters()
    )
    assert response.parts == [TextPart(content="from azure")]
    assert route.calls.last.request.headers["api-key"] == "azure-key-987654"
    assert sent_json(route)["temperature"] == 0.0


async def test_ollama_defaults_to_local_v1_and_drops_top_k(
    factory: ModelFactory, router: respx.Router
) -> None:
    route = router.post("http://127.0.0.1:11434/v1/chat/completions").respond(
        json=chat_completion("llama here", "llama3.2")
    )
    spec = model_spec(ProviderKind.OLLAMA, "llama3.2", api_key=None)
    model = await factory.model(spec)
    response = await model.request(
        HELLO,
        to_model_settings(spec, ModelOptions(top_k=5, temperature=0.7, reasoning_effort="low")),
        ModelRequestParameters(),
    )
    assert response.parts == [TextPart(content="llama here")]
    body = sent_json(route)
    assert body["temperature"] == 0.7
    assert "top_k" not in body


class FakeLocalServers:
    def __init__(self, *urls: str) -> None:
        self.urls = list(urls)
        self.calls: list[dict[str, Any]] = []
        self.checked: list[tuple[str, str | None]] = []

    async def base_url(
        self,
        *,
        model_path: str | None = None,
        chat_format: str = "pilothouse",
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> str:
        self.calls.append(
            {
                "model_path": model_path,
                "chat_format": chat_format,
                "n_ctx": n_ctx,
                "n_threads": n_threads,
            }
        )
        # The first URL until a "restart" moves the server to the next one.
        return self.urls[0]

    def check_model_name(self, model_name: str, *, model_path: str | None = None) -> str:
        self.checked.append((model_name, model_path))
        return model_name


LOCAL_SPEC = model_spec(
    ProviderKind.LOCAL,
    "smollm2",
    api_key=None,
    settings={"model_path": "/models/smollm2.gguf", "n_ctx": 2048},
)


async def test_local_kind_asks_local_servers_for_base_url(router: respx.Router) -> None:
    route = router.post("http://127.0.0.1:39999/v1/chat/completions").respond(
        json=chat_completion("tiny model", "smollm2")
    )
    servers = FakeLocalServers("http://127.0.0.1:39999/v1")
    factory = ModelFactory(servers, transport=bridge(router))
    try:
        model = await factory.model(LOCAL_SPEC)
        again = await factory.model(LOCAL_SPEC)
        response = await model.request(HELLO, None, ModelRequestParameters())
    finally:
        await factory.aclose()
    assert again is model
    assert servers.calls[0] == {
        "model_path": "/models/smollm2.gguf",
        "chat_format": "pilothouse",
        "n_ctx": 2048,
        "n_threads": None,
    }
    assert response.parts == [TextPart(content="tiny model")]
    assert route.called
    # The catalog's model name was checked against the file to be served.
    assert servers.checked[0] == ("smollm2", "/models/smollm2.gguf")


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"model": "x.gguf"}, "has no setting model; its settings are model_path, chat_format"),
        ({"n_threads": 0}, "settings.n_threads must be an integer of at least 1 (got 0)"),
        ({"n_ctx": "4096"}, "settings.n_ctx must be an integer of at least 256"),
        ({"model_path": ""}, "settings.model_path must be a non-empty string"),
    ],
)
async def test_local_settings_that_would_be_ignored_are_refused(
    settings: dict[str, Any], message: str
) -> None:
    servers = FakeLocalServers("http://127.0.0.1:39999/v1")
    factory = ModelFactory(servers)
    spec = model_spec(ProviderKind.LOCAL, "m", api_key=None, settings=settings)
    try:
        with pytest.raises(ProviderConfigError, match=re.escape(message)):
            await factory.model(spec)
    finally:
        await factory.aclose()
    assert servers.calls == []


async def test_local_model_follows_a_restarted_server_to_its_new_port(
    router: respx.Router,
) -> None:
    route = router.post("http://127.0.0.1:40001/v1/chat/completions").respond(
        json=chat_completion("after restart", "smollm2")
    )
    servers = FakeLocalServers("http://127.0.0.1:40000/v1", "http://127.0.0.1:40001/v1")
    factory = ModelFactory(servers, transport=bridge(router))
    try:
        before = await factory.model(LOCAL_SPEC)
        servers.urls.pop(0)  # the server died and came back on another port
        after = await factory.model(LOCAL_SPEC)
        response = await after.request(HELLO, None, ModelRequestParameters())
    finally:
        await factory.aclose()
    assert after is not before
    assert response.parts == [TextPart(content="after restart")]
    assert route.call_count == 1


async def test_error_status_is_translated_with_retry_after(
    factory: ModelFactory, router: respx.Router
) -> None:
    from pilothouse.errors import RateLimitError
    from pilothouse.providers import translate_error

    router.post("https://api.openai.com/v1/chat/completions").mock(
        return_value=httpx.Response(
            429,
            headers={"Retry-After": "7"},
            json={
                "error": {
                    "message": "Rate limit reached",
                    "type": "requests",
                    "code": "rate_limit_exceeded",
                }
            },
        )
    )
    spec = model_spec(ProviderKind.OPENAI, "gpt-4o-mini")
    model = await factory.model(spec)
    with pytest.raises(Exception) as info:
        await model.request(HELLO, None, ModelRequestParameters())
    translated = translate_error(info.value)
    assert isinstance(translated, RateLimitError)
    assert translated.retry_after == 7.0
    assert "Rate limit reached" in str(translated)
    assert "sk-test-secret" not in str(translated)
