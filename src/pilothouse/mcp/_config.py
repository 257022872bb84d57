"""How to reach one MCP server: a catalog row with its secrets resolved.

The catalog stores an MCP client with ``@secrets(NAME)`` references in its
headers and environment; :class:`McpClientConfig` is the resolved, immutable
form the pool connects with. Its ``repr`` names headers and environment
variables but never shows their values, so a config can be logged safely.
"""

from __future__ import annotations

__all__ = ["McpClientConfig"]

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from pilothouse.catalog._enums import McpTransport
from pilothouse.tools._base import ToolError

if TYPE_CHECKING:
    from pilothouse.catalog._views import McpClientRecord
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.providers._secrets import SecretSource


def _frozen(values: Mapping[str, str]) -> Mapping[str, str]:
    # A read-only view: the config is shared by every conversation using the
    # client, so nobody may change a header under another's feet.
    return MappingProxyType(dict(values))


def _empty() -> Mapping[str, str]:
    return _frozen({})


@dataclass(frozen=True, repr=False)
class McpClientConfig:
    """A resolved MCP client: everything needed to open a session.

    Attributes:
        name: the client's catalog name; also the prefix of its tools when
            names clash.
        transport: stdio, streamable HTTP or SSE.
        command: the program to start (stdio). ``python`` and ``python3``
            mean the interpreter running pilothouse.
        args: the program's arguments (stdio).
        env: extra environment variables for the program (stdio), resolved.
            The program gets a minimal environment (``PATH``, ``HOME``,
            ``USER``, ``LOGNAME``, ``SHELL``, ``TERM``) plus these; never the
            parent's secrets.
        url: the endpoint (streamable HTTP, SSE).
        headers: HTTP headers with their values resolved.
        confidential_headers: names of headers whose values are secret.
        description: what the server offers, for the prompt.
        egress: the policy every HTTP request of the session is checked and
            pinned against (a tenant's, in the HTTP service); None connects
            as the URL says (the operator's own process).
    """

    name: str
    transport: McpTransport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=_empty)
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=_empty)
    confidential_headers: frozenset[str] = frozenset()
    description: str | None = None
    egress: EgressPolicy | None = None

    def __post_init__(self) -> None:
        if self.transport is McpTransport.STDIO and not self.command:
            raise ToolError(f"mcp client '{self.name}': transport stdio needs a command")
        if self.transport is not McpTransport.STDIO and not self.url:
            raise ToolError(
                f"mcp client '{self.name}': transport {self.transport.name} needs a url"
            )
        # Normalize to read-only views and a tuple even when callers pass
        # plain dicts and lists, so equality and hashing are by content.
        object.__setattr__(self, "args", tuple(str(a) for a in self.args))
        object.__setattr__(self, "env", _frozen(self.env))
        object.__setattr__(self, "headers", _frozen(self.headers))
        object.__setattr__(self, "confidential_headers", frozenset(self.confidential_headers))

    @classmethod
    def from_row(
        cls, row: McpClientRecord, secrets: SecretSource, egress: EgressPolicy | None = None
    ) -> McpClientConfig:
        """Build a config from a catalog row, resolving its secret references.

        Header and environment values may be or contain ``@secrets(NAME)``
        references; other fields are taken as stored.

        Args:
            row: the catalog's MCP client.
            secrets: resolves ``@secrets(NAME)`` references, in the scope of
                the row's tenant.
            egress: the policy the session's requests go through.

        Returns:
            The resolved config.

        Raises:
            SecretNotFoundError: a referenced secret is not defined.
            ToolError: the row lacks the command or URL its transport needs.
        """
        resolve = secrets.for_tenant(row.tenant).resolve
        env = {str(k): resolve(str(v)) for k, v in (row.env or {}).items()}
        headers = {str(k): resolve(str(v)) for k, v in (row.headers or {}).items()}
        return cls(
            name=row.name,
            transport=McpTransport(row.transport),
            command=row.command,
            args=tuple(str(a) for a in (row.args or [])),
            env=env,
            url=row.url,
            headers=headers,
            confidential_headers=frozenset(str(h) for h in (row.confidential_headers or [])),
            description=row.description,
            egress=egress,
        )

    @property
    def fingerprint(self) -> str:
        """A digest of every field, values included.

        Two configs with the same name but a different command, URL, header
        or variable get different sessions. Only the digest is kept, never
        the values, and it is not meant to be shown.
        """
        material: dict[str, Any] = {
            "name": self.name,
            "transport": self.transport.value,
            "command": self.command,
            "args": list(self.args),
            "env": dict(sorted(self.env.items())),
            "url": self.url,
            "headers": dict(sorted(self.headers.items())),
            # One tenant's session never serves another's: each is checked
            # against its own allow-list.
            "egress": None if self.egress is None else (self.egress.tenant or ""),
        }
        encoded = json.dumps(material, sort_keys=True).encode()
        return hashlib.sha256(encoded).hexdigest()[:16]

    @property
    def key(self) -> tuple[str, str]:
        """The pool key: the name and the fingerprint."""
        return (self.name, self.fingerprint)

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        # Names only: header and environment values may be secrets, and even
        # the non-confidential ones stay out so a repr is always safe to log.
        parts = [f"name={self.name!r}", f"transport={self.transport.name}"]
        if self.command is not None:
            parts.append(f"command={self.command!r}")
        if self.args:
            parts.append(f"args={list(self.args)!r}")
        if self.env:
            parts.append(f"env=[{', '.join(sorted(self.env))}]")
        if self.url is not None:
            parts.append(f"url={self.url!r}")
        if self.headers:
            parts.append(f"headers=[{', '.join(sorted(self.headers))}]")
        return f"McpClientConfig({', '.join(parts)})"

    __str__ = __repr__
