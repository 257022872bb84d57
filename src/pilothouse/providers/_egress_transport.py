"""HTTP transports that connect only to addresses the egress policy checked (DNS pinning).

Checking a URL and then letting the HTTP client connect to it resolves the
host twice: a name that answers with a public address to the check and with
``127.0.0.1`` or ``169.254.169.254`` to the connection (DNS rebinding)
passes the check and reaches the internal address. These transports resolve
each request's host once (:meth:`EgressPolicy.pin`), check every address,
and send the request to the checked address: the URL's host is replaced by
the address, while the ``Host`` header keeps the name and, over TLS, the
name is sent as SNI and the certificate is verified against it
(``sni_hostname``).

Connections are pooled per host name (one inner transport each), so two
names on one address never share a TLS connection verified for the other;
within a pool, a connection is reused only for requests whose own check
pinned its address. The policy is the running turn's tenant's
(:data:`current_egress`), else the one given, the deployment's.

There are two, one per HTTP stack: ``httpx2`` for the providers' SDK
clients and ``httpx`` for tools, MCP clients and gateways. They share one
pinning step (``_pin``) and one per-host pool (``_HostPools``), so the
check cannot drift between the stacks; each keeps only its types and the
connection error its own client expects.
"""

from __future__ import annotations

__all__ = ["PinnedHttpxTransport", "PinnedTransport", "pinned_request_policy"]

from collections.abc import Callable
from typing import Generic, TypeVar

import httpx
import httpx2

from pilothouse.errors import InvalidFieldError
from pilothouse.providers._egress import EgressPolicy, EgressRefusal, current_egress

_FIELD = "url"


def pinned_request_policy(default: EgressPolicy) -> EgressPolicy:
    """The policy a request is checked against: its turn's tenant's, else ``default``."""
    return current_egress.get() or default


def _port(scheme: str, port: int | None) -> int:
    return port or (443 if scheme == "https" else 80)


class EgressRefusedError(httpx.ConnectError, EgressRefusal):
    """A request the egress policy refused: raised before any connection is made.

    A connection error to the HTTP client (nothing was sent), carrying the
    policy's reason.
    """


class EgressRefusedConnectError(httpx2.ConnectError, EgressRefusal):
    """:class:`EgressRefusedError` for the ``httpx2`` stack."""


_Request = TypeVar("_Request", httpx.Request, httpx2.Request)
_Transport = TypeVar("_Transport", httpx.AsyncBaseTransport, httpx2.AsyncBaseTransport)


async def _pin(request: _Request, default: EgressPolicy) -> str:
    """Resolve, check and pin the request's host, rewriting the request in place.

    Written once for both stacks (the constrained type variables make pyright
    check it against each): the two transports differ only in their types and
    in the connection error they raise.

    Returns:
        The request's host name, which picks the pool the request goes to.

    Raises:
        InvalidFieldError: the policy refuses the host (before anything is sent).
    """
    host, scheme = request.url.host, request.url.scheme
    policy = pinned_request_policy(default)
    address = await policy.pin(host, _port(scheme, request.url.port), _FIELD)
    if address is not None:
        # Each stack's URL goes back into its own request; pyright checks
        # the call per constraint but not this assignment, which it reads
        # as either stack's URL into either request.
        request.url = request.url.copy_with(host=address)  # pyright: ignore[reportAttributeAccessIssue]
        if scheme == "https":
            request.extensions = {**request.extensions, "sni_hostname": host}
    return host


class _HostPools(Generic[_Transport]):
    """The part both transports share: the policy and one inner transport per host name."""

    def __init__(self, make: Callable[[], _Transport], policy: EgressPolicy) -> None:
        self._make = make
        self._policy = policy
        self._inner: dict[str, _Transport] = {}

    def _pool(self, host: str) -> _Transport:
        inner = self._inner.get(host)
        if inner is None:
            inner = self._inner[host] = self._make()
        return inner

    async def aclose(self) -> None:
        """Close every host's transport."""
        inners, self._inner = list(self._inner.values()), {}
        for inner in inners:
            await inner.aclose()


class PinnedTransport(_HostPools[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport):
    """An ``httpx2`` transport that sends each request to an address its policy checked.

    Args:
        make: builds the inner transport of one host name.
        policy: the deployment's policy, used outside a tenant's turn.
    """

    def __init__(self, make: Callable[[], httpx2.AsyncBaseTransport], policy: EgressPolicy) -> None:
        super().__init__(make, policy)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Resolve, check and pin the request's host, then send it."""
        try:
            host = await _pin(request, self._policy)
        except InvalidFieldError as exc:
            reason = f"egress refused: {exc.rule}"
            raise EgressRefusedConnectError(reason, request=request) from None
        return await self._pool(host).handle_async_request(request)


class PinnedHttpxTransport(_HostPools[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """:class:`PinnedTransport` for the ``httpx`` stack (tools, MCP clients, gateways).

    Args:
        policy: the deployment's policy, used outside a tenant's turn.
        make: builds the inner transport of one host name.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        make: Callable[[], httpx.AsyncBaseTransport] = httpx.AsyncHTTPTransport,
    ) -> None:
        super().__init__(make, policy)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Resolve, check and pin the request's host, then send it."""
        try:
            host = await _pin(request, self._policy)
        except InvalidFieldError as exc:
            raise EgressRefusedError(f"egress refused: {exc.rule}", request=request) from None
        return await self._pool(host).handle_async_request(request)
