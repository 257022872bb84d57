"""Normalized options: parse, merge, and their mapping onto each provider's settings."""

from __future__ import annotations

import logging

import pytest
from provider_helpers import model_spec

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import ModelOptions, to_model_settings, uses_responses_api

ALL = ModelOptions(
    temperature=0.1,
    max_tokens=10,
    top_p=0.5,
    top_k=4,
    stop=["x"],
    presence_penalty=0.2,
    frequency_penalty=0.3,
    reasoning_effort="medium",
    reasoning_summary="auto",
)


def test_parse_accepts_known_keys_and_single_stop_string() -> None:
    options = ModelOptions.parse({"temperature": 1, "max_tokens": 5, "stop": "END"})
    assert options == ModelOptions(temperature=1.0, max_tokens=5, stop=["END"])


def test_parse_unknown_key_names_it_and_suggests() -> None:
    with pytest.raises(ValueError, match="'temprature' is not known; did you mean 'temperature'"):
        ModelOptions.parse({"temprature": 0.2})


@pytest.mark.parametrize(
    ("mapping", "key"),
    [
        ({"max_tokens": "100"}, "max_tokens"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"stop": [1, 2]}, "stop"),
    ],
)
def test_parse_wrong_type_or_range_names_the_key(mapping: dict[str, object], key: str) -> None:
    with pytest.raises(ValueError, match=f"model option '{key}"):
        ModelOptions.parse(mapping)


def test_merged_override_wins_field_by_field() -> None:
    stored = ModelOptions(temperature=0.7, max_tokens=500, stop=["a"])
    runtime = ModelOptions(temperature=0.0, top_k=3)
    assert stored.merged(runtime) == ModelOptions(
        temperature=0.0, max_tokens=500, stop=["a"], top_k=3
    )
    assert stored.merged(ModelOptions()) == stored


def test_openai_chat_mapping_drops_top_k_and_summary(caplog: pytest.LogCaptureFixture) -> None:
    spec = model_spec(ProviderKind.OPENAI, "o4-mini")
    options = ModelOptions(top_k=4, temperature=0.1, reasoning_effort="medium")
    with caplog.at_level(logging.DEBUG, logger="pilothouse.providers._options"):
        settings = to_model_settings(spec, options)
    assert settings == {"temperature": 0.1, "openai_reasoning_effort": "medium"}
    assert "top_k dropped" in caplog.text
    assert "'openai'" in caplog.text


def test_openai_summary_maps_to_responses_settings() -> None:
    spec = model_spec(ProviderKind.OPENAI, "o4-mini")
    assert uses_responses_api(spec, ALL)
    assert not uses_responses_api(spec, ModelOptions(reasoning_effort="low"))
    settings = to_model_settings(spec, ALL)
    assert settings == {
        "temperature": 0.1,
        "max_tokens": 10,
        "top_p": 0.5,
        "openai_reasoning_effort": "medium",
        "openai_reasoning_summary": "auto",
    }


def test_compatible_server_gets_top_k_in_body_and_the_reasoning_effort_field() -> None:
    spec = model_spec(ProviderKind.OPENAI_COMPATIBLE, "m", base_url="http://127.0.0.1:1/v1")
    settings: dict[str, object] = dict(to_model_settings(spec, ALL))
    assert settings["extra_body"] == {"top_k": 4}
    # Forwarded as the body's reasoning_effort whatever the model (never dropped).
    assert settings["openai_reasoning_effort"] == "medium"
    assert settings["stop_sequences"] == ["x"]
    assert "openai_reasoning_summary" not in settings


def test_anthropic_mapping() -> None:
    spec = model_spec(ProviderKind.ANTHROPIC, "claude-haiku-4-5")
    assert to_model_settings(spec, ALL) == {
        "temperature": 0.1,
        "max_tokens": 10,
        "top_p": 0.5,
        "stop_sequences": ["x"],
        "top_k": 4,
        "thinking": "medium",
    }


def test_google_mapping_keeps_penalties() -> None:
    spec = model_spec(ProviderKind.GOOGLE, "gemini-2.5-flash")
    settings: dict[str, object] = dict(to_model_settings(spec, ALL))
    assert settings["presence_penalty"] == 0.2
    assert settings["frequency_penalty"] == 0.3
    assert settings["top_k"] == 4
    assert "google_thinking_config" not in settings


@pytest.mark.parametrize(
    ("model_name", "expected_top_k"),
    [
        (
            "anthropic.claude-3-haiku-20240307-v1:0",
            {"bedrock_additional_model_requests_fields": {"top_k": 4}},
        ),
        (
            "us.anthropic.claude-3-5-haiku-20241022-v1:0",
            {"bedrock_additional_model_requests_fields": {"top_k": 4}},
        ),
        ("amazon.nova-pro-v1:0", {"top_k": 4}),
        ("amazon.titan-text-express-v1", {}),
        ("meta.llama3-70b-instruct-v1:0", {}),
    ],
)
def test_bedrock_top_k_by_family(model_name: str, expected_top_k: dict[str, object]) -> None:
    spec = model_spec(ProviderKind.BEDROCK, model_name)
    settings = dict(
        to_model_settings(spec, ModelOptions(top_k=4, max_tokens=9, presence_penalty=1))
    )
    assert settings == {"max_tokens": 9, **expected_top_k}


def test_reasoning_effort_none_turns_thinking_off() -> None:
    spec = model_spec(ProviderKind.ANTHROPIC, "claude-sonnet-4-5")
    assert to_model_settings(spec, ModelOptions(reasoning_effort="none")) == {"thinking": False}


def test_sagemaker_passes_common_names_through() -> None:
    spec = model_spec(ProviderKind.SAGEMAKER, "x")
    settings: dict[str, object] = dict(to_model_settings(spec, ALL))
    assert settings["top_k"] == 4
    assert "thinking" not in settings


@pytest.mark.parametrize(
    ("mapping", "named"),
    [
        ({"temperature": float("inf")}, "temperature"),
        ({"temperature": 1e309}, "temperature"),
        ({"top_p": float("nan")}, "top_p"),
        ({"presence_penalty": 3.0}, "presence_penalty"),
        ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ],
)
def test_options_refuse_non_finite_and_out_of_range_numbers(
    mapping: dict[str, object], named: str
) -> None:
    # 1e309 reached PostgreSQL as Infinity and left the
    # conversation RU; it is refused before anything is written.
    with pytest.raises(ValueError, match=f"model option '{named}'"):
        ModelOptions.parse(mapping)
