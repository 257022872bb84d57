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
            return _pinned_client(policy, headers=headers, timeout=timeout, auth=auth)

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
) -> httpx2.AsyncClient:
    """The SDK's client (its timeouts), sending every request to an address ``policy`` checked.

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
    transport = PinnedTransport(httpx2.AsyncHTTPTransport, policy)
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
            else _pinned_client(config.egress, headers=dict(config.headers))
        ) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams
