"""Normalized model options and their mapping onto each provider's settings.

A Configuration in the catalog and a per-call runtime config both speak the
normalized names below; :func:`to_model_settings` turns them into the
pydantic-ai ``ModelSettings`` the provider's model class understands. An
option a provider cannot take is dropped (with a DEBUG log line naming the
option and the provider), never sent, so one configuration works everywhere.
"""

from __future__ import annotations

__all__ = [
    "ModelOptions",
    "ReasoningEffort",
    "ReasoningSummary",
    "to_model_settings",
    "uses_responses_api",
]

import difflib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pilothouse.catalog._enums import ProviderKind

if TYPE_CHECKING:
    from pydantic_ai.settings import ModelSettings

    from pilothouse.providers._spec import ModelSpec

logger = logging.getLogger(__name__)

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
ReasoningSummary = Literal["auto", "concise", "detailed"]

_OPENAI_SDK_KINDS = frozenset(
    {
        ProviderKind.OPENAI,
        ProviderKind.OPENAI_COMPATIBLE,
        ProviderKind.AZURE,
        ProviderKind.OLLAMA,
        ProviderKind.LOCAL,
    }
)
# Servers that take the sampling extensions (top_k) in the request body:
# vLLM, llama.cpp, NIM and OpenRouter all accept a top-level ``top_k``.
_TOP_K_IN_EXTRA_BODY = frozenset({ProviderKind.OPENAI_COMPATIBLE, ProviderKind.LOCAL})


@dataclass(frozen=True)
class ModelOptions:
    """Sampling and limit options under their normalized names.

    ``None`` means "not set here", so :meth:`merged` can layer a per-call
    runtime config over the stored Configuration field by field.

    Attributes:
        temperature: sampling temperature.
        max_tokens: most tokens to generate.
        top_p: nucleus sampling mass.
        top_k: sample only from the K likeliest tokens.
        stop: sequences that end generation.
        presence_penalty: penalty for tokens already present.
        frequency_penalty: penalty proportional to token frequency.
        reasoning_effort: how hard a reasoning model thinks.
        reasoning_summary: ask for a summary of the reasoning.
    """

    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    reasoning_effort: ReasoningEffort | None = None
    reasoning_summary: ReasoningSummary | None = None

    def merged(self, override: ModelOptions) -> ModelOptions:
        """Return these options with every field ``override`` sets taking precedence.

        Args:
            override: the per-call options; its ``None`` fields keep ours.

        Returns:
            A new options object.
        """
        changes = {
            f.name: getattr(override, f.name)
            for f in fields(self)
            if getattr(override, f.name) is not None
        }
        return replace(self, **changes)

    @classmethod
    def parse(cls, mapping: Mapping[str, Any]) -> ModelOptions:
        """Validate a runtime-config mapping into options.

        Args:
            mapping: e.g. ``{"temperature": 0.2, "max_tokens": 256}``; ``stop``
                may be one string or a list of strings.

        Returns:
            The options.

        Raises:
            ValueError: a key is not an option, or a value has the wrong type
                or range; the message names the key.
        """
        known = [f.name for f in fields(cls)]
        for key in mapping:
            if key not in known:
                hint = difflib.get_close_matches(str(key), known, n=1)
                suggestion = f"; did you mean '{hint[0]}'?" if hint else ""
                raise ValueError(
                    f"model option '{key}' is not known{suggestion} "
                    f"(known options: {', '.join(known)})"
                )
        try:
            parsed = _OptionsInput.model_validate(dict(mapping))
        except ValidationError as exc:
            first = exc.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            raise ValueError(f"model option '{key}': {first['msg']}") from None
        stop = [parsed.stop] if isinstance(parsed.stop, str) else parsed.stop
        return cls(
            temperature=parsed.temperature,
            max_tokens=parsed.max_tokens,
            top_p=parsed.top_p,
            top_k=parsed.top_k,
            stop=stop,
            presence_penalty=parsed.presence_penalty,
            frequency_penalty=parsed.frequency_penalty,
            reasoning_effort=parsed.reasoning_effort,
            reasoning_summary=parsed.reasoning_summary,
        )


