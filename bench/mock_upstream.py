"""A fast mock OpenAI-compatible upstream for the benchmarks (raw asyncio HTTP/1.1).

Raw ``asyncio.Protocol`` rather than Starlette/uvicorn: it parses only what the
benchmark clients send (HTTP/1.1 keep-alive, ``Content-Length`` or chunked
bodies) and costs a few tens of microseconds of CPU per request, so it has
many times the capacity the contenders can use (measured and reported by
``bench/harness.py``; the figures are void below 5x).

The behaviour of a request is chosen by its ``model`` name, so one mock serves
every scenario at once:

- ``plain-d<ms>``: a plain answer after ``<ms>`` milliseconds;
- ``tool-d<ms>``: when the request carries ``tools`` and its last message is
  not a tool result, a call of the first tool; otherwise a plain answer;
  both (plain and tool) come as one SSE delta when the request says
  ``"stream": true``;
- ``stream-f<first>-k<chunks>-g<gap>``: with ``"stream": true``, ``<chunks>``
  content chunks, the first after ``<first>`` ms, the next ones ``<gap>`` ms
  apart (anchored to the request time, so no drift), then a finish chunk, a
  usage chunk and ``[DONE]``. Chunk ``i`` carries the text ``"c<i> "``.
- ``conv-d<ms>`` (scenario 2, ``bench/concurrency.py``): after ``<ms>`` ms, a
  call of the first tool when the request carries ``tools`` and the last
  message is a user message containing ``[use tool]``; otherwise an answer
  ``"re <n>: <last user text>"`` (``<n>``: how many messages the request
  carried), so every answer is unique and shows the history that was sent.

Any other model name gets a plain answer after ``--delay-ms``.

``GET /stats`` returns ``{"requests": n, "cpu_s": process CPU seconds}`` so the
harness can compute the mock's CPU per request, hence its capacity.

Run: ``python bench/mock_upstream.py --port 8899``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time

_PLAIN = re.compile(r"^(plain|tool)-d(\d+)$")
_STREAM = re.compile(r"^stream-f(\d+)-k(\d+)-g(\d+)$")
_CONV = re.compile(r"^conv-d(\d+)$")
TOOL_MARK = "[use tool]"
ANSWER = "Hello from the mock upstream."


class Stats:
    """Request counter shared by every connection."""

    requests = 0


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return (
        b"HTTP/1.1 "
        + status.encode()
        + b"\r\ncontent-type: "
        + content_type
        + b"\r\ncontent-length: "
        + str(len(body)).encode()
        + b"\r\nconnection: keep-alive\r\n\r\n"
        + body
    )


def _completion(model: str, message: dict[str, object], finish: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 6, "total_tokens": 26},
        },
        separators=(",", ":"),
    ).encode()


def _tool_message(request: dict[str, object]) -> dict[str, object] | None:
    tools = request.get("tools")
    messages = request.get("messages")
    if not tools or not isinstance(messages, list) or not messages:
        return None
    last = messages[-1]
    if isinstance(last, dict) and last.get("role") == "tool":
        return None
    name = tools[0]["function"]["name"]  # type: ignore[index]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_mock_1",
                "type": "function",
                "function": {"name": name, "arguments": '{"city": "Paris"}'},
            }
        ],
    }


def _sse(model: str, delta: dict[str, object], finish: str | None, usage: bool = False) -> bytes:
    chunk: dict[str, object] = {
        "id": "chatcmpl-mock",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if usage:
        chunk["usage"] = {"prompt_tokens": 20, "completion_tokens": 64, "total_tokens": 84}
    data = b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _text(content: object) -> str:
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def _conv_message(request: dict[str, object]) -> tuple[dict[str, object], str]:
    """Scenario 2: a tool call when the user asks for one, else a unique answer."""
    messages = request.get("messages")
    messages = messages if isinstance(messages, list) else []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    said = _text(users[-1].get("content")) if users else ""
    if request.get("tools") and last.get("role") == "user" and TOOL_MARK in said:
        message = _tool_message(request)
        if message is not None:
            return message, "tool_calls"
    return {"role": "assistant", "content": f"re {len(messages)}: {said}"}, "stop"


def _streamed(model: str, message: dict[str, object], finish: str) -> bytes:
    """A plain or tool answer asked for with ``stream: true``: all of it in one delta."""
    delta: dict[str, object] = {"role": "assistant"}
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(calls)]
    else:
        delta["content"] = message.get("content")
    done = b"data: [DONE]\n\n"
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        + _sse(model, delta, None)
        + _sse(model, {}, finish)
        + _sse(model, {}, None, usage=True)
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
    )


class MockProtocol(asyncio.Protocol):
    """One keep-alive connection; requests are answered in order."""

    def __init__(self, default_delay_ms: int) -> None:
        self.default_delay_ms = default_delay_ms
        self.buffer = b""
        self.queue: asyncio.Queue[tuple[bytes, bytes, bytes] | None] = asyncio.Queue()
        self.transport: asyncio.Transport | None = None
        self.task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.task = asyncio.get_running_loop().create_task(self._serve())

    def connection_lost(self, exc: Exception | None) -> None:
        self.queue.put_nowait(None)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buffer[:end]
            lines = head.split(b"\r\n")
            request_line = lines[0]
            headers = {}
            for line in lines[1:]:
                key, _, value = line.partition(b":")
                headers[key.strip().lower()] = value.strip()
            rest = self.buffer[end + 4 :]
            if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
                body, consumed = _dechunk(rest)
                if body is None:
                    return
                self.buffer = rest[consumed:]
            else:
                length = int(headers.get(b"content-length", b"0"))
                if len(rest) < length:
                    return
                body, self.buffer = rest[:length], rest[length:]
            method, _, target = request_line.partition(b" ")
            path = target.split(b" ")[0]
            self.queue.put_nowait((method, path, body))

    async def _serve(self) -> None:
        while True:
            item = await self.queue.get()
            if item is None or self.transport is None or self.transport.is_closing():
                return
            try:
                await self._answer(*item)
            except (ConnectionError, RuntimeError):
                return

    async def _answer(self, method: bytes, path: bytes, body: bytes) -> None:
        assert self.transport is not None
        write = self.transport.write
        if method == b"GET":
            if path.endswith(b"/stats"):
                payload = {"requests": Stats.requests, "cpu_s": time.process_time()}
                write(_response("200 OK", json.dumps(payload).encode()))
            else:
                write(_response("200 OK", b'{"object":"list","data":[]}'))
            return
        Stats.requests += 1
        started = time.monotonic()
        try:
            request = json.loads(body)
        except ValueError:
            write(_response("400 Bad Request", b'{"error":{"message":"bad json"}}'))
            return
        model = str(request.get("model", ""))
        stream = _STREAM.match(model)
        if stream and request.get("stream"):
            await self._stream(model, started, *(int(g) for g in stream.groups()))
            return
        conv = _CONV.match(model)
        if conv:
            message, finish = _conv_message(request)
            await asyncio.sleep(int(conv.group(1)) / 1000)
            write(_response("200 OK", _completion(model, message, finish)))
            return
        plain = _PLAIN.match(model)
        delay = int(plain.group(2)) if plain else self.default_delay_ms
        message: dict[str, object] | None = None
        if plain and plain.group(1) == "tool":
            message = _tool_message(request)
        finish = "tool_calls" if message else "stop"
        if message is None:
            message = {"role": "assistant", "content": ANSWER}
        if delay:
            await asyncio.sleep(delay / 1000)
        if request.get("stream"):  # e.g. pilothouse serve streams every upstream call
            write(_streamed(model, message, finish))
            return
        write(_response("200 OK", _completion(model, message, finish)))

    async def _stream(self, model: str, started: float, first: int, chunks: int, gap: int) -> None:
        assert self.transport is not None
        write = self.transport.write
        write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
        )
        loop = asyncio.get_running_loop()
        for i in range(chunks):
            due = started + (first + i * gap) / 1000
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            delta: dict[str, object] = {"content": f"c{i} "}
            if i == 0:
                delta["role"] = "assistant"
            write(_sse(model, delta, None))
        write(_sse(model, {}, "stop"))
        write(_sse(model, {}, None, usage=True))
        done = b"data: [DONE]\n\n"
        write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


def _dechunk(data: bytes) -> tuple[bytes | None, int]:
    body = b""
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return None, 0
        size = int(data[pos:end].split(b";")[0], 16)
        start = end + 2
        if len(data) < start + size + 2:
            return None, 0
        if size == 0:
            return body, start + 2
        body += data[start : start + size]
        pos = start + size + 2


async def serve(host: str, port: int, delay_ms: int) -> None:
    """Serve until cancelled."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: MockProtocol(delay_ms), host, port, backlog=4096)
    print(f"mock upstream listening on http://{host}:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    """Parse arguments and serve."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8899)
    parser.add_argument("--delay-ms", type=int, default=0, help="delay of unknown model names")
    args = parser.parse_args()
    try:
        import uvloop  # type: ignore[import-not-found]

        uvloop.install()
    except ImportError:
        pass
    try:
        asyncio.run(serve(args.host, args.port, args.delay_ms))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
