"""``OTEL_*`` variables read by ``TraceExport`` and the JSON log lines of ``serve``."""

from __future__ import annotations

import json
import logging

import pytest

from pilothouse.api import TraceExport, bind_request
from pilothouse.errors import InvalidFieldError


def test_nothing_is_exported_unless_an_endpoint_or_exporter_is_named() -> None:
    assert TraceExport.from_environment({}) is None
    assert TraceExport.from_environment({"OTEL_SERVICE_NAME": "x"}) is None
    assert TraceExport.from_environment({"OTEL_TRACES_EXPORTER": "none"}) is None
    disabled = {"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"}
    assert TraceExport.from_environment(disabled) is None


def test_an_endpoint_means_otlp_and_the_service_name_comes_from_the_standard_variables() -> None:
    export = TraceExport.from_environment(
        {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SERVICE_NAME": "ph-a"}
    )
    assert export == TraceExport(("otlp",), "http://collector:4318", "ph-a")
    assert export is not None
    assert "OTLP/HTTP to http://collector:4318" in export.describe()
    by_resource = TraceExport.from_environment(
        {
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces",
            "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=prod,service.name=ph-b",
        }
    )
    assert by_resource is not None and by_resource.service_name == "ph-b"
    default = TraceExport.from_environment({"OTEL_TRACES_EXPORTER": "console"})
    assert default == TraceExport(("console",), None, "pilothouse")


@pytest.mark.parametrize(
    ("environ", "field", "advice"),
    [
        ({"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER", "otlp, console or none"),
        (
            {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "http/protobuf",
        ),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "http/protobuf",
        ),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, "OTEL_METRICS_EXPORTER", "/metrics"),
        ({"OTEL_LOGS_EXPORTER": "otlp"}, "OTEL_LOGS_EXPORTER", "--log-format json"),
    ],
)
def test_what_cannot_be_honoured_is_refused_naming_the_variable(
    environ: dict[str, str], field: str, advice: str
) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        TraceExport.from_environment(environ)
    assert refused.value.field == field
    assert advice in refused.value.rule


def test_a_missing_exporter_package_is_said_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec

    def without_otlp(name: str, package: str | None = None) -> object:
        if name.startswith("opentelemetry.exporter"):
            return None
        return real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", without_otlp)
    with pytest.raises(InvalidFieldError) as refused:
        TraceExport.from_environment({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://h:4318"})
    assert refused.value.field == "OTEL_EXPORTER_OTLP_ENDPOINT"
    assert "pip install 'pilothouse[otel]'" in refused.value.rule


def _formatted(message: str, *args: object) -> dict[str, object]:
    from pilothouse._logs import ContextFilter, JsonFormatter

    record = logging.LogRecord("pilothouse.test", logging.WARNING, __file__, 1, message, args, None)
    ContextFilter().filter(record)
    return json.loads(JsonFormatter().format(record))


def test_json_lines_carry_the_bound_ids_and_mask_credentials() -> None:
    reset = bind_request("req-1", "6f0c7a52-0000-4000-8000-000000000001")
    try:
        entry = _formatted(
            "refused %s with Authorization: Bearer abc.def and key sk-proj-0123456789abcdef",
            "ph_0a1b2c3d_S3cr3tS3cr3tS3cr3t",
        )
    finally:
        reset()
    assert entry["request_id"] == "req-1"
    assert entry["conversation_id"] == "6f0c7a52-0000-4000-8000-000000000001"
    assert entry["level"] == "WARNING" and entry["logger"] == "pilothouse.test"
    message = str(entry["message"])
    assert "S3cr3t" not in message and "ph_0a1b2c3d_***" in message
    assert "abc.def" not in message and "0123456789abcdef" not in message
    after = _formatted("outside a request")
    assert after["request_id"] is None and after["conversation_id"] is None
