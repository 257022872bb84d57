"""A real OTLP/HTTP trace receiver on loopback: decodes what exporters send.

Each ``POST /v1/traces`` body is an ``ExportTraceServiceRequest`` (protobuf,
optionally gzip); it is decoded with the ``opentelemetry-proto`` classes and
every span is kept, flattened to its name, ids, kind, resource and
attributes.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    kind: int
    resource: dict[str, Any]
    attributes: dict[str, Any]


@dataclass
class Receiver:
    endpoint: str
    spans: list[ReceivedSpan] = field(default_factory=lambda: [])
    paths: list[str] = field(default_factory=lambda: [])
    lock: threading.Lock = field(default_factory=threading.Lock)

    def wait_for(
        self, found: Callable[[list[ReceivedSpan]], bool], timeout: float = 30
    ) -> list[ReceivedSpan]:
        """Wait until ``found(spans)`` holds; the spans then."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if found(spans):
                return spans
            assert time.monotonic() < deadline, f"spans received: {[s.name for s in spans]}"
            time.sleep(0.1)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind is None:
        return None
    return getattr(value, kind)


def _attributes(items: Any) -> dict[str, Any]:
    return {item.key: _value(item.value) for item in items}


@contextmanager
def otlp_receiver() -> Iterator[Receiver]:
    """Serve OTLP/HTTP on a free loopback port while the block runs."""
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest.FromString(body)
            spans: list[ReceivedSpan] = []
            for resource_spans in request.resource_spans:
                resource = _attributes(resource_spans.resource.attributes)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        spans.append(
                            ReceivedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                span_id=span.span_id.hex(),
                                parent_span_id=span.parent_span_id.hex(),
                                kind=span.kind,
                                resource=resource,
                                attributes=_attributes(span.attributes),
                            )
                        )
            with receiver.lock:
                receiver.paths.append(self.path)
                receiver.spans.extend(spans)
            answer = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    receiver = Receiver(endpoint=f"http://127.0.0.1:{server.server_address[1]}")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
