"""FastAPI dependencies every router shares: state, authentication, tenant facade, problems.

This module is the contract between the service's routers (REST, OpenAI-
compatible, connector, JSON-RPC): a route declares what it needs and gets it
checked the same way everywhere.

Example:
    ```python
    @router.get("/v1/things")
    async def things(ph: Annotated[Pilothouse, Depends(get_facade)]) -> list[str]:
        return [a.code for a in await ph.query.get_all_actions()]
    ```

Authentication accepts ``Authorization: Bearer <key>`` or ``X-API-Key:
<key>``. An unknown, malformed or revoked key raises
:class:`~pilothouse.errors.UnauthorizedError`, a key over its rate
:class:`~pilothouse.errors.TooManyRequestsError`, a key without the admin
scope where one is needed :class:`~pilothouse.errors.ForbiddenError`; each
face answers them by its own error map (401, 429 with ``Retry-After``, 403
for REST). The key itself is never
logged or echoed. A verified key is trusted for
``ServerSettings.key_cache_seconds`` without another read (see
:class:`~pilothouse.server._keys.KeyCache`).
"""

from __future__ import annotations

__all__ = [
    "AdminFacade",
    "AdminPrincipal",
    "admit_key",
    "Authenticated",
    "CheckedJsonRoute",
    "Facade",
    "Principal",
    "State",
    "authenticate",
    "charge_batch",
    "get_admin_facade",
    "get_facade",
    "get_state",
    "principal_from_key",
    "principal_from_request",
    "require_admin",
]

import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.routing import APIRoute
from starlette.responses import Response

from pilothouse.api import Pilothouse, loads_json
from pilothouse.errors import ForbiddenError, TooManyRequestsError, UnauthorizedError
from pilothouse.server._state import ServerState
from pilothouse.types import ADMIN_SCOPE, Caller, KeyInfo

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the tenant an API key belongs to and what it may do.

    Attributes:
        tenant: every read and write of the request is scoped to it.
        key_prefix: the key's public prefix (safe to log; the key is not).
        scopes: e.g. ``{"admin"}`` for catalog writes.
        key_name: the key's name (its label), for the record.
    """

    tenant: str
    key_prefix: str
    scopes: frozenset[str]
    key_name: str | None = None

    def caller(self, face: str) -> Caller:
        """Who this is, calling through ``face``, as conversations record it."""
        return Caller(face, self.key_prefix, self.key_name or None)

    @property
    def is_admin(self) -> bool:
        """Whether the key may change the catalog."""
        return ADMIN_SCOPE in self.scopes


# The dependencies are ``async def`` though they never wait: FastAPI runs a
# plain ``def`` dependency in a worker thread, a hand-off to a thread and back
# on every request for a function that returns at once.


async def get_state(request: Request) -> ServerState:
    """Return the app's :class:`ServerState` (set by :func:`create_app`)."""
    state: ServerState = request.app.state.pilothouse
    return state


State = Annotated[ServerState, Depends(get_state)]
"""A route parameter receiving the server state."""


def _presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is not None:
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get("x-api-key")
    return key.strip() if key else None


async def _count_auth_failure(request: Request, state: ServerState) -> None:
    """Count a request without a valid key against its client address.

    Raises:
        TooManyRequestsError: the address has failed too often this minute.
    """
    address = request.client.host if request.client is not None else "unknown"
    wait = await state.auth_failures.acquire(f"address:{address}")
    if wait is not None:
        raise TooManyRequestsError(
            f"too many requests without a valid API key from this address (the limit is "
            f"{state.auth_failures.per_minute} a minute); retry later",
            retry_after=wait,
        )


async def charge_batch(request: Request, extra_calls: int) -> None:
    """Count a batch's further calls against the key's rate limit (after its first).

    Raises:
        TooManyRequestsError: the key has not that many requests left this
            minute; nothing of the batch runs.
    """
    if extra_calls <= 0:
        return
    state: ServerState = request.app.state.pilothouse
    principal: Principal = request.state.principal
    wait = await state.limiter.acquire(principal.key_prefix, cost=extra_calls)
    if wait is not None:
        raise TooManyRequestsError(
            f"a batch of {extra_calls + 1} calls exceeds what is left of the rate limit of "
            f"{state.limiter.per_minute} requests a minute for this key (each call counts); "
            "send fewer calls or retry later",
            retry_after=wait,
        )


