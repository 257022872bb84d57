"""ModelFactory: caching, lifecycle, lazy imports and configuration errors."""

from __future__ import annotations

import subprocess
import sys

import anyio
import httpx2
import pytest
from provider_helpers import model_spec

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import (
    MissingExtraError,
    ModelFactory,
    ModelOptions,
    ProviderConfigError,
)

pytestmark = pytest.mark.anyio


class RecordingTransport(httpx2.MockTransport):
    def __init__(self) -> None:
        super().__init__(lambda request: httpx2.Response(500))
        self.closed = 0

    async def aclose(self) -> None:
        self.closed += 1


async def test_equal_specs_share_one_model_and_changes_rebuild() -> None:
    factory = ModelFactory(transport=RecordingTransport())
    try:
        first = await factory.model(model_spec(ProviderKind.OPENAI, "gpt-4o-mini"))
        same = await factory.model(model_spec(ProviderKind.OPENAI, "gpt-4o-mini"))
        other_key = await factory.model(
            model_spec(ProviderKind.OPENAI, "gpt-4o-mini", api_key="sk-rotated-000000")
        )
        other_model = await factory.model(model_spec(ProviderKind.OPENAI, "gpt-4o"))
    finally:
        await factory.aclose()
    assert same is first
    assert other_key is not first
    assert other_model is not first


async def test_concurrent_first_use_builds_once() -> None:
    factory = ModelFactory(transport=RecordingTransport())
    spec = model_spec(ProviderKind.ANTHROPIC, "claude-haiku-4-5")
    results: list[object] = []

    async def get() -> None:
        results.append(await factory.model(spec))

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(get)
    finally:
        await factory.aclose()
    assert len(results) == 5
    assert all(r is results[0] for r in results)


async def test_responses_and_chat_models_are_cached_separately() -> None:
    factory = ModelFactory(transport=RecordingTransport())
    spec = model_spec(ProviderKind.OPENAI, "o4-mini")
    try:
        chat = await factory.model(spec)
        responses = await factory.model(spec, ModelOptions(reasoning_summary="auto"))
        responses_again = await factory.model(spec, ModelOptions(reasoning_summary="detailed"))
    finally:
        await factory.aclose()
    assert type(chat).__name__ == "OpenAIChatModel"
    assert type(responses).__name__ == "OpenAIResponsesModel"
    assert responses_again is responses


async def test_aclose_closes_http_clients_and_refuses_new_models() -> None:
    transport = RecordingTransport()
    factory = ModelFactory(transport=transport)
    await factory.model(model_spec(ProviderKind.OPENAI, "gpt-4o-mini"))
    await factory.model(model_spec(ProviderKind.GOOGLE, "gemini-2.0-flash"))
    await factory.aclose()
    assert transport.closed == 2  # one pooled client per provider
    with pytest.raises(ProviderConfigError, match="closed"):
        await factory.model(model_spec(ProviderKind.OPENAI, "gpt-4o-mini"))


async def test_test_kind_points_to_pilothouse_testing() -> None:
    factory = ModelFactory()
    with pytest.raises(ProviderConfigError, match="pilothouse.testing"):
        await factory.model(model_spec(ProviderKind.TEST, "scripted"))
    await factory.aclose()


@pytest.mark.parametrize(
    ("kind", "settings", "base_url", "api_key", "message"),
    [
        (ProviderKind.OPENAI, {}, None, None, "needs api_key"),
        (ProviderKind.OPENAI_COMPATIBLE, {}, None, None, "needs base_url"),
        (ProviderKind.AZURE, {"api_version": "2024-10-21"}, None, "k", "resource"),
        (ProviderKind.AZURE, {"resource": "acme"}, None, "k", "api_version"),
        (ProviderKind.BEDROCK, {}, None, None, "settings.region"),
        (ProviderKind.SAGEMAKER, {"region": "us-east-1"}, None, None, "settings.format"),
        (ProviderKind.LOCAL, {}, None, None, "local_servers"),
        (ProviderKind.ANTHROPIC, {}, None, None, "needs api_key"),
    ],
)
async def test_missing_settings_are_named(
    kind: ProviderKind,
    settings: dict[str, object],
    base_url: str | None,
    api_key: str | None,
    message: str,
) -> None:
    factory = ModelFactory(transport=RecordingTransport())
    spec = model_spec(kind, "m", settings=settings, base_url=base_url, api_key=api_key)
    try:
        with pytest.raises(ProviderConfigError, match=message):
            await factory.model(spec)
    finally:
        await factory.aclose()


async def test_missing_extra_names_the_pip_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # A None entry in sys.modules makes `import anthropic` raise ImportError,
    # as on an install without the extra.
    monkeypatch.setitem(sys.modules, "anthropic", None)
    factory = ModelFactory(transport=RecordingTransport())
    try:
        with pytest.raises(MissingExtraError, match=r"pip install 'pilothouse\[anthropic\]'"):
            await factory.model(model_spec(ProviderKind.ANTHROPIC, "claude-haiku-4-5"))
    finally:
        await factory.aclose()


def test_importing_providers_loads_no_vendor_sdk() -> None:
    code = (
        "import sys, pilothouse.providers\n"
        "heavy = ['pydantic_ai', 'openai', 'anthropic', 'boto3', 'botocore', 'google.genai']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
