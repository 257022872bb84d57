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

Before the SDK sees a message posted to ``/mcp`` or ``/messages/``
(:class:`_Checked`): a body above ``max_body_bytes`` is read to its end
and answered 413 with a JSON-RPC error the client reports (not a reset
connection); a body that is not one JSON-RPC message is -32600 (or -32700
when it is not JSON) in words naming what is wrong; and a key may hold at
most ``mcp_max_sessions_per_key`` sessions (429 for one more), each closed
after ``mcp_session_idle_seconds`` without a request.

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

import hashlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.abc
import mcp_types as mt
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.sse import SseServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from pilothouse.errors import PilothouseError, UnauthorizedError
from pilothouse.server._deps import principal_from_request
from pilothouse.server._oauth import OAuthVerifier
from pilothouse.server._problems import error_problem
from pilothouse.types import McpCaller

if TYPE_CHECKING:
    from anyio.abc import TaskGroup
    from mcp.server import ServerRequestContext
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from pilothouse.api import McpService
    from pilothouse.server._state import ServerState

_CALLER = "pilothouse.mcp_caller"
"""The ASGI scope key the authentication leaves the caller under."""

BundleOf = Callable[[McpCaller, "Scope"], Awaitable[tuple[str, ...]]]
"""The tool patterns of the virtual server a request names, for its caller."""


def _caller(ctx: ServerRequestContext[Any, Any]) -> McpCaller:
    request = ctx.request
    caller = request.scope.get(_CALLER) if isinstance(request, Request) else None
    if not isinstance(caller, McpCaller):
        # Every route is authenticated first; a request without a caller
        # did not come through them.
        raise UnauthorizedError("an API key is required")
    return caller


