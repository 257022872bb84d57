"""Wire format of Anthropic and Google Gemini: exact bodies, headers, parsed answers."""

from __future__ import annotations

import logging

import pytest
import respx
from provider_helpers import model_spec, sent_json
from pydantic_ai.messages import ModelMessage, ModelRequest, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import ModelFactory, ModelOptions, to_model_settings

pytestmark = pytest.mark.anyio

HELLO: list[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart("hello")], instructions="Be brief.")
]
ALL_OPTIONS = ModelOptions(
    temperature=0.4,
    max_tokens=128,
    top_p=0.8,
    top_k=32,
    stop=["STOP"],
    presence_penalty=0.5,
    frequency_penalty=0.25,
)


async def test_anthropic_messages_body_headers_and_answer(
    factory: ModelFactory, router: respx.Router, caplog: pytest.LogCaptureFixture
) -> None:
    route = router.post("https://api.anthropic.com/v1/messages").respond(
        json={
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": "Hello from Claude"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 4},
        }
    )
    spec = model_spec(
        ProviderKind.ANTHROPIC,
        "claude-haiku-4-5",
        api_key="ant-key-abcdef",
        headers={"anthropic-beta": "custom-beta"},
    )
    model = await factory.model(spec)
    with caplog.at_level(logging.DEBUG, logger="pilothouse.providers._options"):
        settings = to_model_settings(spec, ALL_OPTIONS)
    response = await model.request(HELLO, settings, ModelRequestParameters())

    assert [p.content for p in response.parts if isinstance(p, TextPart)] == ["Hello from Claude"]
    assert response.usage.input_tokens == 10
    request = route.calls.last.request
    # This SDK generation sends the key as a bearer token.
    assert request.headers["authorization"] == "Bearer ant-key-abcdef"
    assert "custom-beta" in request.headers["anthropic-beta"]
    body = sent_json(route)
    assert body["model"] == "claude-haiku-4-5"
    assert body["max_tokens"] == 128
    assert body["temperature"] == 0.4
    assert body["top_p"] == 0.8
    assert body["top_k"] == 32
    assert body["stop_sequences"] == ["STOP"]
    system = body["system"]
    system_text = system if isinstance(system, str) else "".join(b["text"] for b in system)
    assert system_text == "Be brief."
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hello"}]}]
    assert "presence_penalty" not in body and "frequency_penalty" not in body
    assert "presence_penalty" in caplog.text and "anthropic" in caplog.text


async def test_gemini_generation_config_safety_settings_and_answer(
    factory: ModelFactory, router: respx.Router
) -> None:
    route = router.post(
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent"
    ).respond(
        json={
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": "Hi from Gemini"}]},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": 8,
                "candidatesTokenCount": 3,
                "totalTokenCount": 11,
            },
            "modelVersion": "gemini-2.0-flash",
            "responseId": "r1",
        }
    )
    spec = model_spec(
        ProviderKind.GOOGLE,
        "gemini-2.0-flash",
        api_key="AIzaTestKey0123456789012345",
        settings={
            "safety_settings": {
                "harassment": "block_only_high",
                "HARM_CATEGORY_DANGEROUS_CONTENT": "BLOCK_NONE",
            }
        },
    )
    model = await factory.model(spec)
    response = await model.request(
        HELLO, to_model_settings(spec, ALL_OPTIONS), ModelRequestParameters()
    )

    assert [p.content for p in response.parts if isinstance(p, TextPart)] == ["Hi from Gemini"]
    request = route.calls.last.request
    assert request.headers["x-goog-api-key"] == "AIzaTestKey0123456789012345"
    body = sent_json(route)
    config = body["generationConfig"]
    assert config["temperature"] == 0.4
    assert config["maxOutputTokens"] == 128
    assert config["topP"] == 0.8
    assert config["topK"] == 32
    assert config["stopSequences"] == ["STOP"]
    assert config["presencePenalty"] == 0.5
    assert config["frequencyPenalty"] == 0.25
    assert body["safetySettings"] == [
        {"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_ONLY_HIGH"},
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_NONE"},
    ]
    assert body["systemInstruction"]["parts"][0]["text"] == "Be brief."
    assert body["contents"][0] == {"role": "user", "parts": [{"text": "hello"}]}


async def test_anthropic_401_becomes_auth_error_without_the_key(
    factory: ModelFactory, router: respx.Router
) -> None:
    from pilothouse.errors import ProviderAuthError
    from pilothouse.providers import translate_error

    router.post("https://api.anthropic.com/v1/messages").respond(
        status_code=401,
        json={
            "type": "error",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"},
        },
    )
    spec = model_spec(ProviderKind.ANTHROPIC, "claude-haiku-4-5", api_key="ant-key-abcdef")
    model = await factory.model(spec)
    with pytest.raises(Exception) as info:
        await model.request(HELLO, {"max_tokens": 10}, ModelRequestParameters())
    translated = translate_error(info.value, secrets=["ant-key-abcdef"])
    assert isinstance(translated, ProviderAuthError)
    assert "invalid x-api-key" in str(translated)
    assert "ant-key-abcdef" not in str(translated)


async def test_gemini_503_becomes_retryable_server_error(
    factory: ModelFactory, router: respx.Router
) -> None:
    from pilothouse.errors import ProviderServerError
    from pilothouse.providers import translate_error

    router.post(
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent"
    ).respond(
        status_code=503,
        json={
            "error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
        },
    )
    spec = model_spec(
        ProviderKind.GOOGLE, "gemini-2.0-flash", api_key="AIzaTestKey0123456789012345"
    )
    model = await factory.model(spec)
    with pytest.raises(Exception) as info:
        await model.request(HELLO, None, ModelRequestParameters())
    translated = translate_error(info.value)
    assert isinstance(translated, ProviderServerError)
    assert translated.retryable
