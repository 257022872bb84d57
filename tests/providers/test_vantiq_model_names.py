"""Vantiq model names (seed 004) mapped to the id each vendor gets."""

from __future__ import annotations

import pytest

from pilothouse.catalog import ProviderKind
from pilothouse.providers import ProviderConfigError
from pilothouse.providers._spec import vendor_model_name


@pytest.mark.parametrize(
    ("kind", "settings", "model_name", "sent"),
    [
        (
            ProviderKind.BEDROCK,
            {},
            "bedrock/meta.llama3-8b-instruct-v1:0",
            "meta.llama3-8b-instruct-v1:0",
        ),
        (ProviderKind.GOOGLE, {}, "google-genai/gemini-2.0-flash", "gemini-2.0-flash"),
        (ProviderKind.OPENAI, {}, "openai/gpt-4o", "gpt-4o"),
        # The guide: openai/<model-name> for any model compatible with OpenAI.
        (ProviderKind.OPENAI_COMPATIBLE, {}, "openai/llama3.2:latest", "llama3.2:latest"),
        (ProviderKind.OLLAMA, {}, "openai/llama3.2:latest", "llama3.2:latest"),
        # A server id that itself starts with openai/ (OpenRouter): the prefix once more.
        (ProviderKind.OPENAI_COMPATIBLE, {}, "openai/openai/gpt-4o", "openai/gpt-4o"),
        (
            ProviderKind.OPENAI_COMPATIBLE,
            {},
            "anthropic/claude-sonnet-4",
            "anthropic/claude-sonnet-4",
        ),
        (ProviderKind.AZURE, {"deployment": "gpt-4o-dep"}, "azure-openai", "gpt-4o-dep"),
        (ProviderKind.SAGEMAKER, {"endpoint_name": "ep"}, "sagemaker-embedding", "ep"),
        (ProviderKind.GOOGLE, {}, "gemini-2.0-flash", "gemini-2.0-flash"),
    ],
)
def test_vantiq_names_become_vendor_ids(
    kind: ProviderKind, settings: dict[str, str], model_name: str, sent: str
) -> None:
    assert vendor_model_name("P", kind, settings, model_name) == sent


@pytest.mark.parametrize(
    ("kind", "settings", "model_name", "message"),
    [
        (ProviderKind.AZURE, {}, "azure-openai", "needs the provider's settings.deployment"),
        (ProviderKind.SAGEMAKER, {}, "sagemaker", "needs the provider's settings.endpoint_name"),
        (ProviderKind.OPENAI, {}, "sagemaker", "Vantiq's name for a sagemaker model"),
        (ProviderKind.OPENAI, {}, "bedrock/x", "the prefix bedrock/ names a bedrock provider"),
    ],
)
def test_a_vantiq_name_that_cannot_work_is_refused(
    kind: ProviderKind, settings: dict[str, str], model_name: str, message: str
) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        vendor_model_name("P", kind, settings, model_name)
