"""Which addresses a caller may make pilothouse call: the egress policy (SSRF guard).

A caller of ``/v1/invoke`` names the model server (``baseUrl``) and MCP
servers itself, with headers of its choosing, and reads the answer: without
a policy any API key could reach the service's own network (a database's
admin port, a cloud metadata endpoint at 169.254.169.254, an internal
admin API). The policy resolves the host and refuses private, loopback,
link-local, shared, reserved and multicast addresses unless the deployment
lists them in ``egress_allow`` (host names, addresses or networks).
"""

from __future__ import annotations

__all__ = ["EgressPolicy"]

import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio

from pilothouse.errors import InvalidFieldError

_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address

_SETTING = "PILOTHOUSE_EGRESS_ALLOW"


@dataclass(frozen=True)
class EgressPolicy:
    """Public addresses are allowed; others only when listed.

    Attributes:
        hosts: host names allowed whatever they resolve to (lower case).
        networks: address ranges allowed although private or local.
    """

    hosts: frozenset[str] = frozenset()
    networks: tuple[_Network, ...] = ()

    @classmethod
    def parse(cls, entries: Sequence[str]) -> EgressPolicy:
        """Build the policy from ``egress_allow`` entries (hosts, addresses, CIDRs).

        Raises:
            ValueError: an entry that is neither a host name nor an address range.
        """
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
                        f"egress_allow: {raw!r} is neither a host nor a network"
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
        if host in self.hosts:
            return
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            literal: _Address | None = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        addresses: list[_Address]
        if literal is not None:
            addresses = [literal]
        else:
            try:
                found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except OSError as exc:
                raise InvalidFieldError(
                    field, f"the host {host!r} does not resolve ({exc})"
                ) from None
            addresses = [ipaddress.ip_address(item[4][0]) for item in found]
        for address in addresses:
            if self._refused(address):
                where = f"{address} is" if literal is not None else f"{host} resolves to {address},"
                raise InvalidFieldError(
                    field,
                    f"{where} a private, local or reserved address, which callers may not make "
                    f"this service reach; the operator may allow it with {_SETTING} "
                    "(hosts or networks, comma-separated)",
                )

    def _refused(self, address: _Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self.networks):
            return False
        return not address.is_global or address.is_multicast