class _OptionsInput(BaseModel):
    # Strict so that "0.2" (a string) is refused rather than silently coerced:
    # a runtime config is typed JSON, and a string there is a caller bug.
    # No NaN or Infinity: a temperature of 1e309 reached PostgreSQL as
    # Infinity and failed the turn's first write.
    # defer_build: built on the first runtime config with options, not at
    # import (10-19 ms of every cold start otherwise).
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, defer_build=True)

    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, gt=0)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = Field(default=None, gt=0)
    stop: str | list[str] | None = None
    # OpenAI's range, which every provider that takes penalties shares.
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    reasoning_effort: ReasoningEffort | None = None
    reasoning_summary: ReasoningSummary | None = None


def uses_responses_api(spec: ModelSpec, options: ModelOptions | None = None) -> bool:
    """Tell whether an OpenAI-SDK model is served through the Responses API.

    Chat Completions is the default; ``settings.api: responses`` selects the
    Responses API (for any OpenAI-SDK kind, e.g. vLLM serves it too), and for
    OpenAI and Azure so does asking for a reasoning summary, which only the
    Responses API returns.

    Args:
        spec: the model.
        options: the options of the call, when known.

    Returns:
        True for the Responses API.
    """
    kind = spec.provider.kind
    if kind not in _OPENAI_SDK_KINDS:
        return False
    if spec.provider.settings.get("api") == "responses":
        return True
    return (
        kind in (ProviderKind.OPENAI, ProviderKind.AZURE)
        and options is not None
        and options.reasoning_summary is not None
    )


def to_model_settings(spec: ModelSpec, options: ModelOptions) -> ModelSettings:
    """Map normalized options onto the settings the spec's pydantic-ai model accepts.

    Args:
        spec: the model the options are for; its provider kind decides names.
        options: the (merged) options.

    Returns:
        A ``ModelSettings`` mapping (possibly with provider-specific keys such
        as ``openai_reasoning_effort``); options the provider does not take are
        left out and logged at DEBUG.
    """
    kind = spec.provider.kind
    out: dict[str, Any] = {}
    _common(options, out)
    if kind in _OPENAI_SDK_KINDS:
        _openai_family(spec, options, out)
    elif kind is ProviderKind.ANTHROPIC:
        _anthropic(spec, options, out)
    elif kind is ProviderKind.GOOGLE:
        _google(spec, options, out)
    elif kind is ProviderKind.BEDROCK:
        _bedrock(spec, options, out)
    else:
        # SageMaker maps these itself through its message format, and test
        # models accept anything: pass the rest under the common names.
        _put(out, "top_k", options.top_k)
        _put(out, "presence_penalty", options.presence_penalty)
        _put(out, "frequency_penalty", options.frequency_penalty)
        _drop(spec, "reasoning_effort", options.reasoning_effort)
        _drop(spec, "reasoning_summary", options.reasoning_summary)
    return cast("ModelSettings", out)


def _common(options: ModelOptions, out: dict[str, Any]) -> None:
    # Every supported provider takes these four under pydantic-ai's names.
    _put(out, "temperature", options.temperature)
    _put(out, "max_tokens", options.max_tokens)
    _put(out, "top_p", options.top_p)
    if options.stop:
        out["stop_sequences"] = list(options.stop)


def _openai_family(spec: ModelSpec, options: ModelOptions, out: dict[str, Any]) -> None:
    responses = uses_responses_api(spec, options)
    kind = spec.provider.kind
    if responses:
        # The Responses API has no stop sequences or penalties.
        out.pop("stop_sequences", None)
        _drop(spec, "stop", options.stop or None, "the Responses API")
        _drop(spec, "presence_penalty", options.presence_penalty, "the Responses API")
        _drop(spec, "frequency_penalty", options.frequency_penalty, "the Responses API")
    else:
        _put(out, "presence_penalty", options.presence_penalty)
        _put(out, "frequency_penalty", options.frequency_penalty)
    if options.top_k is not None:
        if kind in _TOP_K_IN_EXTRA_BODY:
            out["extra_body"] = {"top_k": options.top_k}
        else:
            _drop(spec, "top_k", options.top_k)
    if options.reasoning_effort is not None:
        if kind in (ProviderKind.OPENAI, ProviderKind.AZURE, ProviderKind.OPENAI_COMPATIBLE):
            # OpenAI's own field; it wins over pydantic-ai's unified `thinking`,
            # which a model its profile does not know as a thinking one would
            # drop silently (the BPMN connector's reasoningEffort at a baseUrl).
            out["openai_reasoning_effort"] = options.reasoning_effort
        else:
            out["thinking"] = _thinking_level(options.reasoning_effort)
    if options.reasoning_summary is not None:
        if responses:
            out["openai_reasoning_summary"] = options.reasoning_summary
        else:
            _drop(spec, "reasoning_summary", options.reasoning_summary)


