"""Model calls keep their HTTP/1.1 connection, streamed or not, against a real server.

The upstream is uvicorn on loopback serving an OpenAI-compatible chat
completion, whole or as Server-Sent Events in chunked encoding, as OpenAI's
and most compatible servers send it. Every request names the client's port,
so the test sees how many TCP connections the turns used. Streamed calls
used to open one each: the OpenAI SDK reads the rest of the body after
``[DONE]`` through the response's stream, and the wire-repair transport's
stream started over instead of going on, so the body was never read whole
and the connection was dropped (in production, a TLS handshake per call).

Each request also leaves in one ``send`` system call (its head and body
together, ``providers/_pool.py``), counted where asyncio calls the socket.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn_thread import uvicorn_in_thread

from pilothouse.api import Pilothouse
from pilothouse.runtime import TextDelta
from pilothouse.settings import Settings
from pilothouse.types import ProcessStatus

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CATALOG = """\
providers:
  - code: UVI
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: UVIMODEL
    provider: UVI
    model_name: keepalive
    capabilities: [FC, SR]
configurations:
  - code: BRF
    max_tokens: 32
actions:
  - code: ASK
    model: UVIMODEL
    configuration: BRF
    prompt: Answer briefly.
    ask_user: false
"""

PIECES = ["Kept ", "alive."]


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "keepalive"}
    return "data: " + json.dumps({**body, "choices": [choice]}) + "\n\n"


def make_app(clients: list[tuple[str, int]]) -> Starlette:
    """The upstream: records each request's client address, answers as asked."""

    async def completions(request: Request) -> Response:
        assert request.client is not None
        clients.append((request.client.host, request.client.port))
        body = await request.json()
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(PIECES)}
            return JSONResponse(
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "created": 1,
                    "model": "keepalive",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
                }
            )

        async def events() -> AsyncIterator[str]:
            yield _chunk({"role": "assistant", "content": ""})
            for piece in PIECES:
                yield _chunk({"content": piece})
            yield _chunk({}, "stop")
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, list[tuple[str, int]]]]:
    clients: list[tuple[str, int]] = []
    with uvicorn_in_thread(make_app(clients), name="the upstream") as url:
        yield f"{url}/v1", clients


@pytest.fixture
async def ph(
    tmp_path: Path, upstream: tuple[str, list[tuple[str, int]]]
) -> AsyncIterator[Pilothouse]:
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG.format(base_url=upstream[0]), encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'keepalive.db'}")
    async with Pilothouse(settings) as facade:
        await facade.catalog.import_files([catalog])
        yield facade


async def test_streamed_and_whole_model_calls_share_one_connection(
    ph: Pilothouse, upstream: tuple[str, list[tuple[str, int]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    clients = upstream[1]
    clients.clear()
    port = urlsplit(upstream[0]).port
    sends: list[int] = []
    original = socket.socket.send

    def send(self: socket.socket, data: Any, flags: int = 0) -> int:
        peer: Any = self.getpeername()
        if isinstance(peer, tuple) and peer[1] == port:
            sends.append(len(data))
        return original(self, data, flags)

    monkeypatch.setattr(socket.socket, "send", send)
    for _ in range(3):
        seen: list[str] = []
        async for event in ph.command.start_and_stream("Still there?", action="ASK"):
            if isinstance(event, TextDelta):
                seen.append(event.text)
        assert "".join(seen) == "".join(PIECES)
    for _ in range(2):
        result = await ph.command.start_and_send(
            "Still there?", action="ASK", runtime_config={"stream": False}
        )
        assert (result.status, result.text) == (ProcessStatus.COMPLETED, "".join(PIECES))
    # Five calls, one TCP connection: the streamed answers were read to the
    # end of their bodies, so each call found the connection free.
    assert len(clients) == 5
    assert len(set(clients)) == 1, clients
    # Five requests, five sends: each request's head and body left together.
    assert len(sends) == 5, sends
