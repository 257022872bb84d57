"""Chat Completions for OpenAI-compatible servers, on httpx2, without the OpenAI SDK.

Kinds ``openai-compatible`` and ``local`` (vLLM, llama.cpp, LM Studio,
NIM, OpenRouter, pilothouse's own llama.cpp server) speak the Chat
Completions wire format. pydantic-ai's ``OpenAIChatModel`` serves them
through the ``openai`` SDK, whose import costs about 330 ms of CPU (half
of it the Responses API's types, which Chat Completions never uses) and
whose response objects cost CPU on every answer and streamed chunk.

:class:`ChatCompletionsModel` sends the same request and builds the same
``ModelResponse`` (and stream events) from the JSON itself, for the
requests pilothouse makes: system, user and tool messages of text, earlier
answers of text and tool calls, function tools, native (``json_schema``)
or tool output, and the settings :mod:`pilothouse.providers._options`
produces. ``tests/providers/test_chat_model.py`` checks both against each
other, request by request and answer by answer, on the same transport.

A request outside that set (images or documents in a prompt, thinking
parts sent back, a native tool, prompted output, a profile that reasons,
caches or merges system messages, a setting not listed in ``_SETTINGS``)
goes to pydantic-ai's ``OpenAIChatModel`` on the same HTTP client, built on
first such request: nothing is refused or dropped, it is only slower.
"""

from __future__ import annotations

__all__ = ["ChatCompletionsModel", "compatible_profile"]

import json
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, cast

import httpx2
from pydantic_ai import _utils as pai_utils
from pydantic_ai._thinking_part import split_content_into_text_and_thinking
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ModelResponsePart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import (
    Model,
    ModelRequestParameters,
    StreamedResponse,
    _sendable_request_parts,  # pyright: ignore[reportPrivateUsage]
    check_allow_model_requests,
)
from pydantic_ai.models._tool_choice import (
    resolve_tool_choice,
    support_tool_forcing,
    tool_forcing_unavailable_reason,
)
from pydantic_ai.profiles import DEFAULT_THINKING_TAGS, ModelProfile, merge_profile
from pydantic_ai.profiles._family import vendor_family_model_profile
from pydantic_ai.profiles._special_tokens import special_token_route_profile
from pydantic_ai.profiles.amazon import amazon_model_profile
from pydantic_ai.profiles.groq import groq_model_profile
from pydantic_ai.profiles.mistral import mistral_model_profile
from pydantic_ai.profiles.openai import (
    OpenAIJsonSchemaTransformer,
    OpenAIModelProfile,
    openai_model_profile,
)

from pilothouse import __version__
from pilothouse._sendgate import before_send
from pilothouse.providers._chat_wire import (
    FINISH_REASONS,
    chat_usage,
    content_text,
    raise_for_status,
    sent,
    timestamp_of,
    validated,
)

if TYPE_CHECKING:
    from pydantic_ai import RunContext
    from pydantic_ai.output import OutputObjectDefinition
    from pydantic_ai.settings import CacheRetention, ModelSettings
    from pydantic_ai.tools import ToolDefinition

_SETTINGS = frozenset(
    {
        "temperature",
        "max_tokens",
        "top_p",
        "stop_sequences",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "parallel_tool_calls",
        "extra_body",
        "openai_reasoning_effort",
        "tool_choice",
    }
)
"""The settings this model sends itself; any other goes to pydantic-ai's model."""

_PROFILE_PLAIN: Mapping[str, object] = {
    # Each flag's value under which the request is what this module builds.
    "openai_supports_reasoning": False,
    "openai_unsupported_model_settings": (),
    "openai_chat_supports_multiple_system_messages": True,
    "openai_supports_prompt_cache_breakpoints": False,
    "supports_cache": False,
    "mimics_assistant_message_formatting": False,
    "thinking_enabled_by_default": False,
    "thinking_always_enabled": False,
}


def _mistral_model_profile(model_name: str) -> ModelProfile:
    # As pydantic-ai's OpenAI-compatible provider: Mistral's constraints on
    # the OpenAI defaults, except for Magistral.
    profile = mistral_model_profile(model_name)
    if model_name.startswith("magistral"):
        return profile or {}
    return merge_profile(openai_model_profile(model_name), profile)


_VENDOR_PROFILES: Mapping[str, Callable[[str], ModelProfile | None]] = {
    "bedrock": amazon_model_profile,
    "groq": groq_model_profile,
    "mistral": _mistral_model_profile,
    "mistralai": _mistral_model_profile,
}


def compatible_profile(model_name: str) -> ModelProfile:
    """The profile pydantic-ai's ``OpenAICompatibleProvider`` gives a model by default.

    A ``vendor/model`` name gets that vendor's family profile, any other name
    the profile OpenAI-compatible servers share, with the JSON schema
    transformer of OpenAI's chat model.

    Args:
        model_name: the model's name at the server.

    Returns:
        The profile.
    """
    profile = vendor_family_model_profile(model_name, overrides=dict(_VENDOR_PROFILES))
    if profile is None:
        profile = openai_model_profile(model_name)
    return merge_profile(
        OpenAIModelProfile(json_schema_transformer=OpenAIJsonSchemaTransformer),
        profile,
        special_token_route_profile("openai-compatible", model_name),
    )


class ChatCompletionsModel(Model):
    """An OpenAI-compatible Chat Completions model on an ``httpx2`` client.

    Args:
        model_name: the model's name at the server.
        client: the HTTP client (pooled, with pilothouse's transports).
        base_url: the server's base URL, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: sent as a bearer token when given.
        headers: extra headers for every request (the provider's own).
        provider_name: names the provider in responses and usage.
        fallback: builds pydantic-ai's ``OpenAIChatModel`` on the same
            client, for requests this model does not build itself.
    """

    waits_at_send_gate = True
    """It waits for the turn's start record itself, after building the request."""
    # As OpenAIChatModel: no video part; a tool's files travel on the user channel.
    _unsupported_file_inputs = frozenset({"video"})
    _relocates_tool_files = True

    def __init__(
        self,
        model_name: str,
        *,
        client: httpx2.AsyncClient,
        base_url: str,
        api_key: str | None,
        headers: Mapping[str, str],
        provider_name: str,
        fallback: Callable[[], Model],
    ) -> None:
        self._model_name = model_name
        self._client = client
        # The OpenAI SDK keeps its base URL with a trailing slash, and
        # responses name it so: the same here, so both paths record one URL.
        self._base_url = base_url.rstrip("/") + "/"
        self._url = httpx2.URL(self._base_url + "chat/completions")
        self._provider_name = provider_name
        self._fallback_factory = fallback
        self._fallback_model: Model | None = None
        sent_headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": f"pilothouse/{__version__}",
        }
        if api_key:
            sent_headers["Authorization"] = f"Bearer {api_key}"
        sent_headers.update(headers)
        self._headers = sent_headers
        self._stream_headers = {**sent_headers, "Accept": "text/event-stream"}
        super().__init__(profile=compatible_profile(model_name))

    @property
    def model_name(self) -> str:
        """The model's name at the server."""
        return self._model_name

    @property
    def system(self) -> str:
        """The provider's name, as pydantic-ai's OpenAI-compatible provider gives it."""
        return self._provider_name

    @property
    def base_url(self) -> str:
        """The server's base URL, with a trailing slash."""
        return self._base_url

    def _instance_profile_defaults(self, profile: ModelProfile) -> ModelProfile:
        # As OpenAIChatModel: Chat Completions refuses a 12h cache retention.
        retentions = profile.get("supported_cache_retentions", ())
        if "12h" not in retentions:
            return profile
        kept = cast("tuple[CacheRetention, ...]", tuple(t for t in retentions if t != "12h"))
        return merge_profile(profile, ModelProfile(supported_cache_retentions=kept))

    @cached_property
    def profile(self) -> ModelProfile:
        """The model profile, narrowed as ``OpenAIChatModel`` narrows it (no web search)."""
        resolved = super().profile
        if not resolved.get("openai_chat_supports_web_search", False):
            tools = resolved.get("supported_native_tools", frozenset())
            resolved = merge_profile(
                resolved,
                ModelProfile(
                    supported_native_tools=frozenset(t for t in tools if t.kind != "web_search")
                ),
            )
        return resolved

    def fallback(self) -> Model:
        """pydantic-ai's ``OpenAIChatModel`` for this server, built on first use."""
        model = self._fallback_model
        if model is None:
            model = self._fallback_model = self._fallback_factory()
        return model

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Send one request and return the answer."""
        if not self._builds(messages, model_settings, model_request_parameters):
            await before_send()
            return await self.fallback().request(messages, model_settings, model_request_parameters)
        request, _ = self._request(messages, model_settings, model_request_parameters, False)
        # Built while the turn's start record was being written; sent once it is.
        await before_send()
        response = await sent(self._client, request, self._model_name, stream=False)
        await raise_for_status(response, self._model_name, self._provider_name)
        try:
            data = json.loads(response.content)
        except ValueError as exc:
            raise UnexpectedModelBehavior(
                f"Invalid response from {self.system} chat completions endpoint, expected JSON data"
            ) from exc
        return self._answer(data)

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncGenerator[StreamedResponse]:
        """Send one request and stream the answer."""
        if not self._builds(messages, model_settings, model_request_parameters):
            await before_send()
            async with self.fallback().request_stream(
                messages, model_settings, model_request_parameters, run_context
            ) as streamed:
                yield streamed
            return
        request, parameters = self._request(
            messages, model_settings, model_request_parameters, True
        )
        await before_send()
        response = await sent(self._client, request, self._model_name, stream=True)
        try:
            await raise_for_status(response, self._model_name, self._provider_name)
            from pilothouse.providers._chat_stream import ChatCompletionsStream, first_chunk

            chunks, first = await first_chunk(response, self._model_name)
            streamed = ChatCompletionsStream(
                model_request_parameters=parameters,
                _model_name=str(first.get("model") or self._model_name),
                _model_profile=self.profile,
                _chunks=chunks,
                _response=response,
                _provider_name=self._provider_name,
                _provider_url=self._base_url,
            )
            yield streamed
        finally:
            await response.aclose()

    # -- what this model builds itself ----------------------------------------

    def _request(
        self,
        messages: Sequence[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        stream: bool,
    ) -> tuple[httpx2.Request, ModelRequestParameters]:
        """The HTTP request, and the parameters as pydantic-ai prepared them."""
        check_allow_model_requests()
        settings, parameters = self.prepare_request(model_settings, model_request_parameters)
        body = self._body(
            messages, cast("Mapping[str, Any]", settings or {}), parameters, stream=stream
        )
        headers = self._stream_headers if stream else self._headers
        request = self._client.build_request("POST", self._url, headers=headers, content=body)
        return request, parameters

    def _builds(
        self,
        messages: Sequence[ModelMessage],
        settings: ModelSettings | None,
        parameters: ModelRequestParameters,
    ) -> bool:
        """Whether the request is one this module builds as pydantic-ai's model would."""
        profile = self.profile
        if any(profile.get(flag, plain) != plain for flag, plain in _PROFILE_PLAIN.items()):
            return False
        if settings is not None and not _SETTINGS.issuperset(settings):
            return False
        if (
            parameters.native_tools
            or parameters.thinking is not None
            or parameters.output_mode not in ("text", "native", "tool")
            or parameters.allow_image_output
        ):
            return False
        return all(_plain(message) for message in messages)

    def _body(
        self,
        messages: Sequence[ModelMessage],
        settings: Mapping[str, Any],
        parameters: ModelRequestParameters,
        *,
        stream: bool,
    ) -> bytes:
        """The request body ``OpenAIChatModel`` sends for this request."""
        tools, tool_choice = self._tools(settings, parameters)
        body: dict[str, Any] = {
            "model": self._model_name,
            "messages": self._messages(messages, parameters),
        }
        if tools:
            if "parallel_tool_calls" in settings:
                body["parallel_tool_calls"] = settings["parallel_tool_calls"]
            body["tools"] = tools
            body["tool_choice"] = tool_choice
        body["stream"] = stream
        if stream:
            body["stream_options"] = {"include_usage": True}
        if "stop_sequences" in settings:
            body["stop"] = settings["stop_sequences"]
        if "max_tokens" in settings:
            body[self._max_tokens_field] = settings["max_tokens"]
        output = parameters.output_object
        if parameters.output_mode == "native" and output is not None:
            body["response_format"] = self._response_format(output)
        if "seed" in settings:
            body["seed"] = settings["seed"]
        if settings.get("openai_reasoning_effort"):
            body["reasoning_effort"] = settings["openai_reasoning_effort"]
        for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
            if name in settings:
                body[name] = settings[name]
        extra = settings.get("extra_body")
        if isinstance(extra, Mapping):
            body.update(cast("Mapping[str, Any]", extra))
        return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    @cached_property
    def _max_tokens_field(self) -> str:
        # The profile says which of the two fields the server takes.
        if self.profile.get("openai_chat_supports_max_completion_tokens", True):
            return "max_completion_tokens"
        return "max_tokens"

    def _response_format(self, output: OutputObjectDefinition) -> dict[str, Any]:
        schema: dict[str, Any] = {
            "name": output.name or "final_result",
            "schema": output.json_schema,
        }
        if output.description:
            schema["description"] = output.description
        if self.profile.get("openai_supports_strict_tool_definition", True):
            schema["strict"] = output.strict
        return {"type": "json_schema", "json_schema": schema}

    def _tools(
        self, settings: Mapping[str, Any], parameters: ModelRequestParameters
    ) -> tuple[list[dict[str, Any]], str | dict[str, Any] | None]:
        # As OpenAIChatModel._get_tool_choice, for a server without OpenAI's
        # ``allowed_tools``: one forced tool is named, several are the only
        # tools sent.
        resolved = resolve_tool_choice(cast("ModelSettings", settings), parameters)
        definitions = parameters.declared_tool_defs
        choice: str | dict[str, Any]
        if isinstance(resolved, tuple):
            mode, names = resolved
            forced = mode == "required" and self._forces_tools(settings)
            if forced and len(names) == 1:
                choice = {"type": "function", "function": {"name": next(iter(names))}}
            else:
                definitions = {k: v for k, v in definitions.items() if k in names}
                choice = "required" if forced else "auto"
        else:
            choice = resolved
            if resolved == "required" and not self._forces_tools(settings):
                choice = "auto"
        tools = [self._tool(definition) for definition in definitions.values()]
        return tools, (choice if tools else None)

    def _forces_tools(self, settings: Mapping[str, Any]) -> bool:
        # As OpenAIChatModel decides (support_openai_tool_forcing): a forced
        # choice pydantic-ai resolved itself (an output tool's) is sent
        # unforced when the profile cannot force, or forcing would stop the
        # model thinking. Only a reasoning effort can make it think here
        # (_builds sends thinking settings and thinking profiles elsewhere).
        effort = settings.get("openai_reasoning_effort")
        thinking = effort is not None and effort != "none"
        reason = tool_forcing_unavailable_reason(
            self.profile, thinking=thinking, thinking_remedy="set reasoning_effort: none"
        )
        disables = thinking and bool(
            self.profile.get("forced_tool_choice_disables_thinking", False)
        )
        return support_tool_forcing(
            self._model_name, cast("ModelSettings", settings), reason, disables_thinking=disables
        )

    def _tool(self, definition: ToolDefinition) -> dict[str, Any]:
        function: dict[str, Any] = {
            "name": definition.name,
            "description": definition.description or "",
            "parameters": definition.parameters_json_schema,
        }
        if definition.strict and self.profile.get("openai_supports_strict_tool_definition", True):
            function["strict"] = definition.strict
        return {"type": "function", "function": function}

    def _messages(
        self, messages: Sequence[ModelMessage], parameters: ModelRequestParameters
    ) -> list[dict[str, Any]]:
        role = self.profile.get("openai_system_prompt_role", None) or "system"
        mapped: list[dict[str, Any]] = []
        for message in messages:
            if isinstance(message, ModelRequest):
                for part in _sendable_request_parts(message.parts):
                    if isinstance(part, SystemPromptPart):
                        mapped.append({"role": role, "content": part.content})
                    elif isinstance(part, UserPromptPart):
                        mapped.append({"role": "user", "content": part.content})
                    elif isinstance(part, ToolReturnPart):
                        text, _files = part.model_response_str_and_user_content()
                        mapped.append(
                            {
                                "role": "tool",
                                "tool_call_id": pai_utils.guard_tool_call_id(t=part),
                                "content": text,
                            }
                        )
                    else:  # pragma: no cover - _builds sends such requests elsewhere
                        raise AssertionError(f"unexpected request part {type(part).__name__}")
            else:
                assistant = _assistant(message)
                if assistant is not None:
                    mapped.append(assistant)
        instructions = self._get_instruction_parts(messages, parameters) or []
        if instructions:
            leading = 0
            while leading < len(mapped) and mapped[leading]["role"] == role:
                leading += 1
            mapped[leading:leading] = [
                {"role": role, "content": part.content} for part in instructions
            ]
        return mapped

    def _answer(self, data: object) -> ModelResponse:
        """The ``ModelResponse`` ``OpenAIChatModel`` builds from a chat completion."""
        completion = validated(data, self.system)
        choices = cast("list[Any]", completion["choices"])
        if not choices:
            raise UnexpectedModelBehavior(
                f"Invalid response from {self.system} chat completions endpoint: no choices"
            )
        choice = cast("dict[str, Any]", choices[0])
        message = cast("dict[str, Any]", choice["message"])
        model = cast("str", completion["model"])
        raw_finish = choice.get("finish_reason")
        details: dict[str, Any] = {}
        if raw_finish:
            details["finish_reason"] = raw_finish
        for name in ("moderation", "service_tier"):
            if completion.get(name):
                details[name] = completion[name]
        created = timestamp_of(completion.get("created"))
        usage = chat_usage(
            completion.get("usage"), self._provider_name, self._base_url, self._model_name
        )
        finish = FINISH_REASONS.get(raw_finish, None) if raw_finish else "stop"
        response_id = completion.get("id") or None
        parts: list[ModelResponsePart] = []
        refusal = message.get("refusal")
        if refusal:
            # As pydantic-ai: a refusal is an empty answer, filtered.
            details.pop("finish_reason", None)
            details["refusal"] = refusal
            finish = "content_filter"
        else:
            parts.extend(self._thinking(message))
            tags = self.profile.get("thinking_tags", DEFAULT_THINKING_TAGS)
            for part in split_content_into_text_and_thinking(
                content_text(message.get("content")), tags
            ):
                if isinstance(part, ThinkingPart):
                    part = replace(part, id="content", provider_name=self._provider_name)
                parts.append(part)
            parts.extend(self._tool_calls(message.get("tool_calls")))
        if created is not None:
            details["timestamp"] = created
        return ModelResponse(
            parts=parts,
            usage=usage,
            model_name=model,
            timestamp=pai_utils.now_utc(),
            provider_details=details or None,
            provider_response_id=response_id,
            provider_name=self._provider_name,
            provider_url=self._base_url,
            finish_reason=finish,
        )

    def _thinking(self, message: Mapping[str, Any]) -> list[ThinkingPart]:
        custom = self.profile.get("openai_chat_thinking_field", None)
        for name in (custom, "reasoning", "reasoning_content"):
            if not name:
                continue
            reasoning = message.get(name)
            if reasoning and isinstance(reasoning, str):
                return [ThinkingPart(id=name, content=reasoning, provider_name=self._provider_name)]
        return []

    def _tool_calls(self, calls: list[dict[str, Any]] | None) -> list[ToolCallPart]:
        # Validated (_chat_wire.validated): each has an id, a function name and arguments.
        parts: list[ToolCallPart] = []
        for call in calls or ():
            extra = call.get("extra_content")
            details = {"extra_content": extra} if extra else None
            part = ToolCallPart(
                call["function"]["name"],
                call["function"]["arguments"],
                tool_call_id=call["id"],
                provider_name=self._provider_name if details else None,
                provider_details=details,
            )
            part.tool_call_id = pai_utils.guard_tool_call_id(part)
            parts.append(part)
        return parts


def _plain(message: ModelMessage) -> bool:
    """Whether the message holds only parts this module maps (text, tool calls and returns)."""
    if isinstance(message, ModelRequest):
        for part in message.parts:
            if isinstance(part, UserPromptPart):
                if not isinstance(part.content, str):
                    return False
            elif isinstance(part, ToolReturnPart):
                if part.files:
                    return False  # relocated to a user message by pydantic-ai's model
            elif not isinstance(part, SystemPromptPart):
                return False
        return True
    return all(
        isinstance(part, TextPart) or (isinstance(part, ToolCallPart) and not part.provider_details)
        for part in message.parts
    )


def _assistant(message: ModelResponse) -> dict[str, Any] | None:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for part in message.parts:
        if isinstance(part, TextPart):
            texts.append(part.content)
        elif isinstance(part, ToolCallPart):
            calls.append(
                {
                    "id": pai_utils.guard_tool_call_id(t=part),
                    "type": "function",
                    "function": {"name": part.tool_name, "arguments": part.args_as_json_str()},
                }
            )
    if not texts and not calls:
        return None
    mapped: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) if texts else None}
    if calls:
        mapped["tool_calls"] = calls
    return mapped
