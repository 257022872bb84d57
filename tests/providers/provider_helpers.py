"""Helpers for the provider tests: respx routes behind the SDKs' httpx2 clients.

The vendor SDKs (openai 3, anthropic, google-genai) send through ``httpx2``,
which respx does not patch, so the factory is given an ``httpx2`` mock
transport that hands each request to a respx router and returns its answer.
Routes then record exactly what went over the wire.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import httpx2
import respx

from pilothouse.catalog._enums import ModelCapability, ProviderKind
from pilothouse.providers import ModelSpec, ProviderSpec


def bridge(router: respx.Router) -> httpx2.AsyncBaseTransport:
    async def handle(request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        legacy = httpx.Request(
            request.method, str(request.url), headers=list(request.headers.raw), content=body
        )
        response = await router.async_handler(legacy)
        await response.aread()
        return httpx2.Response(
            response.status_code, headers=list(response.headers.raw), content=response.content
        )

    return httpx2.MockTransport(handle)


def model_spec(
    kind: ProviderKind,
    model_name: str,
    *,
    base_url: str | None = None,
    api_key: str | None = "sk-test-secret-123456",
    headers: dict[str, str] | None = None,
    settings: dict[str, Any] | None = None,
) -> ModelSpec:
    provider = ProviderSpec(
        code=f"P_{kind.name}",
        kind=kind,
        base_url=base_url,
        api_key=api_key,
        headers=headers or {},
        settings=settings or {},
    )
    return ModelSpec(
        code=f"M_{kind.name}",
        provider=provider,
        model_name=model_name,
        capabilities=frozenset({ModelCapability.FUNCTION_CALLING}),
    )


def sent_json(route: respx.Route) -> Any:
    return json.loads(route.calls.last.request.content)


def chat_completion(text: str, model: str = "gpt-4o-mini") -> dict[str, Any]:
    """An OpenAI chat completion answering ``text``."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }
