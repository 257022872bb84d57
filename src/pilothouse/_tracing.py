"""Span export configured by the standard ``OTEL_*`` variables, for ``pilothouse serve``.

:class:`TraceExport` reads the OpenTelemetry SDK's own variables, refuses
what it cannot honour (with the variable's name and what to write instead)
and installs the global tracer provider that :class:`~pilothouse.runtime.Telemetry`
picks up, so the turn, model-call and tool-call spans leave the process.

When is anything exported: ``OTEL_TRACES_EXPORTER`` names ``otlp`` or
``console``, or it is unset and an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)
is set. The specification's default exporter is ``otlp`` even without an
endpoint; a service that nobody configured for tracing would then send
spans to ``localhost:4318`` and log a failure for each batch, so nothing is
exported without one of these. ``OTEL_SDK_DISABLED=true`` turns it off.

Span attributes that hold a URL or a query (``url.query``, ``url.full``,
``http.url``, ``http.target``, ...) leave with the value of every
credential-like query parameter masked (``?api_key=***``;
``pilothouse._logs.sensitive_query_key`` says which): FastAPI's request
spans record the caller's query as it came.

The exporter itself (endpoint, headers, timeout, compression), the
resource (``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``), the sampler
(``OTEL_TRACES_SAMPLER``) and the batch processor (``OTEL_BSP_*``) read
their variables in the SDK, as documented there.
"""

from __future__ import annotations

__all__ = ["TraceExport", "masked_span_exporter"]

import importlib.util
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from pilothouse._logs import mask_query, mask_url
from pilothouse.errors import InvalidFieldError

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter

_QUERY_ATTRIBUTES: Final = frozenset({"url.query", "http.query"})
"""Span attributes holding a query string alone."""
_URL_ATTRIBUTES: Final = frozenset(
    {"url.full", "url.original", "http.url", "http.target", "http.request.uri", "url.template"}
)
"""Span attributes holding a URL or a request target, query included."""


def _masked(span: ReadableSpan) -> ReadableSpan:
    """``span`` itself, or a copy whose URL and query attributes are masked."""
    from opentelemetry.sdk.trace import ReadableSpan

    attributes = dict(span.attributes or {})
    changed = False
    for name, value in attributes.items():
        if not isinstance(value, str):
            continue
        if name in _QUERY_ATTRIBUTES:
            masked = mask_query(value)
        elif name in _URL_ATTRIBUTES:
            masked = mask_url(value)
        else:
            continue
        if masked != value:
            attributes[name] = masked
            changed = True
    if not changed:
        return span
    return ReadableSpan(
        name=span.name,
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=attributes,
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=span.status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


def masked_span_exporter(exporter: SpanExporter) -> SpanExporter:
    """Wrap ``exporter`` so every span leaves with its URL and query attributes masked.

    Args:
        exporter: the exporter spans go to (OTLP, console, in-memory).

    Returns:
        An exporter that masks, then hands the spans to ``exporter``.
    """
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class _MaskingExporter(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return exporter.export([_masked(span) for span in spans])

        def shutdown(self) -> None:
            exporter.shutdown()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return exporter.force_flush(timeout_millis)

    return _MaskingExporter()


_EXPORTERS: Final = ("otlp", "console", "none")
_PROTOCOLS: Final = ("http/protobuf",)
_OTLP_MODULE: Final = "opentelemetry.exporter.otlp.proto.http.trace_exporter"
_INSTALL: Final = "pip install 'pilothouse[otel]'"
_DEFAULT_SERVICE: Final = "pilothouse"


def _listed(value: str) -> list[str]:
    return [item.strip().lower() for item in value.split(",") if item.strip()]


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        # A parent package is missing.
        return False


def _check_other_signals(environ: Mapping[str, str]) -> None:
    # Metrics are served at /metrics (Prometheus) and logs go to the
    # process's output: an OTLP exporter asked for either would be ignored.
    for variable, instead in (
        ("OTEL_METRICS_EXPORTER", "scrape /metrics (Prometheus) instead"),
        ("OTEL_LOGS_EXPORTER", "collect the process's JSON logs (--log-format json) instead"),
    ):
        asked = _listed(environ.get(variable, ""))
        if asked and asked != ["none"]:
            raise InvalidFieldError(
                variable,
                f"pilothouse exports traces only over OTLP; set {variable}=none or unset "
                f"it, and {instead}",
            )


@dataclass(frozen=True)
class TraceExport:
    """Where this process's spans go, as the ``OTEL_*`` variables ask.

    Build one with :meth:`from_environment`; :meth:`install` in each process
    that serves (a uvicorn worker), :meth:`shutdown` when it stops.

    Attributes:
        exporters: ``otlp`` and/or ``console``.
        endpoint: where OTLP spans go (None: the SDK's default, only when
            ``OTEL_TRACES_EXPORTER`` asked for ``otlp`` explicitly).
        service_name: the resource's ``service.name``.
    """

    exporters: tuple[str, ...]
    endpoint: str | None
    service_name: str

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> TraceExport | None:
        """Read and check the ``OTEL_*`` variables; None when nothing is to be exported.

        Raises:
            InvalidFieldError: a variable asks for what pilothouse cannot do
                (an unknown exporter, gRPC, a metrics or logs exporter), or for
                OTLP export while the ``otel`` extra is not installed; the
                error names the variable and what to write instead.
        """
        if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
            return None
        _check_other_signals(environ)
        endpoint = (
            environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
            or None
        )
        asked = _listed(environ.get("OTEL_TRACES_EXPORTER", ""))
        for name in asked:
            if name not in _EXPORTERS:
                raise InvalidFieldError(
                    "OTEL_TRACES_EXPORTER",
                    f"'{name}' is not supported; write otlp, console or none",
                )
        if not asked:
            asked = ["otlp"] if endpoint else []
        exporters = tuple(name for name in asked if name != "none")
        if not exporters:
            return None
        if "otlp" in exporters:
            for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
                protocol = environ.get(variable, "").strip()
                if protocol and protocol not in _PROTOCOLS:
                    raise InvalidFieldError(
                        variable,
                        f"'{protocol}' is not supported; write http/protobuf (an OTLP/HTTP "
                        "endpoint, port 4318 by convention)",
                    )
        asked_by = (
            "OTEL_TRACES_EXPORTER"
            if environ.get("OTEL_TRACES_EXPORTER")
            else "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
            if environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            else "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        if not _installed("opentelemetry.sdk.trace"):
            raise InvalidFieldError(
                asked_by,
                "span export is asked for but the OpenTelemetry SDK is not installed: "
                f"{_INSTALL}, or unset the OTEL_* variables",
            )
        if "otlp" in exporters and not _installed(_OTLP_MODULE):
            raise InvalidFieldError(
                asked_by,
                "OTLP export is asked for but opentelemetry-exporter-otlp-proto-http is not "
                f"installed: {_INSTALL}, or unset the OTEL_* variables",
            )
        service = environ.get("OTEL_SERVICE_NAME", "").strip()
        if not service:
            attributes = environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
            pairs = (item.partition("=") for item in attributes.split(","))
            service = next(
                (v.strip() for k, _, v in pairs if k.strip() == "service.name"), _DEFAULT_SERVICE
            )
        return cls(exporters, endpoint, service)

    def describe(self) -> str:
        """One line for the start-up log: what goes where."""
        where = {
            "otlp": f"OTLP/HTTP to {self.endpoint or 'the default endpoint'}",
            "console": "the console",
        }
        targets = " and ".join(where[name] for name in self.exporters)
        return f"tracing: spans of service '{self.service_name}' go to {targets}"

    def install(self) -> TracerProvider:
        """Install the global tracer provider with the exporters; return it.

        Call once per process (the SDK allows one global provider).
        """
        from opentelemetry import trace
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            ConsoleSpanExporter,
            SimpleSpanProcessor,
        )

        # Given attributes win over the environment's: the service name is
        # only set here when the environment names none.
        provider = TracerProvider(resource=Resource.create({SERVICE_NAME: self.service_name}))
        if "otlp" in self.exporters:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            # Endpoint, headers, timeout and compression from OTEL_EXPORTER_OTLP_*.
            provider.add_span_processor(
                BatchSpanProcessor(masked_span_exporter(OTLPSpanExporter()))
            )
        if "console" in self.exporters:
            provider.add_span_processor(
                SimpleSpanProcessor(masked_span_exporter(ConsoleSpanExporter()))
            )
        trace.set_tracer_provider(provider)
        return provider

    @staticmethod
    def shutdown(provider: TracerProvider) -> None:
        """Export what is still queued and stop the exporters."""
        provider.shutdown()