async def principal_from_request(request: Request, state: ServerState) -> Principal:
    """Authenticate ``request`` by its API key and apply the key's rate limit.

    Usable outside the dependency system (e.g. a JSON-RPC dispatcher that
    checks per call).

    Raises:
        UnauthorizedError: no valid key.
        TooManyRequestsError: over the rate limit.
    """
    key = _presented_key(request)
    if key is None:
        await _count_auth_failure(request, state)
        raise UnauthorizedError(
            "an API key is required: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'"
        )
    return await principal_from_key(request, state, key)


async def principal_from_key(request: Request, state: ServerState, key: str) -> Principal:
    """Verify ``key`` (however it came: a header, the browser UI's cookie) and rate-limit it.

    Raises:
        UnauthorizedError: an unknown or revoked key.
        TooManyRequestsError: over the rate limit.
    """
    info = await state.keys.verify(key)
    if info is None:
        await _count_auth_failure(request, state)
        raise UnauthorizedError("the API key is unknown or revoked")
    return await admit_key(request, state, info)


async def admit_key(request: Request, state: ServerState, info: KeyInfo) -> Principal:
    """The principal of a verified key (a header's, a browser session's), after its rate limit.

    Raises:
        TooManyRequestsError: over the rate limit.
    """
    wait = await state.limiter.acquire(info.prefix)
    if wait is not None:
        raise TooManyRequestsError(
            f"the rate limit of {state.limiter.per_minute} requests a minute for this key "
            "is exhausted; retry later",
            retry_after=wait,
        )
    now = time.monotonic()
    # A busy key costs one write a minute, not one per request.
    last = state.key_last_touched.get(info.prefix)
    if last is None or now - last >= state.server.last_used_interval_seconds:
        state.key_last_touched[info.prefix] = now
        try:
            await state.pilothouse.keys.touch(info.prefix)
        except Exception:
            # Bookkeeping only: a failed write must not refuse a valid key.
            logger.warning("could not record last use of API key %s", info.prefix)
    principal = Principal(
        tenant=info.tenant,
        key_prefix=info.prefix,
        scopes=frozenset(info.scopes),
        key_name=info.name,
    )
    request.state.principal = principal
    return principal


async def authenticate(request: Request, state: State) -> Principal:
    """FastAPI dependency: the caller's :class:`Principal` (401/429 problems otherwise).

    FastAPI runs it once per request however many dependencies need it.
    """
    return await principal_from_request(request, state)


Authenticated = Annotated[Principal, Depends(authenticate)]
"""A route parameter receiving the authenticated caller."""


async def require_admin(principal: Authenticated) -> Principal:
    """FastAPI dependency: like :func:`authenticate`, and the key must have the admin scope.

    Raises:
        ForbiddenError: a key without the admin scope.
    """
    if not principal.is_admin:
        raise ForbiddenError("this operation needs an API key with admin scope")
    return principal


AdminPrincipal = Annotated[Principal, Depends(require_admin)]
"""A route parameter receiving an admin caller."""


def face_of(request: Request) -> str:
    """The face a request came through, for the record (``rest`` unless another)."""
    path = request.url.path
    if path.startswith("/v1/invoke"):
        return "invoke"
    if path.startswith("/jsonrpc"):
        return "jsonrpc"
    return "rest"


async def get_facade(request: Request, principal: Authenticated, state: State) -> Pilothouse:
    """FastAPI dependency: the facade of the caller's tenant, recording the caller."""
    return state.facade(principal.tenant, principal.caller(face_of(request)))


Facade = Annotated[Pilothouse, Depends(get_facade)]
"""A route parameter receiving the caller's tenant facade."""


async def get_admin_facade(request: Request, principal: AdminPrincipal, state: State) -> Pilothouse:
    """FastAPI dependency: the facade of an admin caller's tenant (403 otherwise)."""
    return state.facade(principal.tenant, principal.caller(face_of(request)))


AdminFacade = Annotated[Pilothouse, Depends(get_admin_facade)]
"""A route parameter receiving an admin caller's tenant facade."""


class _JsonRequest(Request):
    """A request whose JSON body is read like every other face's (see ``loads_json``).

    Python refuses to read an integer of more than 4,300 digits, and FastAPI
    would answer that with a bare 400; read whole, the integer is named by
    the request model (a bounded field) or by the facade's input rules.
    """

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads_json(await self.body(), check=False)
        return self._json


class CheckedJsonRoute(APIRoute):
    """A route reading its JSON body with :class:`_JsonRequest` (``APIRouter(route_class=...)``)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """Wrap FastAPI's handler so it reads the body through :class:`_JsonRequest`."""
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(_JsonRequest(request.scope, request.receive))

        return handle
