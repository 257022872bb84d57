"""Which addresses a caller may make pilothouse call: the egress policy (SSRF guard).

A caller of ``/v1/invoke`` names the model server (``baseUrl``) and MCP
servers itself, with headers of its choosing, and reads the answer: without
a policy any API key could reach the service's own network (a database's
admin port, a cloud metadata endpoint at 169.254.169.254, an internal
admin API). The policy resolves the host and refuses private, loopback,
link-local, shared, reserved and multicast addresses unless the deployment
lists them in ``egress_allow`` (host names, addresses or networks), or
the tenant's own list in ``egress_tenants`` allows them for that tenant.
An IPv6 address that carries an IPv4 address (IPv4-mapped or -compatible,
NAT64, 6to4, Teredo) is judged by the IPv4 address inside, which is where a
translator or tunnel delivers it: ``[64:ff9b::a9fe:a9fe]`` is the metadata
endpoint ``169.254.169.254``.

The check and the connection use one resolution: :meth:`EgressPolicy.pin`
resolves the host once, checks every address and returns the one to connect
to, and the pinned transports (``_egress_transport.py``) connect to exactly
that address, so a name whose DNS answer changes between the check and the
connection (DNS rebinding) cannot reach an address the check did not see.
The policy of the turn running now is in :data:`current_egress`: one
tenant's allow-list never applies to another tenant's calls.
"""

from __future__ import annotations

__all__ = [
    "EgressPolicy",
    "EgressRefusal",
    "Resolver",
    "current_egress",
    "embedded_ipv4",
    "system_resolver",
]

import ipaddress
import socket
from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

import anyio

from pilothouse.errors import InvalidFieldError

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_SETTING = "PILOTHOUSE_EGRESS_ALLOW"
_TENANT_SETTING = "PILOTHOUSE_EGRESS_TENANTS"

Resolver = Callable[[str, int], Awaitable[list[_Address]]]
"""Resolves a host name and port to its addresses (raises ``OSError`` when it cannot)."""


async def system_resolver(host: str, port: int) -> list[_Address]:
    """Resolve ``host`` with the system's resolver (``getaddrinfo``, in a thread)."""
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(item[4][0]) for item in found]


class EgressRefusal:
    """Marks an HTTP client's error as the egress policy's refusal (nothing was sent).

    Mixed into the pinned transports' connection errors, so whoever
    translates a failed call (a model call, a tool) can tell a refusal,
    which no retry can fix, from a network failure.
    """


current_egress: ContextVar[EgressPolicy | None] = ContextVar("current_egress", default=None)
"""The policy of the tenant whose turn runs in this context (set by the runner).

A pinned transport checks each request against it, so a client shared by
several tenants (one provider's pool) applies each request's own tenant's
allow-list; outside a turn it falls back to the deployment's policy.
"""


