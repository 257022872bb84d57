"""Seed 004's Vantiq LLM definitions, pasted as a migrating user pastes them.

Each JSON below is the guide's own, verbatim; it goes where the migration
guide (docs/migrate-bpmn-vantiq.md) says: a provider's ``settings``, or a
turn's runtime config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pilothouse.catalog import ProviderKind, validate_paths
from pilothouse.providers._factory import google_safety_settings
from pilothouse.providers._options import ModelOptions
from pilothouse.providers._sagemaker_formats import GENERATION_FORMATS
from pilothouse.providers._spec import custom_config_options
from pilothouse.runtime._config import RuntimeConfig, RuntimeConfigError

GEMINI_SAFETY = """
{
  "safety_settings": {
    "HARM_CATEGORY_DANGEROUS_CONTENT": "BLOCK_LOW_AND ABOVE",
    "HARM_CATEGORY_HATE_SPEECH": "BLOCK_MEDIUM_AND ABOVE"
  }
}
"""

TITAN_KWARGS = """
{
    "model_kwargs": {
        "maxTokenCount": 1024,
        "topP": 1,
        "temperature": 0.1
    }
}
"""

TITAN_RUNTIME_CONFIG = """
{
  "model_kwargs": {
    "maxTokenCount": 256
  }
}
"""

AZURE_JSON = """
{
  "name": "AzureOpenAI",
  "modelName": "azure-openai",
  "type": "generative",
  "config": {
    "azure_deployment": "gpt-4o-dep",
    "openai_api_version": "2024-10-21",
    "azure_endpoint": "https://vq-open-ai.openai.azure.com/",
    "temperature": 0.1,
    "apiKeySecret": "AzureOpenAISSecret"
  }
}
"""

SAGEMAKER_LLAMA3 = """
{
  "endpoint_kwargs": {
    "CustomAttributes": "accept_eula=true"
  },
  "model_kwargs": {
    "max_new_tokens": 350,
    "temperature": 0.1,
    "return_full_text": false
  }
}
"""


def _issues(tmp_path: Path, providers: list[dict[str, Any]]) -> list[str]:
    (tmp_path / "catalog.yaml").write_text(json.dumps({"providers": providers}))
    _, issues = validate_paths([tmp_path])
    return [str(issue).replace(f"{tmp_path}/", "") for issue in issues]


def test_gemini_thresholds_as_the_guide_writes_them_are_gemini_names(tmp_path: Path) -> None:
    settings = json.loads(GEMINI_SAFETY)
    assert _issues(tmp_path, [{"code": "GEM", "kind": "google", "settings": settings}]) == []
    assert google_safety_settings(settings["safety_settings"]) == [
        {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "threshold": "BLOCK_LOW_AND_ABOVE"},
        {"category": "HARM_CATEGORY_HATE_SPEECH", "threshold": "BLOCK_MEDIUM_AND_ABOVE"},
    ]


def test_an_unknown_threshold_or_category_is_refused_naming_gemini_names(tmp_path: Path) -> None:
    settings = {"safety_settings": {"HARM_CATEGORY_VIOLENCE": "BLOCK_SOME"}}
    problems = _issues(tmp_path, [{"code": "GEM", "kind": "google", "settings": settings}])
    assert len(problems) == 2, problems
    assert "not a harm category; write one of HARM_CATEGORY_HARASSMENT" in problems[0]
    assert "not a block threshold; write one of BLOCK_LOW_AND_ABOVE" in problems[1]


def test_titan_model_kwargs_on_a_bedrock_model_are_its_options(tmp_path: Path) -> None:
    settings = json.loads(TITAN_KWARGS)
    provider = {"code": "BDRK", "kind": "bedrock", "settings": settings}
    assert _issues(tmp_path, [provider]) == []
    options = custom_config_options("BDRK", settings, ProviderKind.BEDROCK)
    assert (options.max_tokens, options.top_p, options.temperature) == (1024, 1, 0.1)
    # The model's own options win over the action's configuration.
    assert ModelOptions(max_tokens=4096).merged(options).max_tokens == 1024


def test_a_bedrock_model_kwarg_that_is_no_option_says_what_to_write(tmp_path: Path) -> None:
    settings = {"model_kwargs": {"maxTokenCount": 1024, "textGenerationConfig": {}}}
    problems = _issues(tmp_path, [{"code": "BDRK", "kind": "bedrock", "settings": settings}])
    assert len(problems) == 1, problems
    assert "settings.model_kwargs.textGenerationConfig is not read here" in problems[0]
    assert "max_tokens" in problems[0] and "class_name" not in problems[0]


def test_titan_runtime_config_model_kwargs_are_the_turns_options() -> None:
    config = RuntimeConfig.parse(json.loads(TITAN_RUNTIME_CONFIG))
    assert config.options.max_tokens == 256
    with pytest.raises(RuntimeConfigError, match=r"model_kwargs.foo is not read here; write"):
        RuntimeConfig.parse({"model_kwargs": {"foo": 1}})
    with pytest.raises(RuntimeConfigError, match="both set max_tokens"):
        RuntimeConfig.parse({"max_tokens": 10, "model_kwargs": {"maxTokenCount": 256}})


def test_the_guides_azure_json_reports_every_error_in_one_pass(tmp_path: Path) -> None:
    config = json.loads(AZURE_JSON)["config"]
    problems = _issues(tmp_path, [{"code": "AZ", "kind": "azure", "settings": config}])
    assert [p.split(": ", 3)[2] for p in problems] == [
        "settings.azure_deployment",
        "settings.openai_api_version",
        "settings.azure_endpoint",
        "settings.temperature",
        "settings.apiKeySecret",
    ], problems
    assert "write settings.deployment instead" in problems[0]
    assert "write settings.api_version instead" in problems[1]
    assert "write the provider field base_url instead" in problems[2]
    assert "write temperature in a configuration" in problems[3]
    assert 'api_key as "@secrets(NAME)"' in problems[4]


def test_every_error_of_a_file_in_one_pass(tmp_path: Path) -> None:
    # A broken field, an unknown field and unknown settings of one provider,
    # and a second provider's: all reported at once, each at its line.
    text = """
