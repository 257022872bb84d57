"""A real ASGI app served by uvicorn on a loopback port, in a thread of its own.

For tests whose third-party component is an HTTP service: a thread rather
than a task, so the server keeps answering whatever the test's own loop is
doing (or while no loop runs at all).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn
from ports import free_port


@contextmanager
def uvicorn_in_thread(app: Any, *, name: str, timeout: float = 10.0) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yield its base URL (no trailing slash).

    Args:
        app: the ASGI application.
        name: what the server is, for the failure message when it does not start.
        timeout: seconds to wait for it to start.
    """
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="none")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"uvicorn {name}", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail(f"{name} (uvicorn) did not start within {timeout:g} s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)
