"""The MCP server's HTTP transports: streamable HTTP at ``/mcp``, SSE at ``/sse``.

Both are the official ``mcp`` SDK's transports over the server of
:meth:`pilothouse.api.Pilothouse.mcp_service`:

- ``/mcp``: :class:`~mcp.server.streamable_http_manager.StreamableHTTPSessionManager`
  in session mode. A client speaking the current protocol (2026-07-28:
  ``MCP-Protocol-Version`` on every request, no session) is answered
  statelessly; a client of the handshake protocols (2025-11-25 and older)
  gets an ``Mcp-Session-Id`` session, bound to the key that opened it.
- ``/sse`` (the event stream) and ``/messages/`` (where the client posts):
  the SDK's SSE transport, for older clients.

Every request of the three routes is authenticated like the REST API
(``Authorization: Bearer <key>`` or ``X-API-Key``, the per-key rate limit,
failures by address): a refused one is a problem document (401 with
``WWW-Authenticate``, 429 with ``Retry-After``) before any MCP processing. A
key's ``mcp:tool:<glob>`` scopes are its tool allow-list. On a loopback bind
the SDK's DNS-rebinding protection accepts only loopback ``Host`` and
``Origin`` headers.
"""

from __future__ import annotations

__all__ = ["McpHttp", "mcp_routes"]

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route

from pilothouse.errors import PilothouseError, UnauthorizedError
from pilothouse.server._deps import principal_from_request
from pilothouse.server._problems import error_problem
from pilothouse.types import McpCaller

if TYPE_CHECKING:
    from mcp.server import ServerRequestContext
    from starlette.types import ASGIApp, Receive, Scope, Send

    from pilothouse.api import McpService
    from pilothouse.server._state import ServerState

_CALLER = "pilothouse.mcp_caller"
"""The ASGI scope key the authentication leaves the caller under."""


def _caller(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
    request = ctx.request
    caller = request.scope.get(_CALLER) if isinstance(request, Request) else None
    if not isinstance(caller, McpCaller):
        # Every route is authenticated first; a request without a caller
        # did not come through them.
        raise UnauthorizedError("an API key is required")
    return caller


class _Authenticated:
    """Authenticate a request by its API key, then hand it to the MCP transport."""

    def __init__(self, state: ServerState, app: ASGIApp) -> None:
        self._state = state
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        checked = scope
        if "x-api-key" in headers:
            # The key came in X-API-Key: Authorization is the caller's own
            # identity (for a gateway to pass through), not a pilothouse key.
            checked = {
                **scope,
                "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"authorization"],
            }
        else:
            # The key came as the bearer token: it is the gateway's own
            # credential and is never passed on.
            headers.pop("authorization", None)
        headers.pop("x-api-key", None)
        headers.pop("cookie", None)
        try:
            principal = await principal_from_request(Request(checked, receive), self._state)
        except PilothouseError as exc:
            await error_problem(exc).response()(scope, receive, send)
            return
        scope[_CALLER] = McpCaller.from_scopes(
            principal.tenant,
            principal.key_prefix,
            sorted(principal.scopes),
            headers,
            key_name=principal.key_name,
        )
        # The SDK binds a session to the credential that opened it: another
        # key presenting the session id is answered as if it did not exist.
        token = AccessToken(
            token=principal.key_prefix,
            client_id=principal.key_prefix,
            scopes=sorted(principal.scopes),
        )
        scope["user"] = AuthenticatedUser(token)
        await self._app(scope, receive, send)


class McpHttp:
    """The MCP transports of one HTTP service and their lifetime.

    Args:
        state: the service's shared state (its facade, keys and settings).
    """

    def __init__(self, state: ServerState) -> None:
        settings = state.server
        self.service: McpService = state.pilothouse.mcp_service(
            _caller,
            max_tools=settings.mcp_max_tools,
            list_changed_seconds=settings.mcp_list_changed_seconds,
        )
        security = None
        if settings.is_loopback:
            security = TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
            )
        self.sessions = StreamableHTTPSessionManager(
            app=self.service.server,
            security_settings=security,
            max_request_body_size=settings.max_body_bytes or 4 * 1024 * 1024,
        )
        self.sse = SseServerTransport("/messages/", security_settings=security)
        self._state = state

    async def _sse(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with self.sse.connect_sse(scope, receive, send) as (read, write):
                await self.service.server.run(read, write, self.service.initialization_options())
        except ValueError:
            # The transport refused the request (Host/Origin) and answered it.
            return

    def routes(self) -> list[Route]:
        """The three routes, each behind the API key check."""
        state = self._state
        return [
            Route(
                "/mcp",
                endpoint=_Authenticated(state, self.sessions.handle_request),
                methods=["GET", "POST", "DELETE"],
            ),
            Route("/sse", endpoint=_Authenticated(state, self._sse), methods=["GET"]),
            Route(
                "/messages/",
                endpoint=_Authenticated(state, self.sse.handle_post_message),
                methods=["POST"],
            ),
        ]

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Run the session manager and the list_changed watcher for the app's lifetime."""
        async with self.sessions.run(), self.service.running():
            yield


def mcp_routes(state: ServerState) -> tuple[list[Route], McpHttp]:
    """Return the MCP routes of ``state``'s service and what runs them."""
    http = McpHttp(state)
    return http.routes(), http
