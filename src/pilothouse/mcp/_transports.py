"""Opening the transport of one MCP session: stdio, streamable HTTP or SSE.

Each opener is an async context manager yielding the read and write streams
the SDK's client runs on; the pool enters and leaves it inside the session's
own task, as the SDK requires.
"""

from __future__ import annotations

__all__ = ["TransportFactory", "open_transport"]

import logging
import sys
import time
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pilothouse.catalog._enums import McpTransport
from pilothouse.mcp._config import McpClientConfig
from pilothouse.providers._egress import EgressPolicy

logger = logging.getLogger("pilothouse.mcp")

TransportFactory = Callable[[McpClientConfig], AbstractAsyncContextManager[TransportStreams]]
"""Opens the transport of one session from its config."""

_PYTHON_ALIASES = frozenset({"python", "python3"})


def open_transport(config: McpClientConfig) -> AbstractAsyncContextManager[TransportStreams]:
    """Open the transport a config names.

    Args:
        config: the MCP client.

    Returns:
        An async context manager yielding the session's streams.
    """
    if config.transport is McpTransport.STDIO:
        return _stdio(config)
    if config.transport is McpTransport.SSE:
        assert config.url is not None  # checked when the config was made
        if config.egress is None:
            return sse_client(config.url, headers=dict(config.headers))
        policy = config.egress

        def pinned_client(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            # Over SSE the GET stream carries the answers too, each one event,
            # which the SDK bounds (1 MiB); a total over the session would end
            # a healthy session after its sixteenth mebibyte of answers.
            return _pinned_client(
                policy, headers=headers, timeout=timeout, auth=auth, notifications=False
            )

        return sse_client(
            config.url, headers=dict(config.headers), httpx_client_factory=pinned_client
        )
    return _streamable_http(config)


def _pinned_client(
    policy: EgressPolicy,
    *,
    headers: dict[str, str] | None = None,
    timeout: httpx2.Timeout | None = None,
    auth: httpx2.Auth | None = None,
    notifications: bool,
) -> httpx2.AsyncClient:
    """The SDK's client (its timeouts), sending every request to an address ``policy`` checked.

    ``notifications``: count the ``GET`` stream as streamable HTTP's stream
    of notifications (see :class:`_Bounded`); one client serves one session.

    The transport is given when the client is made, so the client takes no
    proxy from the environment (``HTTP_PROXY``, ``HTTPS_PROXY``, ...): a
    proxy would get the request instead of the pinned transport, unchecked,
    and fetch a loopback or metadata URL on the service's behalf. Every
    other client the policy governs is made the same way.
    """
    from pilothouse.providers._egress_transport import PinnedTransport

    made = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
    kwargs: dict[str, Any] = {"timeout": made.timeout, "headers": made.headers}
    if auth is not None:
        kwargs["auth"] = auth
    transport = _Bounded(
        PinnedTransport(httpx2.AsyncHTTPTransport, policy), notifications=notifications
    )
    return httpx2.AsyncClient(**kwargs, follow_redirects=made.follow_redirects, transport=transport)


def _stdio(config: McpClientConfig) -> AbstractAsyncContextManager[TransportStreams]:
    assert config.command is not None  # checked when the config was made
    # "python" in a catalog means the interpreter pilothouse runs on, where
    # the server's package was installed; PATH may name another one.
    command = sys.executable if config.command in _PYTHON_ALIASES else config.command
    # The SDK starts the program with a minimal environment (PATH, HOME,
    # USER, ...) merged with ours: the parent's secrets are never inherited.
    parameters = StdioServerParameters(
        command=command, args=list(config.args), env=dict(config.env)
    )
    # The server's stderr goes to ours (looked up now, not at import time, so
    # a redirected stderr is honoured); it is the server's diagnostics channel.
    return stdio_client(parameters, errlog=sys.stderr)


@asynccontextmanager
async def _streamable_http(config: McpClientConfig) -> AsyncGenerator[TransportStreams, None]:
    assert config.url is not None  # checked when the config was made
    # The SDK takes headers only through a client we own, so we open and
    # close it around the transport.
    async with (
        (
            create_mcp_http_client(headers=dict(config.headers))
            if config.egress is None
            else _pinned_client(config.egress, headers=dict(config.headers), notifications=True)
        ) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


MAX_RESPONSE_BYTES = 16 * 1024 * 1024
"""The most one answer of a tenant's MCP server to a request of ours may hold.

The SDK reads an answer (a JSON body, or the events of one request's
stream) whole into memory before pilothouse sees it, so a server answering
without end would fill the process's memory; a result is cut to 1 MiB
anyway (:data:`pilothouse.mcp._tool.MAX_RESULT_BYTES`).
"""

MAX_NOTIFICATION_BYTES = 16 * 1024 * 1024
"""The most a tenant's MCP server may send unasked over one streamable HTTP session.

That is the long-lived ``GET`` stream of its notifications (tool list
changes, log lines). The bound is on the session's total, not per event:
the SDK already refuses an event over 1 MiB, but a server sending small
events without end would keep the process parsing them for as long as the
session lives, and a stream the server closes is opened again. Notifications
are small, so a well-behaved server stays far below 16 MiB; one past it has
its session closed, and the pool opens a new one when next asked, as after
an answer past :data:`MAX_RESPONSE_BYTES`.
"""


MAX_STREAM_OPENS = 20
"""How many times one session may open its notification stream within :data:`STREAM_OPENS_SECONDS`.

The SDK opens the ``GET`` stream again whenever the server ends it, after
the delay the server's ``retry:`` field names (a second when it names
none). A server that answers ``retry: 0`` and ends every stream at once
would have the process reconnect without pause, each time with a few bytes
only, far below :data:`MAX_NOTIFICATION_BYTES`. At the SDK's own delay a
session opens the stream at most ten times in ten seconds.
"""

STREAM_OPENS_SECONDS = 10.0
"""The window :data:`MAX_STREAM_OPENS` counts in."""


class _Bounded(httpx2.AsyncBaseTransport):
    """Bounds what one session's server sends: each answer, and its notifications in total.

    An answer to a ``POST`` past :data:`MAX_RESPONSE_BYTES` ends with a read
    error, which ends the session. The SDK reads the ``GET`` stream of
    notifications apart, reconnecting it after any error without ending the
    session; so past :data:`MAX_NOTIFICATION_BYTES` the transport refuses
    every later request of the session (but the ``DELETE`` that ends it),
    and the session's next request closes it. The same happens when the
    stream is opened more than :data:`MAX_STREAM_OPENS` times within
    :data:`STREAM_OPENS_SECONDS`.
    """

    def __init__(self, inner: httpx2.AsyncBaseTransport, *, notifications: bool) -> None:
        self._inner = inner
        self._notifications = notifications
        self.notified = 0
        self.closed = False
        # When the notification stream was last opened, oldest first.
        self._opens: deque[float] = deque(maxlen=MAX_STREAM_OPENS)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send the request; count what its answer's body holds."""
        if self.closed and request.method != "DELETE":
            raise httpx2.ReadError(
                "the MCP server's notification stream went past its bounds; its session was closed",
                request=request,
            )
        if request.method == "GET" and self._notifications:
            self._opening(request)
        response = await self._inner.handle_async_request(request)
        if request.method == "POST":
            stream: httpx2.AsyncByteStream = _CountedStream(response.stream, request)
        elif request.method == "GET" and self._notifications:
            stream = _NotificationStream(response.stream, request, self)
        else:
            return response
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=stream,
            request=request,
            extensions=response.extensions,
        )

    def _opening(self, request: httpx2.Request) -> None:
        """Note an opening of the notification stream; refuse one too soon after the others.

        Raises:
            httpx2.ReadError: the stream was opened :data:`MAX_STREAM_OPENS`
                times within the last :data:`STREAM_OPENS_SECONDS`; the
                session is closed.
        """
        now = time.monotonic()
        if len(self._opens) == MAX_STREAM_OPENS and now - self._opens[0] < STREAM_OPENS_SECONDS:
            self.closed = True
            logger.warning(
                "MCP server %s ended its notification stream %d times within %.0f s; "
                "the session was closed",
                request.url.host,
                MAX_STREAM_OPENS,
                STREAM_OPENS_SECONDS,
            )
            raise httpx2.ReadError(
                f"the MCP server ended its notification stream {MAX_STREAM_OPENS} times "
                f"within {STREAM_OPENS_SECONDS:.0f} s",
                request=request,
            )
        self._opens.append(now)

    async def aclose(self) -> None:
        """Close the inner transport."""
        await self._inner.aclose()


class _NotificationStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, request: httpx2.Request, session: _Bounded) -> None:
        self._inner = inner
        self._request = request
        self._session = session

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            # Counted on the transport: a reconnected stream goes on from the
            # total of the session, not from zero.
            self._session.notified += len(chunk)
            if self._session.notified > MAX_NOTIFICATION_BYTES:
                self._session.closed = True
                logger.warning(
                    "MCP server %s sent more than %d bytes of notifications; the stream "
                    "was dropped and the session closed",
                    self._request.url.host,
                    MAX_NOTIFICATION_BYTES,
                )
                raise httpx2.ReadError(
                    f"the MCP server's notifications hold more than {MAX_NOTIFICATION_BYTES} bytes",
                    request=self._request,
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _CountedStream(httpx2.AsyncByteStream):
    def __init__(self, inner: Any, request: httpx2.Request) -> None:
        self._inner = inner
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        read = 0
        async for chunk in self._inner:
            read += len(chunk)
            if read > MAX_RESPONSE_BYTES:
                # The SDK ends the session on a read error without saying why;
                # the operator reads it here.
                logger.warning(
                    "MCP server %s answered more than %d bytes; the answer was dropped "
                    "and the session closed",
                    self._request.url.host,
                    MAX_RESPONSE_BYTES,
                )
                raise httpx2.ReadError(
                    f"the MCP server's answer holds more than {MAX_RESPONSE_BYTES} bytes",
                    request=self._request,
                )
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()
