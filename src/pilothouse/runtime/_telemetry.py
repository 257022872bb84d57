"""OpenTelemetry spans for turns, model calls and tool calls.

Spans follow the OpenTelemetry GenAI semantic conventions
(``invoke_agent {action}``, ``chat {model}``, ``execute_tool {tool}``) so any
GenAI-aware backend shows a turn as an agent invocation with its model and
tool calls nested under it.

What goes into attributes is deliberately narrow: identifiers, model names,
sampling options, token usage and error types. Message content, tool
arguments and results, exception messages and anything secret never do:
spans leave the process, and the audit timeline is the governed record of
content.

This sits on the hot path of every turn. ``opentelemetry`` is imported
lazily and is optional; when it is missing, or when no tracer provider is
configured (the API's default proxy or no-op provider), every context
manager is one shared no-op object and no attribute is built.
"""

from __future__ import annotations

__all__ = ["ModelCallSpan", "Telemetry"]

import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, cast

from pilothouse.catalog._enums import ProviderKind

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider
    from opentelemetry.util.types import AttributeValue

    from pilothouse.runtime._meter import Meter

_INSTRUMENTATION_NAME: Final = "pilothouse"

# gen_ai.provider.name: the well-known values where the conventions define one,
# the provider kind's own code otherwise.
_PROVIDER_NAMES: Final[Mapping[ProviderKind, str]] = {
    ProviderKind.OPENAI: "openai",
    ProviderKind.AZURE: "azure.ai.openai",
    ProviderKind.ANTHROPIC: "anthropic",
    ProviderKind.BEDROCK: "aws.bedrock",
    ProviderKind.GOOGLE: "gcp.gemini",
    ProviderKind.SAGEMAKER: "aws.sagemaker",
}

