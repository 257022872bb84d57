"""The provider HTTP transport: several connection pools, so a pool's walk stays short.

httpcore's connection pool walks every connection it holds each time a
request is queued or finished: it drops closed ones, expires idle ones (an
idle connection's check polls its socket, a system call or two) and assigns
waiting requests. That is cheap for ten connections and expensive for the
hundreds a busy deployment keeps open to one provider: with 500 requests in
flight the walk was the largest single cost of a turn (``docs/benchmarks.md``,
scenario 2). :class:`ShardedTransport` splits the connection limit over a few
independent pools and sends each request to the pool with the fewest
requests in flight, so each walk covers a fraction of the connections. At
low load every request goes to the first pool, which keeps its connections
warm as a single pool would.
"""

from __future__ import annotations

__all__ = ["ShardedTransport", "provider_transport"]

from collections.abc import AsyncIterator, Callable

import httpx2

_CONNECTIONS_PER_SHARD = 64
"""Connections below which one more pool is not worth its warm-up."""
_MAX_SHARDS = 16


def provider_transport(max_connections: int) -> httpx2.AsyncBaseTransport:
    """Return the transport for one provider's HTTP client.

    Args:
        max_connections: connections the client may open (and keep alive).

    Returns:
        A plain ``AsyncHTTPTransport`` for small limits, otherwise a
        :class:`ShardedTransport` of up to 16 pools of at least 64
        connections each.
    """
    shards = max(1, min(_MAX_SHARDS, max_connections // _CONNECTIONS_PER_SHARD))
    if shards == 1:
        return httpx2.AsyncHTTPTransport(limits=_limits(max_connections))
    return ShardedTransport(max_connections=max_connections, shards=shards)


def _limits(connections: int) -> httpx2.Limits:
    return httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)


class ShardedTransport(httpx2.AsyncBaseTransport):
    """Several ``AsyncHTTPTransport`` pools behind one transport.

    Args:
        max_connections: the limit of all pools together.
        shards: how many pools share it.
    """

    def __init__(self, *, max_connections: int, shards: int) -> None:
        if shards < 1 or max_connections < shards:
            raise ValueError("need at least one pool and one connection per pool")
        # One TLS context for every pool: building one loads the CA bundle.
        ssl_context = httpx2.create_ssl_context()
        share, extra = divmod(max_connections, shards)
        self._pools = [
            httpx2.AsyncHTTPTransport(
                verify=ssl_context, limits=_limits(share + (1 if i < extra else 0))
            )
            for i in range(shards)
        ]
        self._in_flight = [0] * shards

    @property
    def in_flight(self) -> list[int]:
        """Requests in flight per pool: sent and not yet closed."""
        return list(self._in_flight)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send ``request`` through the pool with the fewest requests in flight."""
        counts = self._in_flight
        index = counts.index(min(counts))
        counts[index] += 1
        try:
            response = await self._pools[index].handle_async_request(request)
        except BaseException:
            counts[index] -= 1
            raise
        # The request stays in flight until its body is read or closed: a
        # streamed answer holds its connection until then.
        response.stream = _Released(response.stream, lambda: self._release(index))
        return response

    def _release(self, index: int) -> None:
        self._in_flight[index] -= 1

    async def aclose(self) -> None:
        """Close every pool."""
        for pool in self._pools:
            await pool.aclose()


class _Released(httpx2.AsyncByteStream):
    """A response body that tells its transport, once, when it is closed."""

    def __init__(
        self, stream: httpx2.SyncByteStream | httpx2.AsyncByteStream, release: Callable[[], None]
    ) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        assert isinstance(self._stream, httpx2.AsyncByteStream)
        async for chunk in self._stream:
            yield chunk

    async def aclose(self) -> None:
        try:
            if isinstance(self._stream, httpx2.AsyncByteStream):
                await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()
