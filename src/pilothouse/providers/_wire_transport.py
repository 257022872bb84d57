"""The HTTP transport that repairs chat completions on the wire (see ``_wire``).

Kept apart from ``_wire`` so that the run loop, which only collects the
notes, does not import the HTTP client.
"""

from __future__ import annotations

__all__ = ["WireRepairTransport"]

from collections.abc import AsyncIterator, Callable

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
    def __init__(self, upstream: httpx2.Response, repair: _Stream) -> None:
        self._upstream = upstream
        self._repair = repair

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in self._repair(self._upstream.aiter_lines()):
            yield piece

    async def aclose(self) -> None:
        await self._upstream.aclose()