# Normalized option name -> request attribute. Both ``stop`` (pilothouse) and
# ``stop_sequences`` (pydantic-ai) name the stop sequences.
_NUMERIC_OPTIONS: Final = (
    ("temperature", "gen_ai.request.temperature"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("top_p", "gen_ai.request.top_p"),
    ("top_k", "gen_ai.request.top_k"),
    ("presence_penalty", "gen_ai.request.presence_penalty"),
    ("frequency_penalty", "gen_ai.request.frequency_penalty"),
)


class ModelCallSpan(Protocol):
    """What :meth:`Telemetry.model_call` yields: a place to record the response."""

    def record_response(
        self,
        response_model: str | None = None,
        response_id: str | None = None,
        finish_reasons: Sequence[str] | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """Record what the provider answered with (values left ``None`` are skipped).

        Args:
            response_model: the model that actually answered.
            response_id: the provider's id of the response.
            finish_reasons: why each choice stopped.
            input_tokens: prompt tokens the provider billed.
            output_tokens: completion tokens the provider billed.
        """
        ...


class _NoopScope:
    """The shared no-op context manager and model-call recorder."""

    __slots__ = ()

    def __enter__(self) -> _NoopScope:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

    def record_response(
        self,
        response_model: str | None = None,
        response_id: str | None = None,
        finish_reasons: Sequence[str] | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """Do nothing: tracing is off."""


_NOOP: Final = _NoopScope()


def _error_type(exc_type: type[BaseException]) -> str:
    # The conventions ask for the fully qualified class name; builtins read
    # better bare ("TimeoutError").
    module = exc_type.__module__
    return exc_type.__qualname__ if module == "builtins" else f"{module}.{exc_type.__qualname__}"


class _SpanScope:
    """Starts a span as current on enter; marks it failed on an exception."""

    __slots__ = ("_attributes", "_kind", "_manager", "_name", "_span", "_tracer")

    def __init__(
        self,
        tracer: Tracer,
        name: str,
        kind: Any,
        attributes: dict[str, AttributeValue],
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._kind = kind
        self._attributes = attributes
        self._manager: Any = None
        self._span: Span | None = None

    def __enter__(self) -> _SpanScope:
        # Status and error.type are set here, not by the SDK: its defaults
        # would copy the exception message (possibly content) into the span.
        self._manager = self._tracer.start_as_current_span(
            self._name,
            kind=self._kind,
            attributes=self._attributes,
            record_exception=False,
            set_status_on_exception=False,
        )
        self._span = self._manager.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        # Only real failures are errors; a cancelled turn (CancelledError, a
        # BaseException) ends its span unmarked, as it is the caller's choice.
        if span is not None and exc_type is not None and issubclass(exc_type, Exception):
            from opentelemetry.trace import Status, StatusCode

            error_type = _error_type(exc_type)
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
        self._manager.__exit__(exc_type, exc, tb)

    def record_response(
        self,
        response_model: str | None = None,
        response_id: str | None = None,
        finish_reasons: Sequence[str] | None = None,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
    ) -> None:
        """Set the ``gen_ai.response.*`` and ``gen_ai.usage.*`` attributes.

        Args:
            response_model: the model that actually answered.
            response_id: the provider's id of the response.
            finish_reasons: why each choice stopped.
            input_tokens: prompt tokens the provider billed.
            output_tokens: completion tokens the provider billed.
        """
        span = self._span
        if span is None or not span.is_recording():
            return
        attributes: dict[str, AttributeValue] = {}
        if response_model is not None:
            attributes["gen_ai.response.model"] = response_model
        if response_id is not None:
            attributes["gen_ai.response.id"] = response_id
        if finish_reasons is not None:
            attributes["gen_ai.response.finish_reasons"] = list(finish_reasons)
        if input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = input_tokens
        if output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = output_tokens
        span.set_attributes(attributes)


def _request_attributes(options: Mapping[str, Any]) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {}
    for option, attribute in _NUMERIC_OPTIONS:
        value = options.get(option)
        # bool is an int subclass; a flag here would be a caller's mistake.
        if isinstance(value, int | float) and not isinstance(value, bool):
            attributes[attribute] = value
    stop = options.get("stop")
    if stop is None:
        stop = options.get("stop_sequences")
    if isinstance(stop, str):
        attributes["gen_ai.request.stop_sequences"] = [stop]
    elif isinstance(stop, Sequence):
        items = cast("Sequence[object]", stop)
        attributes["gen_ai.request.stop_sequences"] = [s for s in items if isinstance(s, str)]
    return attributes


class Telemetry:
    """Creates the GenAI spans of a turn; a no-op when tracing is off.

    Construct one per process (or per runner) and share it: it holds the
    tracer, so each span costs one provider lookup at most.

    Args:
        tracer_provider: the provider to trace with; by default the global
            one, looked up (at most once a second) until an SDK provider has
            been installed.
        meter: receives the run loop's measurements (metrics); None
            measures nothing.

    Attributes:
        meter: the meter given, or None.
    """

    __slots__ = ("_explicit", "_next_check", "_tracer", "meter")

    # Looking the global provider up costs microseconds (an environment
    # lookup inside the API), too much for every span of an untraced
    # process; applications install their provider at start-up, so checking
    # again once a second is soon enough.
    _RECHECK_SECONDS: ClassVar[float] = 1.0

    def __init__(
        self, tracer_provider: TracerProvider | None = None, *, meter: Meter | None = None
    ) -> None:
        self.meter = meter
        self._explicit = tracer_provider is not None
        self._tracer: Tracer | None = None
        self._next_check = 0.0
        if tracer_provider is not None:
            self._tracer = self._tracer_from(tracer_provider)

    @staticmethod
    def _tracer_from(provider: TracerProvider) -> Tracer | None:
        from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider

        # The API's defaults record nothing; treating them as "off" lets every
        # span skip its attribute dictionary.
        if isinstance(provider, NoOpTracerProvider | ProxyTracerProvider):
            return None
        return provider.get_tracer(_INSTRUMENTATION_NAME)

    def _active_tracer(self) -> Tracer | None:
        tracer = self._tracer
        if tracer is not None or self._explicit:
            return tracer
        now = time.monotonic()
        if now < self._next_check:
            return None
        self._next_check = now + self._RECHECK_SECONDS
        try:
            from opentelemetry import trace
        except ImportError:
            return None
        # The global provider can be installed after this object was built,
        # but only once, so the first real tracer is kept for good.
        self._tracer = self._tracer_from(trace.get_tracer_provider())
        return self._tracer

    @property
    def enabled(self) -> bool:
        """Whether spans are being recorded (a provider is configured)."""
        return self._active_tracer() is not None

    def turn(
        self, conversation_uuid: str, action_code: str, agent_code: str | None
    ) -> AbstractContextManager[object]:
        """Span one turn of a conversation: ``invoke_agent {action_code}``.

        Args:
            conversation_uuid: the conversation's uuid (``gen_ai.conversation.id``).
            action_code: the action being run (names the span).
            agent_code: the agent running it (``gen_ai.agent.name``).

        Returns:
            A context manager; the span is current inside it.
        """
        tracer = self._active_tracer()
        if tracer is None:
            return _NOOP
        from opentelemetry.trace import SpanKind

        return _SpanScope(
            tracer,
            f"invoke_agent {action_code}",
            SpanKind.INTERNAL,
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": agent_code or action_code,
                "gen_ai.conversation.id": str(conversation_uuid),
            },
        )

    def model_call(
        self, provider_kind: ProviderKind, model_name: str, options: Mapping[str, Any]
    ) -> AbstractContextManager[ModelCallSpan]:
        """Span one model request: ``chat {model_name}``.

        Args:
            provider_kind: the API the provider speaks.
            model_name: the requested model.
            options: the normalized options sent (temperature, max_tokens,
                top_p, top_k, stop, presence_penalty, frequency_penalty);
                only those present become attributes, others are ignored.

        Returns:
            A context manager yielding a :class:`ModelCallSpan`.
        """
        tracer = self._active_tracer()
        if tracer is None:
            return _NOOP
        from opentelemetry.trace import SpanKind

        provider_name = _PROVIDER_NAMES.get(provider_kind, provider_kind.value)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name,
            "gen_ai.request.model": model_name,
        }
        attributes.update(_request_attributes(options))
        return _SpanScope(tracer, f"chat {model_name}", SpanKind.CLIENT, attributes)

    def tool_call(self, tool_name: str, call_id: str | None) -> AbstractContextManager[object]:
        """Span one tool execution: ``execute_tool {tool_name}``.

        Args:
            tool_name: the tool's name as the model called it.
            call_id: the model's id for the call, when it gave one.

        Returns:
            A context manager; the span is current inside it.
        """
        tracer = self._active_tracer()
        if tracer is None:
            return _NOOP
        from opentelemetry.trace import SpanKind

        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": tool_name,
        }
        if call_id is not None:
            attributes["gen_ai.tool.call.id"] = call_id
        return _SpanScope(tracer, f"execute_tool {tool_name}", SpanKind.INTERNAL, attributes)
