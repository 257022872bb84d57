"""GenAI spans: names, attributes, errors, and the no-op path."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import SpanKind, StatusCode

from pilothouse.catalog._enums import ProviderKind
from pilothouse.errors import RateLimitError
from pilothouse.runtime._telemetry import Telemetry


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    yield exporter
    exporter.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
def telemetry(provider: TracerProvider) -> Telemetry:
    return Telemetry(provider)


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1
    return spans[0]


def test_turn_span(telemetry: Telemetry, exporter: InMemorySpanExporter) -> None:
    with telemetry.turn("c0ffee00-0000-4000-8000-000000000001", "summarize", "editor"):
        pass
    span = only_span(exporter)
    assert span.name == "invoke_agent summarize"
    assert span.kind is SpanKind.INTERNAL
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "editor",
        "gen_ai.conversation.id": "c0ffee00-0000-4000-8000-000000000001",
    }
    assert span.status.status_code is StatusCode.UNSET


def test_model_call_span_with_every_option_and_the_response(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    options = {
        "temperature": 0.2,
        "max_tokens": 256,
        "top_p": 0.9,
        "top_k": 40,
        "stop": ["END", "STOP"],
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
    }
    with telemetry.model_call(ProviderKind.OPENAI, "gpt-4o", options) as call:
        call.record_response(
            response_model="gpt-4o-2024-08-06",
            response_id="chatcmpl-1",
            finish_reasons=["stop"],
            input_tokens=120,
            output_tokens=30,
        )
    span = only_span(exporter)
    assert span.name == "chat gpt-4o"
    assert span.kind is SpanKind.CLIENT
    assert dict(span.attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.top_k": 40,
        "gen_ai.request.stop_sequences": ("END", "STOP"),
        "gen_ai.request.presence_penalty": 0.5,
        "gen_ai.request.frequency_penalty": -0.5,
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.finish_reasons": ("stop",),
        "gen_ai.usage.input_tokens": 120,
        "gen_ai.usage.output_tokens": 30,
    }


def test_model_call_sets_only_the_options_present(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    with telemetry.model_call(ProviderKind.ANTHROPIC, "claude", {"max_tokens": 64, "top_p": None}):
        pass
    attributes = dict(only_span(exporter).attributes or {})
    request = {k for k in attributes if k.startswith("gen_ai.request.")}
    assert request == {"gen_ai.request.model", "gen_ai.request.max_tokens"}
    assert not any(k.startswith(("gen_ai.response.", "gen_ai.usage.")) for k in attributes)


def test_model_call_accepts_a_single_stop_string_and_pydantic_ai_names(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    with telemetry.model_call(ProviderKind.OPENAI, "m", {"stop": "END"}):
        pass
    with telemetry.model_call(ProviderKind.OPENAI, "m", {"stop_sequences": ["A"]}):
        pass
    first, second = exporter.get_finished_spans()
    assert (first.attributes or {})["gen_ai.request.stop_sequences"] == ("END",)
    assert (second.attributes or {})["gen_ai.request.stop_sequences"] == ("A",)


@pytest.mark.parametrize(
    ("kind", "provider_name"),
    [
        (ProviderKind.AZURE, "azure.ai.openai"),
        (ProviderKind.BEDROCK, "aws.bedrock"),
        (ProviderKind.GOOGLE, "gcp.gemini"),
        (ProviderKind.LOCAL, "local"),
    ],
)
def test_provider_names_without_the_deprecated_gen_ai_system(
    telemetry: Telemetry, exporter: InMemorySpanExporter, kind: ProviderKind, provider_name: str
) -> None:
    with telemetry.model_call(kind, "m", {}):
        pass
    attributes = only_span(exporter).attributes or {}
    assert attributes["gen_ai.provider.name"] == provider_name
    # Deprecated by the GenAI conventions in favour of gen_ai.provider.name.
    assert "gen_ai.system" not in attributes


def test_record_response_skips_missing_values(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    with telemetry.model_call(ProviderKind.OPENAI, "m", {}) as call:
        call.record_response(output_tokens=5)
    attributes = dict(only_span(exporter).attributes or {})
    assert attributes["gen_ai.usage.output_tokens"] == 5
    assert "gen_ai.usage.input_tokens" not in attributes
    assert "gen_ai.response.id" not in attributes


def test_tool_call_span(telemetry: Telemetry, exporter: InMemorySpanExporter) -> None:
    with telemetry.tool_call("get_weather", "call_1"):
        pass
    with telemetry.tool_call("no_id", None):
        pass
    first, second = exporter.get_finished_spans()
    assert first.name == "execute_tool get_weather"
    assert dict(first.attributes or {}) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_weather",
        "gen_ai.tool.call.id": "call_1",
    }
    assert "gen_ai.tool.call.id" not in (second.attributes or {})


def test_spans_nest_under_the_turn(telemetry: Telemetry, exporter: InMemorySpanExporter) -> None:
    with telemetry.turn("c1", "act", "agent"):
        with telemetry.model_call(ProviderKind.OPENAI, "m", {}):
            pass
        with telemetry.tool_call("t", "1"):
            pass
    chat, tool, turn = exporter.get_finished_spans()
    assert turn.context is not None
    assert chat.parent is not None and chat.parent.span_id == turn.context.span_id
    assert tool.parent is not None and tool.parent.span_id == turn.context.span_id


def test_exception_marks_the_span_failed_without_its_message(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(RateLimitError):
        with telemetry.model_call(ProviderKind.OPENAI, "m", {}):
            raise RateLimitError("quota for key sk-secret exceeded")
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["error.type"] == "pilothouse.errors.RateLimitError"
    assert "sk-secret" not in (span.status.description or "")
    assert not span.events  # no exception event carrying the message or a stack trace


def test_builtin_exception_type_is_bare(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(TimeoutError):
        with telemetry.tool_call("slow", "1"):
            raise TimeoutError
    assert (only_span(exporter).attributes or {})["error.type"] == "TimeoutError"


def test_cancellation_is_not_an_error(telemetry: Telemetry, exporter: InMemorySpanExporter) -> None:
    class Cancelled(BaseException):
        pass

    with pytest.raises(Cancelled):
        with telemetry.turn("c1", "act", "agent"):
            raise Cancelled
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.UNSET
    assert "error.type" not in (span.attributes or {})


def test_content_and_secrets_never_become_attributes(
    telemetry: Telemetry, exporter: InMemorySpanExporter
) -> None:
    options = {"api_key": "sk-secret", "messages": ["hello secret"], "extra_headers": {"x": "1"}}
    with telemetry.model_call(ProviderKind.OPENAI, "m", options):
        pass
    values = repr(dict(only_span(exporter).attributes or {}))
    assert "secret" not in values
    assert "extra_headers" not in values


def test_unsampled_span_ignores_the_response(exporter: InMemorySpanExporter) -> None:
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with Telemetry(provider).model_call(ProviderKind.OPENAI, "m", {}) as call:
        call.record_response(input_tokens=1)
    assert exporter.get_finished_spans() == ()
    provider.shutdown()


# --- no-op path ---------------------------------------------------------------


def test_unconfigured_global_provider_is_a_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    telemetry = Telemetry()
    assert not telemetry.enabled
    scopes = {
        id(telemetry.turn("c", "a", "g")),
        id(telemetry.model_call(ProviderKind.OPENAI, "m", {"temperature": 1.0})),
        id(telemetry.tool_call("t", "1")),
    }
    assert len(scopes) == 1  # one shared object: nothing is built per call
    with telemetry.model_call(ProviderKind.OPENAI, "m", {}) as call:
        call.record_response(input_tokens=1)


def test_explicit_noop_provider_is_a_noop() -> None:
    telemetry = Telemetry(trace.NoOpTracerProvider())
    assert not telemetry.enabled
    with telemetry.turn("c", "a", "g"):
        pass


def test_noop_scope_lets_exceptions_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    with pytest.raises(ValueError, match="boom"):
        with Telemetry().tool_call("t", None):
            raise ValueError("boom")


def test_without_opentelemetry_everything_is_a_noop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    telemetry = Telemetry()
    assert not telemetry.enabled
    with telemetry.turn("c", "a", "g"):
        with telemetry.model_call(ProviderKind.OPENAI, "m", {}) as call:
            call.record_response(response_id="r")


def test_global_provider_installed_later_is_picked_up(
    monkeypatch: pytest.MonkeyPatch, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    monkeypatch.setattr(Telemetry, "_RECHECK_SECONDS", 3600.0)
    telemetry = Telemetry()
    with telemetry.turn("c", "before", "g"):
        pass
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert not telemetry.enabled  # not looked up again before the interval
    monkeypatch.setattr(Telemetry, "_RECHECK_SECONDS", 0.0)
    telemetry = Telemetry()
    monkeypatch.setattr(trace, "get_tracer_provider", trace.ProxyTracerProvider)
    assert not telemetry.enabled
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    assert telemetry.enabled
    with telemetry.turn("c", "after", "g"):
        pass
    assert [s.name for s in exporter.get_finished_spans()] == ["invoke_agent after"]