def _anthropic(spec: ModelSpec, options: ModelOptions, out: dict[str, Any]) -> None:
    _put(out, "top_k", options.top_k)
    _drop(spec, "presence_penalty", options.presence_penalty)
    _drop(spec, "frequency_penalty", options.frequency_penalty)
    if options.reasoning_effort is not None:
        out["thinking"] = _thinking_level(options.reasoning_effort)
    # Anthropic returns its thinking itself (summarized on Claude 4); there is
    # no knob for a summary style.
    _drop(spec, "reasoning_summary", options.reasoning_summary)


def _google(spec: ModelSpec, options: ModelOptions, out: dict[str, Any]) -> None:
    _put(out, "top_k", options.top_k)
    _put(out, "presence_penalty", options.presence_penalty)
    _put(out, "frequency_penalty", options.frequency_penalty)
    if options.reasoning_effort is not None:
        out["thinking"] = _thinking_level(options.reasoning_effort)
    _drop(spec, "reasoning_summary", options.reasoning_summary)


def bedrock_family(model_name: str) -> str:
    """Return the vendor family of a Bedrock model id (``anthropic``, ``amazon``, ...).

    Handles cross-region inference profile prefixes such as ``us.`` or
    ``global.``, and ``amazon.nova`` vs ``amazon.titan``.

    Args:
        model_name: e.g. ``us.anthropic.claude-3-5-haiku-20241022-v1:0``.

    Returns:
        ``anthropic``, ``nova``, ``titan``, or the vendor prefix otherwise.
    """
    parts = model_name.split(".")
    if len(parts) > 2 and len(parts[0]) <= 6 and parts[0] in {"us", "eu", "apac", "global", "jp"}:
        parts = parts[1:]
    vendor = parts[0]
    if vendor == "amazon" and len(parts) > 1:
        return "nova" if parts[1].startswith("nova") else "titan"
    return vendor


def _bedrock(spec: ModelSpec, options: ModelOptions, out: dict[str, Any]) -> None:
    # Converse normalizes maxTokens/temperature/topP/stopSequences for every
    # family (Titan's native `maxTokenCount` is an InvokeModel name, which we
    # never send). top_k has no Converse field: it rides in the family's own
    # additionalModelRequestFields.
    family = bedrock_family(spec.model_name)
    settings = spec.provider.settings
    model_kwargs = settings.get("model_kwargs") if "class_name" in settings else None
    if isinstance(model_kwargs, dict) and model_kwargs:
        # A Vantiq ChatAWSBedrockConverse configuration's model_kwargs (seed
        # 004): the model's own parameters, which Converse takes here.
        out["bedrock_additional_model_requests_fields"] = dict(cast(dict[str, Any], model_kwargs))
    if options.top_k is not None:
        if family == "anthropic":
            fields = dict(out.get("bedrock_additional_model_requests_fields") or {})
            out["bedrock_additional_model_requests_fields"] = {**fields, "top_k": options.top_k}
        elif family == "nova":
            # pydantic-ai places it as additionalModelRequestFields.inferenceConfig.topK.
            out["top_k"] = options.top_k
        else:
            _drop(spec, "top_k", options.top_k, f"Bedrock {family} models")
    _drop(spec, "presence_penalty", options.presence_penalty)
    _drop(spec, "frequency_penalty", options.frequency_penalty)
    if options.reasoning_effort is not None:
        out["thinking"] = _thinking_level(options.reasoning_effort)
    _drop(spec, "reasoning_summary", options.reasoning_summary)


def _thinking_level(effort: ReasoningEffort) -> bool | str:
    # pydantic-ai's unified `thinking`: False turns reasoning off.
    return False if effort == "none" else effort


def _put(out: dict[str, Any], name: str, value: object) -> None:
    if value is not None:
        out[name] = value


def _drop(spec: ModelSpec, option: str, value: object, where: str | None = None) -> None:
    if value is None:
        return
    target = where or f"provider kind '{spec.provider.kind.value}'"
    logger.debug(
        "model option %s dropped: not supported by %s (provider %s, model %s)",
        option,
        target,
        spec.provider.code,
        spec.model_name,
    )