class _Authenticated:
    """Authenticate a request by its API key (or an OAuth access token), then hand it on.

    Args:
        state: the service's state (keys, limits).
        app: the MCP transport.
        oauth: verifies access tokens, when the operator configured an
            authorization server.
        bundle: for a virtual server's path: the tools its caller may use
            there (raises NotFoundError for a server the tenant lacks).
    """

    def __init__(
        self,
        state: ServerState,
        app: ASGIApp,
        oauth: OAuthVerifier | None = None,
        bundle: BundleOf | None = None,
    ) -> None:
        self._state = state
        self._app = app
        self._oauth = oauth
        self._bundle = bundle

    async def _refuse(
        self, exc: PilothouseError, scope: Scope, receive: Receive, send: Send
    ) -> None:
        problem = error_problem(exc)
        if self._oauth is not None and isinstance(exc, UnauthorizedError):
            # RFC 9728: the client learns where to get a token from here.
            host = next(
                (v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "localhost"
            )
            metadata = f"{scope.get('scheme', 'http')}://{host}{METADATA_PATH}"
            problem.headers = {
                **(problem.headers or {}),
                "WWW-Authenticate": f'Bearer resource_metadata="{metadata}"',
            }
        await problem.response()(scope, receive, send)

    async def _token_caller(self, token: str, headers: dict[str, str]) -> McpCaller:
        """The caller of an OAuth access token, after the rate limit of its subject."""
        from pilothouse.errors import TooManyRequestsError

        assert self._oauth is not None
        verified = await self._oauth.verify(token)
        # Recorded where a key's prefix goes (32 characters): a digest of
        # the subject, stable per subject; the subject itself is the name.
        digest = hashlib.sha256(verified.subject.encode()).hexdigest()[:26]
        who = f"oauth:{digest}"
        wait = await self._state.limiter.acquire(who)
        if wait is not None:
            raise TooManyRequestsError(
                f"the rate limit of {self._state.limiter.per_minute} requests a minute for "
                "this token's subject is exhausted; retry later",
                retry_after=wait,
            )
        return McpCaller.from_scopes(
            verified.tenant, who, list(verified.scopes), headers, key_name=verified.subject[:128]
        )

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
        presented = headers.pop("x-api-key", None)
        headers.pop("cookie", None)
        bearer = _bearer(scope) if presented is None else None
        try:
            if self._oauth is not None and bearer is not None and not _is_api_key(bearer):
                caller = await self._token_caller(bearer, headers)
            else:
                principal = await principal_from_request(Request(checked, receive), self._state)
                caller = McpCaller.from_scopes(
                    principal.tenant,
                    principal.key_prefix,
                    sorted(principal.scopes),
                    headers,
                    key_name=principal.key_name,
                )
            if self._bundle is not None:
                caller = replace(caller, bundle=await self._bundle(caller, scope))
        except PilothouseError as exc:
            await self._refuse(exc, scope, receive, send)
            return
        scope[_CALLER] = caller
        # The SDK binds a session to the credential that opened it: another
        # key (or token subject) presenting the session id is answered as if
        # it did not exist.
        assert caller.key_prefix is not None
        token = AccessToken(
            token=caller.key_prefix,
            client_id=caller.key_prefix,
            scopes=sorted(caller.allowed_tools or ()),
        )
        scope["user"] = AuthenticatedUser(token)
        await self._app(scope, receive, send)


METADATA_PATH = "/.well-known/oauth-protected-resource"
"""Where the MCP endpoint's protected-resource metadata is published (RFC 9728)."""


def _bearer(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name.lower() == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            if kind.lower() == "bearer" and token.strip():
                return token.strip()
    return None


def _is_api_key(token: str) -> bool:
    # pilothouse keys read ph_<prefix>_<secret>; a JWT is three dotted parts.
    return token.startswith("ph_") or token.count(".") != 2


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

        def manager() -> StreamableHTTPSessionManager:
            return StreamableHTTPSessionManager(
                app=self.service.server,
                security_settings=security,
                max_request_body_size=settings.max_body_bytes or 4 * 1024 * 1024,
                session_idle_timeout=settings.mcp_session_idle_seconds,
            )

        self.sessions = manager()
        self._manager = manager
        # Virtual servers: one session manager per code (a session belongs
        # to the path it was opened at), over the one MCP server; made on
        # the first request a tenant's catalog answers for that code.
        self.virtual: dict[str, _Checked] = {}
        self._virtual_lock = anyio.Lock()
        self._group: TaskGroup | None = None
        self.sse = SseServerTransport("/messages/", security_settings=security)
        self._state = state
        self.oauth: OAuthVerifier | None = None
        if settings.oauth_issuer and settings.oauth_jwks_url and settings.oauth_audience:
            self.oauth = OAuthVerifier(
                settings.oauth_issuer, settings.oauth_jwks_url, settings.oauth_audience
            )

    async def _metadata(self, request: Request) -> Response:
        from starlette.responses import JSONResponse

        del request  # one document for every caller
        if self.oauth is None:
            return JSONResponse(
                {"title": "Not Found", "status": 404, "detail": "no authorization server is set"},
                status_code=404,
                media_type="application/problem+json",
            )
        return JSONResponse(self.oauth.metadata())

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
        settings = state.server
        return [
            Route(
                "/mcp",
                endpoint=_Authenticated(
                    state,
                    _Checked(
                        self.sessions.handle_request,
                        settings.max_body_bytes,
                        self.sessions,
                        settings.mcp_max_sessions_per_key,
                        settings.mcp_session_idle_seconds,
                    ),
                    self.oauth,
                ),
                methods=["GET", "POST", "DELETE"],
            ),
            Route("/sse", endpoint=_Authenticated(state, self._sse, self.oauth), methods=["GET"]),
            Route(
                "/messages/",
                endpoint=_Authenticated(
                    state,
                    _Checked(self.sse.handle_post_message, settings.max_body_bytes),
                    self.oauth,
                ),
                methods=["POST"],
            ),
            Route(
                "/mcp/{server}",
                endpoint=_Authenticated(state, self._virtual, self.oauth, self._bundle),
                methods=["GET", "POST", "DELETE"],
            ),
            Route(METADATA_PATH, endpoint=self._metadata, methods=["GET"]),
            Route(f"{METADATA_PATH}/mcp", endpoint=self._metadata, methods=["GET"]),
        ]

    async def _bundle(self, caller: McpCaller, scope: Scope) -> tuple[str, ...]:
        code = str(scope.get("path_params", {}).get("server", ""))
        return await self.service.virtual_server(caller.tenant, code)

    async def _virtual(self, scope: Scope, receive: Receive, send: Send) -> None:
        code = str(scope.get("path_params", {}).get("server", ""))
        async with self._virtual_lock:
            checked = self.virtual.get(code)
            if checked is None:
                # Only a code the caller's catalog holds gets here (the
                # bundle was read first), so the managers stay as many as
                # the codes the catalogs use.
                assert self._group is not None, "the MCP transports are not running"
                sessions = self._manager()
                await self._group.start(_run_sessions, sessions)
                settings = self._state.server
                checked = _Checked(
                    sessions.handle_request,
                    settings.max_body_bytes,
                    sessions,
                    settings.mcp_max_sessions_per_key,
                    settings.mcp_session_idle_seconds,
                )
                self.virtual[code] = checked
        await checked(scope, receive, send)

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Run the session managers and the list_changed watcher for the app's lifetime."""
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.sessions.run())
            await stack.enter_async_context(self.service.running())
            group = await stack.enter_async_context(anyio.create_task_group())
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()


async def _run_sessions(
    sessions: StreamableHTTPSessionManager,
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run one virtual server's session manager until the transports stop."""
    async with sessions.run():
        task_status.started()
        await anyio.sleep_forever()


# An oversize body is read to its end (so the client, still sending, can
# read the 413) up to this many times the limit; past that the connection
# is closed unread.
_DRAIN_FACTOR = 8


def _envelope_problem(message: Any) -> str | None:
    """Why ``message`` is not one JSON-RPC 2.0 message, in words (None: it is one)."""
    from mcp_types import jsonrpc_message_adapter
    from pydantic import ValidationError

    if isinstance(message, list):
        return "send one JSON-RPC message per request (batches are not part of MCP)"
    if not isinstance(message, dict):
        return "the body must be a JSON-RPC 2.0 object with jsonrpc, method and id"
    body = cast("dict[str, Any]", message)
    try:
        jsonrpc_message_adapter.validate_python(body, by_name=False)
    except ValidationError:
        pass
    else:
        return None
    if body.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in body and (
        isinstance(body["id"], bool) or not isinstance(body["id"], str | int | None)
    ):
        return "id must be a string or an integer"
    if "method" in body:
        if not isinstance(body["method"], str):
            return "method must be a string naming the MCP method, e.g. tools/list"
        if "params" in body and not isinstance(body["params"], dict):
            return "params must be an object"
        return "not a JSON-RPC request or notification"
    if "result" in body or "error" in body:
        return "a response needs an id and exactly one of result or error"
    return "method is required (a string naming the MCP method, e.g. tools/list)"


def _rpc_error(status: int, code: int, message: str, ident: Any = None) -> Response:
    """A JSON-RPC error body at an HTTP status; the SDK's client reports its message."""
    from starlette.responses import JSONResponse

    if isinstance(ident, bool) or not isinstance(ident, str | int):
        ident = None
    body = {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


async def _read_body(receive: Receive, limit: int) -> tuple[bytes, int, bool]:
    """Read a request body: its bytes up to ``limit``, its size, whether it ended.

    Past ``limit`` the bytes are counted and dropped, up to ``_DRAIN_FACTOR``
    times the limit.
    """
    kept = bytearray()
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(kept), size, False
        chunk = cast("bytes", message.get("body", b""))
        size += len(chunk)
        if size <= limit:
            kept.extend(chunk)
        if not message.get("more_body", False):
            return bytes(kept), size, True
        if size > limit * _DRAIN_FACTOR:
            return b"", size, False


class _Checked:
    """Check what the SDK would take badly: body size, envelope, sessions per key.

    Args:
        app: the SDK's transport.
        max_bytes: the largest body (0: the SDK's own 4 MiB).
        sessions: the streamable HTTP session manager (its sessions are
            counted per key); None for the SSE transport's posts.
        per_key: the most sessions one key may hold open.
        idle_seconds: named in the refusal (when sessions expire).
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        sessions: StreamableHTTPSessionManager | None = None,
        per_key: int = 100,
        idle_seconds: float = 1800.0,
    ) -> None:
        self._app = app
        self._max = max_bytes or 4 * 1024 * 1024
        self._sessions = sessions
        self._per_key = per_key
        self._idle = idle_seconds
        self._opening: dict[str, int] = {}

    def _open_sessions(self, key: str) -> int:
        # The SDK keeps each session's owner privately; its count is the
        # truth (sessions it closed on idle are gone from it).
        owners = cast(
            "Mapping[str, Mapping[str, Any]]", getattr(self._sessions, "_session_owners", {})
        )
        return sum(1 for owner in owners.values() if owner.get("client_id") == key)

    def _opens_session(self, scope: Scope) -> bool:
        from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

        if self._sessions is None or scope.get("method") != "POST":
            return False
        headers = {k.lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if b"mcp-session-id" in headers:
            return False
        version = headers.get(b"mcp-protocol-version")
        return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        body, size, ended = await _read_body(receive, self._max)
        if size > self._max:
            refusal = _rpc_error(
                413,
                mt.INVALID_REQUEST,
                f"the request body ({size} bytes or more) exceeds the limit of {self._max} "
                "bytes (HTTP 413); send smaller arguments",
            )
            await refusal(scope, receive, send)
            return
        if not ended:
            return  # the client went away mid-body
        try:
            message = json.loads(body)
        except (ValueError, RecursionError):
            refusal = _rpc_error(400, mt.PARSE_ERROR, "Parse error: the body is not JSON")
            await refusal(scope, receive, send)
            return
        problem = _envelope_problem(message)
        if problem is not None:
            ident = cast("dict[str, Any]", message).get("id") if isinstance(message, dict) else None
            refusal = _rpc_error(400, mt.INVALID_REQUEST, f"Invalid Request: {problem}", ident)
            await refusal(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if not self._opens_session(scope):
            await self._app(scope, replay, send)
            return
        caller = scope.get(_CALLER)
        key = caller.key_prefix if isinstance(caller, McpCaller) else None
        if key is None:
            await self._app(scope, replay, send)
            return
        if self._open_sessions(key) + self._opening.get(key, 0) >= self._per_key:
            refusal = _rpc_error(
                429,
                mt.INVALID_REQUEST,
                f"this API key holds {self._per_key} open MCP sessions, the most it may: "
                f"close one (DELETE /mcp with its Mcp-Session-Id) or wait until an idle one "
                f"closes after {self._idle:g} s",
                cast("dict[str, Any]", message).get("id"),
            )
            await refusal(scope, receive, send)
            return
        self._opening[key] = self._opening.get(key, 0) + 1
        try:
            await self._app(scope, replay, send)
        finally:
            self._opening[key] -= 1
            if not self._opening[key]:
                del self._opening[key]


def mcp_routes(state: ServerState) -> tuple[list[Route], McpHttp]:
    """Return the MCP routes of ``state``'s service and what runs them."""
    http = McpHttp(state)
    return http.routes(), http
