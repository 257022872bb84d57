"""The HTTP transport that repairs chat completions on the wire (see ``_wire``).

Kept apart from ``_wire`` so that the run loop, which only collects the
notes, does not import the HTTP client.
"""

from __future__ import annotations

__all__ = ["WireRepairTransport"]

import codecs
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable

import httpx2

from pilothouse.providers._wire import (
    repair_completion,
    repair_message,
    repair_message_stream,
    repair_stream,
)

_Stream = Callable[[AsyncIterator[str]], AsyncIterator[bytes]]
# The answers repaired, by the end of the request's path: OpenAI-compatible
# chat completions, and Anthropic Messages.
_REPAIRS: dict[str, tuple[Callable[[bytes], bytes], _Stream]] = {
    "/chat/completions": (repair_completion, repair_stream),
    "/v1/messages": (repair_message, repair_message_stream),
}


def _repairs(request: httpx2.Request) -> tuple[Callable[[bytes], bytes], _Stream] | None:
    if request.method != "POST":
        return None
    path = request.url.path
    return next((fixes for end, fixes in _REPAIRS.items() if path.endswith(end)), None)


class WireRepairTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that repairs chat completions before the SDK reads them.

    Only successful ``POST .../chat/completions`` (OpenAI-compatible) and
    ``POST .../v1/messages`` (Anthropic) answers are touched; every other
    request and every error answer passes through unchanged.

    Args:
        inner: the transport that sends the requests.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send the request; repair the answer of a chat completion."""
        response = await self._inner.handle_async_request(request)
        fixes = _repairs(request)
        if fixes is None or response.status_code != 200:
            return response
        whole, streamed = fixes
        headers = [
            (k, v)
            for k, v in response.headers.multi_items()
            if k.lower() not in ("content-length", "content-encoding", "transfer-encoding")
        ]
        # Read through a Response bound to the request, so a compressed
        # body is decoded before it is repaired.
        upstream = httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=response.stream,
            request=request,
            extensions=response.extensions,
        )
        if "text/event-stream" in response.headers.get("content-type", ""):
            return httpx2.Response(
                response.status_code,
                headers=headers,
                stream=_RepairedStream(upstream, streamed),
                request=request,
                extensions=response.extensions,
            )
        try:
            body = await upstream.aread()
        finally:
            await upstream.aclose()
        return httpx2.Response(
            response.status_code,
            headers=headers,
            content=whole(body),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


class _RepairedStream(httpx2.AsyncByteStream):
    """The repaired events, one piece per network read of the upstream body.

    The repair functions take lines and give one piece per line. Handing
    every piece on by itself cost each event three or four trips through the
    async iterators above (this stream, the SDK's response and its SSE
    decoder), and ``aiter_lines`` two more below, all CPU per streamed event.
    The body is read with one iterator here, split into lines as
    ``aiter_lines`` splits them, and what the lines of one read became is
    sent on together (``docs/benchmarks.md``).

    Iterating the stream again continues where the last iteration stopped,
    as httpcore's own stream does. The OpenAI SDK relies on it: it stops
    reading events at ``[DONE]`` and then drains ``response.stream`` to the
    end of the body, which is what lets HTTP/1.1 keep the connection. A new
    iteration that started over found the upstream body consumed, the drain
    ended at once, and every streamed call closed its connection and opened
    a new one (a TCP, and in production a TLS, handshake per call).
    """

    def __init__(self, upstream: httpx2.Response, repair: _Stream) -> None:
        self._upstream = upstream
        self._repair = repair
        self._pieces: AsyncGenerator[bytes, None] | None = None

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._pieces is None:
            # A function of the upstream, not a method: the reader does not
            # point back at this stream, so no reference cycle is left for
            # the garbage collector with every streamed answer.
            self._pieces = _read(self._upstream, self._repair)
        return self._pieces

    async def aclose(self) -> None:
        # The reader may be suspended mid-body (a client that stopped early):
        # close it here rather than leave it to the garbage collector.
        if self._pieces is not None:
            await self._pieces.aclose()
        await self._upstream.aclose()


async def _read(upstream: httpx2.Response, repair: _Stream) -> AsyncGenerator[bytes, None]:
    """The repaired pieces of the upstream body, one per network read (``_RepairedStream``)."""
    lines = _Lines(upstream)
    out: list[bytes] = []
    try:
        async for piece in repair(lines.iterate()):
            out.append(piece)
            if lines.between_reads:
                # The piece of the read's last line: the read is done.
                yield b"".join(out)
                out.clear()
    except Exception:
        # What came before a bad event reaches the SDK first, as it did
        # line by line; then the error.
        if out:
            yield b"".join(out)
        raise
    if out:
        yield b"".join(out)


class _Lines:
    """The lines of a response body, read a network read at a time."""

    def __init__(self, upstream: httpx2.Response) -> None:
        self._upstream = upstream
        self._pending: deque[str] = deque()

    @property
    def between_reads(self) -> bool:
        """Whether every line of the last read has been handed out."""
        return not self._pending

    async def iterate(self) -> AsyncIterator[str]:
        """Yield the body's lines as ``httpx2.Response.aiter_lines`` would."""
        text = codecs.getincrementaldecoder(self._upstream.encoding or "utf-8")(errors="replace")
        splitter = _LineSplitter()
        pending = self._pending
        async for raw in self._upstream.aiter_bytes():
            pending.extend(splitter.feed(text.decode(raw)))
            while pending:
                yield pending.popleft()
        pending.extend(splitter.feed(text.decode(b"", True)))
        pending.extend(splitter.flush())
        while pending:
            yield pending.popleft()


_NEWLINES = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
"""What ``str.splitlines`` (and so ``aiter_lines``) ends a line at."""


class _LineSplitter:
    """Splits text that arrives in pieces into lines, as ``str.splitlines`` does.

    A carriage return at the end of a piece is held back, so a CR LF split
    across two reads ends one line, not two.
    """

    def __init__(self) -> None:
        self._partial: list[str] = []
        self._cr = False

    def feed(self, text: str) -> list[str]:
        """Return the lines that ``text`` completes."""
        if self._cr:
            text = "\r" + text
            self._cr = False
        if text.endswith("\r"):
            self._cr = True
            text = text[:-1]
        if not text:
            return []
        ends_line = text[-1] in _NEWLINES
        lines = text.splitlines()
        if len(lines) == 1 and not ends_line:
            self._partial.append(lines[0])
            return []
        if self._partial:
            lines[0] = "".join(self._partial) + lines[0]
            self._partial = []
        if not ends_line:
            self._partial = [lines.pop()]
        return lines

    def flush(self) -> list[str]:
        """Return the last line, when the text did not end with a line break."""
        if not self._partial and not self._cr:
            return []
        line = "".join(self._partial)
        self._partial = []
        self._cr = False
        return [line]
