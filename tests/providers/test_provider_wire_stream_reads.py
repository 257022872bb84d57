"""Streamed answers through WireRepairTransport: lines split as before, one piece per read."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pilothouse.errors import UnparseableResponseError
from pilothouse.providers._wire_transport import WireRepairTransport, _LineSplitter

pytestmark = pytest.mark.anyio

_PIECES = st.lists(
    st.text(alphabet=["a", "é", "\n", "\r", "\u2028", "\x0c", " "], max_size=6), max_size=8
)


@given(_PIECES)
def test_the_splitter_gives_the_lines_str_splitlines_gives(pieces: list[str]) -> None:
    # The lines aiter_lines gave: those of the whole text, however it was cut.
    splitter = _LineSplitter()
    lines = [line for piece in pieces for line in splitter.feed(piece)]
    lines += splitter.flush()
    assert lines == "".join(pieces).splitlines()


class _Reads(httpx2.AsyncByteStream):
    def __init__(self, reads: list[bytes]) -> None:
        self._reads = reads
        self.read_to_end = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for read in self._reads:
            yield read
        self.read_to_end = True


class _Upstream(httpx2.AsyncBaseTransport):
    def __init__(self, reads: list[bytes]) -> None:
        self.body = _Reads(reads)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream"}, stream=self.body)


def _event(delta: dict[str, object], finish: str | None = None) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


async def _pieces(reads: list[bytes]) -> list[bytes]:
    transport = WireRepairTransport(_Upstream(reads))
    request = httpx2.Request("POST", "http://upstream.test/v1/chat/completions")
    response = await transport.handle_async_request(request)
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    try:
        return [piece async for piece in response.stream]
    finally:
        await response.stream.aclose()


async def test_each_read_reaches_the_client_as_one_piece_with_the_same_bytes() -> None:
    first, second, last = (
        _event({"content": "Hel"}),
        _event({"content": "lo"}),
        _event({}, "stop") + b"data: [DONE]\n\n",
    )
    # Two events in one read, one cut in the middle of its line.
    reads = [first + second[:20], second[20:], last]
    pieces = await _pieces(reads)
    assert b"".join(pieces) == first + second + last
    # The first read completes one event (two lines); the rest of its bytes
    # wait for the line's end.
    assert pieces == [first, second, last]


async def test_a_tool_call_split_over_reads_is_still_repaired() -> None:
    call: dict[str, object] = {
        "tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ""}}]
    }
    event = _event(call)
    pieces = await _pieces([event[:30], event[30:], _event({}, "tool_calls")])
    chunk = json.loads(b"".join(pieces).split(b"\n")[0][len(b"data: ") :])
    repaired = chunk["choices"][0]["delta"]["tool_calls"][0]
    assert repaired["type"] == "function" and repaired["id"].startswith("repaired-")


async def test_what_came_before_a_bad_event_reaches_the_client_before_the_error() -> None:
    good = _event({"content": "ok"})
    stream_pieces: list[bytes] = []
    transport = WireRepairTransport(_Upstream([good + b"data: {not json\n\n"]))
    request = httpx2.Request("POST", "http://upstream.test/v1/chat/completions")
    response = await transport.handle_async_request(request)
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    with pytest.raises(UnparseableResponseError, match="not JSON"):
        async for piece in response.stream:
            stream_pieces.append(piece)
    assert stream_pieces == [good]


async def test_a_second_iteration_goes_on_where_the_first_stopped() -> None:
    # The OpenAI SDK stops reading events at [DONE], then iterates
    # response.stream again to read the body to its end, which HTTP/1.1 needs
    # to keep the connection. Starting over instead found the body consumed,
    # and every streamed call opened a new connection.
    reads = [_event({"content": "Hi"}), _event({}, "stop") + b"data: [DONE]\n\n", b": bye\n\n"]
    upstream = _Upstream(reads)
    transport = WireRepairTransport(upstream)
    request = httpx2.Request("POST", "http://upstream.test/v1/chat/completions")
    response = await transport.handle_async_request(request)
    assert isinstance(response.stream, httpx2.AsyncByteStream)
    first: list[bytes] = []
    async for piece in response.stream:
        first.append(piece)
        if b"[DONE]" in piece:
            break
    assert first == reads[:2]
    assert not upstream.body.read_to_end
    rest = [piece async for piece in response.stream]
    await response.stream.aclose()
    assert rest == [b": bye\n\n"]
    assert upstream.body.read_to_end
