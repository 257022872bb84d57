"""Fetching an OpenAPI document from a URL is bounded in total time, not only per read.

A loopback server answers 200 and then sends its document one byte at a
time, each well within the client's per-read timeout: only a limit on the
whole fetch ends it. The limit here is a fraction of a second, passed in.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from pilothouse.tools import ToolError
from pilothouse.tools._openapi import load_document

pytestmark = pytest.mark.anyio

_STOP = threading.Event()


class _Trickle(BaseHTTPRequestHandler):
    """Promises a long YAML document, then sends a byte every 50 ms until stopped (10 s at most)."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/yaml")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        for _ in range(200):
            if _STOP.wait(0.05):
                return
            self.wfile.write(b"#")
            self.wfile.flush()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the test reads its own outcome."""


@pytest.fixture
def trickling_url() -> Iterator[str]:
    _STOP.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/openapi.yaml"
    finally:
        _STOP.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def test_a_document_url_trickling_its_body_fails_at_the_total_fetch_limit(
    trickling_url: str,
) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0)) as client:
        with pytest.raises(ToolError) as caught:
            await load_document(trickling_url, client, fetch_seconds=0.3)
    message = str(caught.value)
    assert message.startswith(f"OpenAPI document {trickling_url}: not sent whole within 0.3 s")
    assert "the most one document fetch may take" in message
