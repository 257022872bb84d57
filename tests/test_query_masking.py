"""Credential-like query parameters are masked in log lines and in exported spans."""

from __future__ import annotations

import io
import json
import logging
import logging.config

import pytest

from pilothouse.api import logging_config

SECRET = "s3cr3t-value"
ACCESS_ARGS = ("127.0.0.1:5000", "GET", f"/v1/x?page=2&Token={SECRET}&api-key={SECRET}", "1.1", 200)


def _record(name: str, message: str, args: tuple[object, ...]) -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, message, args, None)


@pytest.mark.parametrize(
    ("query", "masked"),
    [
        (f"api_key={SECRET}&page=2", "api_key=***&page=2"),
        (f"KEY={SECRET}&keyword=ships", "KEY=***&keyword=ships"),
        (f"access_token={SECRET}&refresh_token={SECRET}", "access_token=***&refresh_token=***"),
        (f"client_secret={SECRET}&Password={SECRET}", "client_secret=***&Password=***"),
        (f"sig={SECRET}&session={SECRET}", "sig=***&session=***"),
        (f"X-Amz-Signature={SECRET}&author=ada", "X-Amz-Signature=***&author=ada"),
        (f"api%5Fkey={SECRET}&token=", "api%5Fkey=***&token="),
    ],
)  # fmt: skip
def test_json_log_lines_mask_credential_query_parameters_and_keep_the_rest(
    query: str, masked: str
) -> None:
    from pilothouse._logs import JsonFormatter

    line = JsonFormatter().format(_record("pilothouse.test", "calling https://h/p?%s", (query,)))

    assert json.loads(line)["message"] == f"calling https://h/p?{masked}"


def test_uvicorn_access_lines_are_masked_in_json_and_in_text() -> None:
    names = ("", "uvicorn", "uvicorn.error", "uvicorn.access")
    saved = {
        name: (logging.getLogger(name).handlers[:], logging.getLogger(name).propagate)
        for name in names
    }
    try:
        for log_format in ("json", "text"):
            stream = io.StringIO()
            config = logging_config("info", log_format)
            for handler in config["handlers"].values():
                handler["stream"] = stream
            logging.config.dictConfig(config)
            logging.getLogger("uvicorn.access").info('%s - "%s %s HTTP/%s" %d', *ACCESS_ARGS)
            written = stream.getvalue()
            assert SECRET not in written, (log_format, written)
            assert "/v1/x?page=2&Token=***&api-key=***" in written, (log_format, written)
    finally:
        for name, (handlers, propagate) in saved.items():
            logger = logging.getLogger(name)
            logger.handlers[:] = handlers
            logger.propagate = propagate


def test_spans_leave_the_exporter_with_their_url_attributes_masked() -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from pilothouse._tracing import masked_span_exporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(masked_span_exporter(memory)))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span(
        "GET",
        attributes={
            "url.query": f"api_key={SECRET}&page=2",
            "url.full": f"https://models.example.com/v1?key={SECRET}#part",
            "http.url": f"http://h/?password={SECRET}",
            "http.target": f"/v1/x?token={SECRET}",
            "url.path": "/v1/x",
        },
    ) as span:
        span.set_attribute("http.request.uri", f"/late?secret={SECRET}")
    with tracer.start_as_current_span("plain", attributes={"url.path": "/v1/y"}):
        pass

    masked, plain = memory.get_finished_spans()
    assert dict(masked.attributes or {}) == {
        "url.query": "api_key=***&page=2",
        "url.full": "https://models.example.com/v1?key=***#part",
        "http.url": "http://h/?password=***",
        "http.target": "/v1/x?token=***",
        "url.path": "/v1/x",
        "http.request.uri": "/late?secret=***",
    }
    assert masked.context == span.get_span_context() and masked.name == "GET"
    assert dict(plain.attributes or {}) == {"url.path": "/v1/y"}