providers:
  - code: AZUREOPENAI
    kind: azure
    colour: blue
    settings:
      azure_deployment: gpt-4o-dep
      temperature: 0.1
  - code: BDRK
    settings:
      class_name: vantiq.llms.ChatAWSBedrockConverse
      model_id: meta.llama3-8b-instruct-v1:0
      aws_regio: us-east-1
      maxTokens: 5
"""
    (tmp_path / "catalog.yaml").write_text(text)
    _, issues = validate_paths([tmp_path])
    found = [(issue.line, issue.field) for issue in issues]
    assert found == [
        (3, "code"),
        (5, "colour"),
        (7, "settings.azure_deployment"),
        (8, "settings.temperature"),
        (13, "settings.aws_regio"),
        (14, "settings.maxTokens"),
    ], [str(i) for i in issues]


def test_sagemaker_model_kwargs_max_new_tokens_wins_over_the_configuration() -> None:
    settings = {"format": "llama3-chat", **json.loads(SAGEMAKER_LLAMA3)}
    own = custom_config_options("SM", settings, ProviderKind.SAGEMAKER)
    merged = ModelOptions(max_tokens=512, temperature=0.7).merged(own)
    fmt = GENERATION_FORMATS["llama3-chat"]
    sent = fmt.native_parameters(
        {"max_tokens": merged.max_tokens, "temperature": merged.temperature}
    )
    assert sent["max_new_tokens"] == 350
    assert sent["temperature"] == 0.1
    # A runtime config still wins over the model's own.
    assert merged.merged(ModelOptions(max_tokens=100)).max_tokens == 100


def test_a_message_format_config_reports_every_mistake_at_once(tmp_path: Path) -> None:
    # The guide's generic syntax with two keys misspelt: four rules broken, four lines.
    settings = {
        "endpoint_name": "falcon",
        "message_format_config": {"request_keys": "inputs", "response_paths": "0.generated_text"},
    }
    problems = _issues(tmp_path, [{"code": "SM", "kind": "sagemaker", "settings": settings}])
    assert len(problems) == 4, problems
    assert "message_format_config.request_keys is not a key" in problems[0]
    assert "message_format_config.response_paths is not a key" in problems[1]
    assert "message_format_config.request_key is required" in problems[2]
    assert "message_format_config.response_path is required" in problems[3]
