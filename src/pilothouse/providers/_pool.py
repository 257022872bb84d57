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

Every pool's connections send a request's head and body in one system call
(:class:`CoalescingBackend`): httpcore writes them separately, and each
``send`` is dear: on loopback the kernel delivers the segment to the reader
within the sender's call, about 150 µs of CPU on the benchmark machine,
3–5 % of a governed turn (``docs/benchmarks.md``, 2026-11-29).
"""

from __future__ import annotations

__all__ = ["CoalescingBackend", "ShardedTransport", "provider_transport"]

import socket
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, cast

import httpcore2
import httpx2

# httpcore's own idle check, not exported: the idle test in
# tests/providers/test_provider_sends.py fails if it moves or answers wrongly.
from httpcore2._utils import is_socket_readable

_CONNECTIONS_PER_SHARD = 64
"""Connections below which one more pool is not worth its warm-up."""
_MAX_SHARDS = 16


def provider_transport(
    max_connections: int, ssl_context: ssl.SSLContext | None = None
) -> httpx2.AsyncBaseTransport:
    """Return the transport for one provider's HTTP client.

    Args:
        max_connections: connections the client may open (and keep alive).
        ssl_context: the TLS settings (certificates trusted); by default
            httpx's, from the system's CA bundle.

    Returns:
        A plain ``AsyncHTTPTransport`` for small limits, otherwise a
        :class:`ShardedTransport` of up to 16 pools of at least 64
        connections each.
    """
    shards = max(1, min(_MAX_SHARDS, max_connections // _CONNECTIONS_PER_SHARD))
    if shards == 1:
        return _http_transport(max_connections, ssl_context or httpx2.create_ssl_context())
    return ShardedTransport(max_connections=max_connections, shards=shards, ssl_context=ssl_context)


def _http_transport(connections: int, ssl_context: ssl.SSLContext) -> httpx2.AsyncHTTPTransport:
    """One pool of ``connections`` HTTP/1.1 connections whose requests leave in one send."""
    limits = _limits(connections)
    transport = httpx2.AsyncHTTPTransport(verify=ssl_context, limits=limits)
    # httpx2's transport takes no network backend; its pool is replaced by
    # the same pool (its own defaults: HTTP/1.1 only, no proxy, as ours) with
    # one. tests/providers/test_provider_sends.py fails if the swap stops
    # reaching the connections.
    transport._pool = httpcore2.AsyncConnectionPool(  # pyright: ignore[reportPrivateUsage]
        ssl_context=ssl_context,
        max_connections=connections,
        max_keepalive_connections=connections,
        keepalive_expiry=limits.keepalive_expiry,
        http1=True,
        http2=False,
        network_backend=CoalescingBackend(),
    )
    return transport


def _limits(connections: int) -> httpx2.Limits:
    return httpx2.Limits(max_connections=connections, max_keepalive_connections=connections)


_COALESCED_AT_MOST = 64 * 1024
"""Bytes above which a write is not copied to join the held one (a big upload
costs more to copy than the system call it would save)."""


class CoalescingBackend(httpcore2.AsyncNetworkBackend):
    """Connects through ``inner``; its streams send a request's head with its body.

    httpcore's HTTP/1.1 connection writes a request's head and then its body,
    two ``send`` calls and two TCP segments. Each stream here holds a write
    until the next write or read: a second write leaves joined to the held
    one, a read first sends what is held (a request is always followed by a
    read of its response, so nothing waits unsent). HTTP/1.1 only, as the
    pools here are built: an HTTP/2 connection reads and writes from several
    tasks at once, so a held write could wait behind a read already blocked.

    Args:
        inner: the backend that opens the connections (anyio's by default).
    """

    def __init__(self, inner: httpcore2.AsyncNetworkBackend | None = None) -> None:
        # httpcore2 declares a stand-in AnyIOBackend when anyio is missing
        # (it never is: pilothouse depends on it), which its type hides.
        self._inner: httpcore2.AsyncNetworkBackend = inner or cast(
            httpcore2.AsyncNetworkBackend, httpcore2.AnyIOBackend()
        )

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Open a TCP connection whose writes are coalesced."""
        stream = await self._inner.connect_tcp(
            host,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )
        return _CoalescingStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        """Open a Unix socket connection whose writes are coalesced."""
        stream = await self._inner.connect_unix_socket(
            path, timeout=timeout, socket_options=socket_options
        )
        return _CoalescingStream(stream)

    async def sleep(self, seconds: float) -> None:
        """Sleep as the inner backend does (httpcore's connect retries)."""
        await self._inner.sleep(seconds)


class _CoalescingStream(httpcore2.AsyncNetworkStream):
    """A network stream that holds one write until the next write or read."""

    def __init__(self, inner: httpcore2.AsyncNetworkStream) -> None:
        self._inner = inner
        self._held: bytes | None = None
        self._held_timeout: float | None = None
        self._socket: socket.socket | None = None

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        held = self._held
        if held is None:
            self._held, self._held_timeout = buffer, timeout
            return
        self._held = None
        if len(buffer) > _COALESCED_AT_MOST:
            await self._inner.write(held, self._held_timeout)
            await self._inner.write(buffer, timeout)
        else:
            await self._inner.write(held + buffer, timeout)

    async def _send_held(self) -> None:
        held = self._held
        if held is not None:
            self._held = None
            await self._inner.write(held, self._held_timeout)

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        await self._send_held()
        return await self._inner.read(max_bytes, timeout)

    async def aclose(self) -> None:
        # Closing ends the exchange: a held write has no reader to answer it.
        self._held = None
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        await self._send_held()  # a proxy's CONNECT, say: sent before the handshake
        return _CoalescingStream(await self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # httpcore asks twice a request whether an idle connection was
            # closed by its server; anyio answers by building its socket's
            # attributes, the peer's address looked up by a system call
            # (9 µs a time), so the socket is looked up once.
            if self._socket is None:
                self._socket = self._inner.get_extra_info("socket")
            # httpcore's own check on it, so the answer is the one it gives.
            return is_socket_readable(self._socket)
        return self._inner.get_extra_info(info)


class ShardedTransport(httpx2.AsyncBaseTransport):
    """Several ``AsyncHTTPTransport`` pools behind one transport.

    Args:
        max_connections: the limit of all pools together.
        shards: how many pools share it.
        ssl_context: the TLS settings of every pool; by default httpx's.
    """

    def __init__(
        self, *, max_connections: int, shards: int, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        if shards < 1 or max_connections < shards:
            raise ValueError("need at least one pool and one connection per pool")
        # One TLS context for every pool: building one loads the CA bundle.
        ssl_context = ssl_context or httpx2.create_ssl_context()
        share, extra = divmod(max_connections, shards)
        self._pools = [
            _http_transport(share + (1 if i < extra else 0), ssl_context) for i in range(shards)
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
