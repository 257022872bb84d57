"""A scripted OpenAI-compatible upstream: a real HTTP server on loopback.

It answers ``POST /v1/chat/completions`` with the replies it is given, in
order (the last one repeats), exactly as written: malformed tool calls,
bodies that are not JSON, empty ``choices``, streams cut before their end.
Every request body it received is kept, so a test can check what was sent.

Plain asyncio in a thread of its own, so it serves whatever loop (or none)
the test runs on.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    """One scripted answer.

    Attributes:
        body: a JSON value (sent as JSON) or raw bytes.
        events: for a stream, the ``data:`` payloads (JSON values or raw strings).
        done: end a stream with ``data: [DONE]``.
        status: the HTTP status.
        content_type: the Content-Type of a non-streamed body.
    """

    body: Any = None
    events: Sequence[Any] | None = None
    done: bool = True
    status: int = 200
    content_type: str = "application/json"
    named: bool = False
    """Name each streamed event after its ``type`` (``event:`` lines, as Anthropic does)."""
    delay: float = 0.0
    """Seconds between streamed events (a slow model, to interrupt)."""


@dataclass
class Upstream:
    """The running server: its base URL, the script, and the requests seen."""

    base_url: str
    replies: list[Reply] = field(default_factory=lambda: [])
    requests: list[dict[str, Any]] = field(default_factory=lambda: [])
    paths: list[str] = field(default_factory=lambda: [])

    on_request: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    """Awaited with each request's body as it arrives, before the answer (on the server's loop)."""

    def script(self, *replies: Reply) -> None:
        """Replace the script and forget earlier requests."""
        self.replies[:] = list(replies)
        self.requests.clear()
        self.paths.clear()

    def next_reply(self) -> Reply:
        index = min(len(self.requests) - 1, len(self.replies) - 1)
        return self.replies[index]


def completion(
    content: str | None = None, tool_calls: list[Any] | None = None, finish: str | None = None
) -> dict[str, Any]:
    """A chat completion holding ``content`` and/or ``tool_calls`` exactly as given."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "mock",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    }


def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One streamed chunk with ``delta`` exactly as given."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "mock",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_stream(*pieces: str) -> list[dict[str, Any]]:
    """The chunks of a streamed text answer that finishes normally."""
    return [
        chunk({"role": "assistant", "content": ""}),
        *(chunk({"content": p}) for p in pieces),
        chunk({}, "stop"),
    ]


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: Upstream) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
        up.paths.append(lines[0].split(" ")[1])
        raw = await reader.readexactly(int(headers.get("content-length", "0")))
        up.requests.append(json.loads(raw) if raw else {})
        if up.on_request is not None:
            await up.on_request(up.requests[-1])
        reply = up.next_reply()
        if reply.events is None:
            body = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
            writer.write(
                f"HTTP/1.1 {reply.status} X\r\nContent-Type: {reply.content_type}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
        else:
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
            )
            for event in reply.events:
                data = event if isinstance(event, str) else json.dumps(event)
                if reply.named:
                    name = json.loads(data)["type"]
                    writer.write(f"event: {name}\n".encode())
                writer.write(f"data: {data}\n\n".encode())
                await writer.drain()
                if reply.delay:
                    await asyncio.sleep(reply.delay)
            if reply.done:
                writer.write(b"data: [DONE]\n\n")
        await writer.drain()
    finally:
        writer.close()


@contextmanager
def running_upstream(host: str = "127.0.0.1", port: int = 0) -> Iterator[Upstream]:
    """Start the server on a free loopback port (or ``host:port``); stop it at the end."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder: dict[str, Any] = {}

    def run() -> None:
        asyncio.set_event_loop(loop)

        async def start() -> None:
            upstream = Upstream("")
            server = await asyncio.start_server(lambda r, w: _serve(r, w, upstream), host, port)
            bound = server.sockets[0].getsockname()[1]
            upstream.base_url = f"http://{host}:{bound}/v1"
            holder["upstream"], holder["server"] = upstream, server
            ready.set()

        loop.run_until_complete(start())
        loop.run_forever()
        server = holder["server"]
        server.close()
        loop.run_until_complete(server.wait_closed())
        # A connection still being answered (a reply sleeping between
        # events, its client gone) is cancelled and finished here: left
        # pending, it was collected later, after the loop had closed, and
        # its writer.close() failed in whichever test the collector ran.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    ready.wait(10)
    try:
        yield holder["upstream"]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
