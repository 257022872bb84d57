"""A loopback HTTP server that promises a long body and sends it a byte at a time.

Each byte comes well within a client's per-read timeout, so only a bound on
a whole fetch ends it: the fetch tests of knowledge URLs and OpenAPI
documents point their clients at it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def trickling_server(path: str, content_type: str, byte: bytes) -> Iterator[str]:
    """Serve ``path`` as a 100,000-byte body sent one ``byte`` every 50 ms (10 s at most).

    Yields:
        The URL of ``path`` on the server, which stops when the block ends.
    """
    stop = threading.Event()

    class Trickle(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", "100000")
            self.end_headers()
            for _ in range(200):
                if stop.wait(0.05):
                    return
                self.wfile.write(byte)
                self.wfile.flush()

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: the test reads its own outcome."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{path}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
