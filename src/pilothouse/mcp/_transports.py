"""Opening the transport of one MCP session: stdio, streamable HTTP or SSE.

Each opener is an async context manager yielding the read and write streams
the SDK's client runs on; the pool enters and leaves it inside the session's
own task, as the SDK requires.
"""

from __future__ import annotations

__all__ = ["TransportFactory", "open_transport"]

import sys
from collections.abc import AsyncGenerator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pilothouse.catalog._enums import McpTransport
from pilothouse.mcp._config import McpClientConfig
from pilothouse.providers._egress import EgressPolicy

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
            client = create_mcp_http_client(headers=headers, timeout=timeout, auth=auth)
            return _pinned(client, policy)

        return sse_client(
            config.url, headers=dict(config.headers), httpx_client_factory=pinned_client
        )
    return _streamable_http(config)


def _pinned(client: httpx2.AsyncClient, policy: EgressPolicy) -> httpx2.AsyncClient:
    """``client`` with its transport replaced by one pinned to checked addresses."""
    from pilothouse.providers._egress_transport import PinnedTransport

    # The SDK's factory sets headers, timeouts and redirects; only where the
    # connection goes changes (every request is checked, redirects too).
    client._transport = PinnedTransport(httpx2.AsyncHTTPTransport, policy)  # pyright: ignore[reportPrivateUsage]
    return client


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
            else _pinned(create_mcp_http_client(headers=dict(config.headers)), config.egress)
        ) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams
