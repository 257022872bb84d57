"""Helpers the HTTP service tests share (fixtures are in conftest.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any


def auth(key: str) -> dict[str, str]:
    """The request headers carrying an API key."""
    return {"Authorization": f"Bearer {key}"}


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Split a Server-Sent Events body into (event, data) pairs."""
    events: list[tuple[str, dict[str, Any]]] = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@asynccontextmanager
async def serve_on_loopback(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port; yield its base URL.

    A real server, so a client reads a streamed response as it is produced
    (``httpx.ASGITransport`` buffers the whole body first).
    """
    import socket

    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
    sock.close()