@dataclass(frozen=True)
class EgressPolicy:
    """Public addresses are allowed; others only when listed.

    Attributes:
        hosts: host names allowed whatever they resolve to (lower case).
        networks: address ranges allowed although private or local.
    """

    hosts: frozenset[str] = frozenset()
    networks: tuple[_Network, ...] = ()
    tenants: Mapping[str, EgressPolicy] = field(default_factory=dict[str, "EgressPolicy"])
    tenant: str | None = None
    resolver: Resolver = system_resolver

    @classmethod
    def parse(
        cls, entries: Sequence[str], tenants: Mapping[str, Sequence[str]] | None = None
    ) -> EgressPolicy:
        """Build the policy from ``egress_allow`` entries (hosts, addresses, CIDRs).

        Args:
            entries: the deployment's list, allowed for every tenant.
            tenants: each tenant's own list, allowed for that tenant only.

        Raises:
            ValueError: an entry that is neither a host name nor an address range.
        """
        own = {
            tenant: cls._parse_entries(items, f"egress_tenants[{tenant!r}]")
            for tenant, items in (tenants or {}).items()
        }
        base = cls._parse_entries(entries, "egress_allow")
        return replace(base, tenants=own)

    def for_tenant(self, tenant: str) -> EgressPolicy:
        """The policy of ``tenant``: the deployment's list plus the tenant's own."""
        base = replace(self, tenants={}, tenant=tenant)
        own = self.tenants.get(tenant)
        if own is None:
            return base
        return replace(base, hosts=base.hosts | own.hosts, networks=(*base.networks, *own.networks))

    @contextmanager
    def applied(self) -> Generator[None]:
        """Run the block under this policy: the pinned transports check each request with it.

        The one way :data:`current_egress` is set, so every caller (a turn, a
        direct or worker tool call, the gateway, knowledge) restores the
        outer policy the same way.
        """
        token = current_egress.set(self)
        try:
            yield
        finally:
            current_egress.reset(token)

    def with_resolver(self, resolver: Resolver) -> EgressPolicy:
        """The same policy, resolving names with ``resolver`` (its tenants' too)."""
        tenants = {name: replace(p, resolver=resolver) for name, p in self.tenants.items()}
        return replace(self, resolver=resolver, tenants=tenants)

    @classmethod
    def _parse_entries(cls, entries: Sequence[str], setting: str) -> EgressPolicy:
        hosts: set[str] = set()
        networks: list[_Network] = []
        for raw in entries:
            entry = raw.strip().lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                if "/" in entry or ":" in entry or " " in entry:
                    raise ValueError(
                        f"{setting}: {raw!r} is neither a host nor a network"
                    ) from None
                hosts.add(entry)
        return cls(frozenset(hosts), tuple(networks))

    async def check(
        self, url: str, field: str, *, schemes: tuple[str, ...] = ("http", "https")
    ) -> None:
        """Refuse ``url`` unless every address its host resolves to is allowed.

        Args:
            url: a URL a caller chose.
            field: the request field that holds it, for the error.
            schemes: the schemes allowed (a pgvector host is checked as
                ``postgresql://host:port``).

        Raises:
            InvalidFieldError: not http(s), unresolvable, or an address the
                policy does not allow (named, with the setting to change).
        """
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in schemes or not host:
            if schemes == ("http", "https"):
                raise InvalidFieldError(field, "must be an http(s) URL with a host")
            raise InvalidFieldError(field, "must name a host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise InvalidFieldError(field, "has a port that is not a number 0-65535") from None
        await self.pin(host, port, field)

    async def pin(self, host: str, port: int, field: str) -> str | None:
        """Resolve ``host`` once and return the address to connect to, every address checked.

        Args:
            host: the host name or address literal of a URL.
            port: its port (some resolvers answer per service).
            field: what holds the URL, for the error.

        Returns:
            The checked address to connect to, or None for a host the policy
            allows by name (connected to as it is: the operator trusts it
            whatever it resolves to).

        Raises:
            InvalidFieldError: unresolvable, or an address the policy does
                not allow (named, with the setting to change).
        """
        host = host.lower().strip("[]")
        if host in self.hosts:
            return None
        try:
            literal: _Address | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        addresses: list[_Address]
        if literal is not None:
            addresses = [literal]
        else:
            try:
                addresses = await self.resolver(host, port)
            except OSError as exc:
                raise InvalidFieldError(
                    field, f"the host {host!r} does not resolve ({exc})"
                ) from None
            if not addresses:
                raise InvalidFieldError(field, f"the host {host!r} does not resolve")
        for address in addresses:
            if self._refused(address):
                shown = str(address)
                inner = embedded_ipv4(address) if isinstance(address, ipaddress.IPv6Address) else ()
                if inner:
                    # Name what it reaches, not only how it was written.
                    shown += f" (which carries {', '.join(map(str, inner))})"
                where = f"{shown} is" if literal is not None else f"{host} resolves to {shown},"
                if self.tenant is not None:
                    allow = (
                        f"the operator may allow it with {_SETTING} (every tenant) or "
                        f"{_TENANT_SETTING} (this tenant only)"
                    )
                else:
                    allow = f"the operator may allow it with {_SETTING}"
                raise InvalidFieldError(
                    field,
                    f"{where} a private, local or reserved address, which callers may not make "
                    f"this service reach; {allow} (hosts or networks)",
                )
        return str(addresses[0])

    def _refused(self, address: _Address) -> bool:
        if self._listed(address):
            return False
        if isinstance(address, ipaddress.IPv6Address):
            if address in _LOCAL_NAT64:
                # A local-use translator's prefix (its IPv4 may sit at any of
                # several offsets) reaches the operator's own networks only.
                return True
            embedded = embedded_ipv4(address)
            if embedded:
                # A translator or tunnel delivers it to the IPv4 addresses
                # inside: those are what the policy judges (every one).
                return any(self._refused(inner) for inner in embedded)
        return not address.is_global or address.is_multicast

    def _listed(self, address: _Address) -> bool:
        return any(address in network for network in self.networks)


_LOCAL_NAT64 = ipaddress.IPv6Network("64:ff9b:1::/48")
_WELL_KNOWN_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address carries, which a translator or tunnel reaches.

    IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible ``::a.b.c.d``, NAT64
    ``64:ff9b::a.b.c.d``, 6to4 ``2002:AABB:CCDD::/48`` and Teredo
    ``2001:0::/32`` (its server and its client). The unspecified and loopback
    addresses ``::`` and ``::1`` carry none (they are judged as they are).

    Args:
        address: an IPv6 address.

    Returns:
        The embedded IPv4 addresses; empty when it embeds none.
    """
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address.sixtofour is not None:
        return (address.sixtofour,)
    if address.teredo is not None:
        return address.teredo
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _WELL_KNOWN_NAT64:
        return (low,)
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return (low,)
    return ()
