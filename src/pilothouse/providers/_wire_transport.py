"""The HTTP transport that repairs chat completions on the wire (see ``_wire``).

Kept apart from ``_wire`` so that the run loop, which only collects the
notes, does not import the HTTP client.
"""

from __future__ import annotations

__all__ = ["WireRepairTransport"]

from collections.abc import AsyncIterator

import httpx2

from pilothouse.providers._wire import repair_completion, repair_stream


def _is_chat_completion(request: httpx2.Request) -> bool:
    return request.method == "POST" and request.url.path.endswith("/chat/completions")


class WireRepairTransport(httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that repairs chat completions before the SDK reads them.

    Only successful ``POST .../chat/completions`` answers are touched; every
    other request and every error answer passes through unchanged.

    Args:
        inner: the transport that sends the requests.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send the request; repair the answer of a chat completion."""
        response = await self._inner.handle_async_request(request)
        if not _is_chat_completion(request) or response.status_code != 200:
            return response
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
                stream=_RepairedStream(upstream),
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
            content=repair_completion(body),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


class _RepairedStream(httpx2.AsyncByteStream):
    def __init__(self, upstream: httpx2.Response) -> None:
        self._upstream = upstream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in repair_stream(self._upstream.aiter_lines()):
            yield piece

    async def aclose(self) -> None:
        await self._upstream.aclose()
