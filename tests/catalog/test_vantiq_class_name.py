"""Vantiq ``class_name`` custom configurations (seed 004) as provider settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pilothouse.catalog import ProviderSpec, validate_paths

# The guide's Bedrock custom configuration, verbatim.
BEDROCK = json.loads(
    """
{
  "class_name": "vantiq.llms.ChatAWSBedrockConverse",
  "model_id": "meta.llama3-8b-instruct-v1:0",
  "aws_region": "us-east-1",
  "aws_access_key_id": "@secrets(AWSAccessKeyId)",
  "aws_secret_access_key": "@secrets(AWSSecretAccessKey)",
  "max_tokens": 512,
  "temperature": 0.2
}
"""
)
# The guide's ChatOpenAI (Ollama) configuration, its key as a secret reference.
CHAT_OPENAI = {
    "class_name": "vantiq.llms.ChatOpenAI",
    "model_name": "llama3.2:latest",
    "openai_api_base": "http://localhost:11434/v1",
    "openai_api_key": "@secrets(OllamaKey)",
}


def _problems(tmp_path: Path, provider: dict[str, Any]) -> list[str]:
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps({"providers": [provider]}))
    _, issues = validate_paths([path])
    return [str(issue) for issue in issues]


def test_the_guides_bedrock_configuration_is_read_as_written() -> None:
    # No kind: the class names it.
    spec = ProviderSpec.model_validate({"code": "BDRK", "settings": BEDROCK})
    assert spec.kind.value == "bedrock"
    assert spec.settings == {
        "class_name": "vantiq.llms.ChatAWSBedrockConverse",
        "model_id": "meta.llama3-8b-instruct-v1:0",
        "region": "us-east-1",
        "access_key_id": "@secrets(AWSAccessKeyId)",
        "secret_access_key": "@secrets(AWSSecretAccessKey)",
        "max_tokens": 512,
        "temperature": 0.2,
    }


def test_the_guides_chat_openai_configuration_fills_the_provider_fields(tmp_path: Path) -> None:
    spec = ProviderSpec.model_validate({"code": "OLMA", "settings": CHAT_OPENAI})
    assert (spec.kind.value, spec.base_url, spec.api_key) == (
        "openai-compatible",
        "http://localhost:11434/v1",
        "@secrets(OllamaKey)",
    )
    assert spec.settings == {
        "class_name": "vantiq.llms.ChatOpenAI",
        "model_name": "llama3.2:latest",
    }
    assert _problems(tmp_path, {"code": "OLMA", "settings": CHAT_OPENAI}) == []


@pytest.mark.parametrize(
    ("provider", "message"),
    [
        # The guide's own spelling once: a zero for the O.
        (
            {"code": "X", "settings": {**CHAT_OPENAI, "class_name": "vantiq.llms.Chat0penAI"}},
            "is not a Vantiq class pilothouse reads; write one of vantiq.llms.ChatOpenAI",
        ),
        (
            {"code": "X", "kind": "anthropic", "settings": CHAT_OPENAI},
            "is served by a provider of kind openai-compatible or openai or ollama",
        ),
        (
            {"code": "X", "settings": {**BEDROCK, "model_kwargs": "topP=1"}},
            "settings.model_kwargs: must be a JSON object of the model's own parameters",
        ),
        (
            {
                "code": "X",
                "settings": {
                    **BEDROCK,
                    "class_name": "vantiq.embeddings.BedrockEmbeddings",
                    "model_kwargs": {"dimensions": 256},
                },
            },
            "settings.model_kwargs: not a key of a vantiq.embeddings.BedrockEmbeddings",
        ),
        (
            {"code": "X", "settings": {**BEDROCK, "temprature": 0.1}},
            "settings.temprature: not a key",
        ),
        (
            {"code": "X", "settings": {k: v for k, v in BEDROCK.items() if k != "model_id"}},
            "settings.model_id is required",
        ),
        (
            {"code": "X", "base_url": "http://a/v1", "settings": CHAT_OPENAI},
            "settings.openai_api_base and the provider field base_url are both given",
        ),
        (
            {"code": "X", "settings": {**BEDROCK, "aws_secret_access_key": "wJalrXUtnFEMI"}},
            "must be a @secrets(NAME) reference",
        ),
    ],
)
def test_a_configuration_that_cannot_be_honoured_is_refused_by_key(
    tmp_path: Path, provider: dict[str, Any], message: str
) -> None:
    problems = _problems(tmp_path, provider)
    assert any(message in problem for problem in problems), problems
    assert not any("wJalrXUtnFEMI" in problem for problem in problems)
