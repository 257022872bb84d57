"""Every outbound address an entity of the catalog names, for the egress policy.

A catalog writer chooses where the service connects: a provider's
``base_url``, a REST tool's ``settings.url`` or ``settings.base_url``, an
OpenAPI tool's or gateway's document (``implementation: openapi:<url>``), an
MCP client's ``url``, a pgvector store's ``connection``. The HTTP service
checks each against the writer's egress policy before the write
(``_facade/catalog.py``) and again at every call (the pinned transports).
This module only finds them; it knows nothing of the policy.
"""

from __future__ import annotations

__all__ = ["CatalogUrl", "catalog_urls"]

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

from pilothouse.catalog._kinds import Location

_SECRET = re.compile(r"@secrets\(")
_HTTP = ("http", "https")


@dataclass(frozen=True)
class CatalogUrl:
    """One address an entity names.

    Attributes:
        location: the field holding it, e.g. ``("settings", "url")``.
        url: the URL to check (a store's ``postgresql://host:port``).
        schemes: the schemes the field may use.
    """

    location: Location
    url: str
    schemes: tuple[str, ...] = _HTTP


def _text(value: Any) -> str | None:
    # A secret reference is resolved at call time only: the pinned
    # transports check what it resolves to then.
    if isinstance(value, str) and value.strip() and not _SECRET.search(value):
        return value.strip()
    return None


def catalog_urls(kind: str, document: Mapping[str, Any]) -> list[CatalogUrl]:
    """The outbound addresses one entity of ``kind`` names.

    Args:
        kind: the kind's plural name (``providers``, ``tools``, ...).
        document: the entity as in catalog YAML (or its spec, dumped).

    Returns:
        Each address with its field; nothing for kinds that name none.
    """
    found: list[CatalogUrl] = []
    settings = document.get("settings")
    settings = cast("dict[str, Any]", settings) if isinstance(settings, dict) else {}
    if kind == "providers":
        url = _text(document.get("base_url"))
        if url is not None:
            found.append(CatalogUrl(("base_url",), url))
    elif kind == "tools":
        for key in ("url", "base_url"):
            url = _text(settings.get(key))
            if url is not None:
                # A path template's braces are the model's arguments; the
                # host before them is what must pass.
                found.append(CatalogUrl(("settings", key), url.split("{", 1)[0] or url))
        implementation = _text(document.get("implementation"))
        if implementation is not None and implementation.startswith("openapi:"):
            source = implementation.removeprefix("openapi:").rpartition("#")
            document_url = source[0] if source[1] else source[2]
            found.append(CatalogUrl(("implementation",), document_url))
    elif kind == "mcp_clients":
        url = _text(document.get("url"))
        transport = str(document.get("transport") or "").lower()
        if url is not None and transport not in ("stdio", "st"):
            found.append(CatalogUrl(("url",), url))
    elif kind == "vector_stores":
        connection = _text(document.get("connection"))
        if connection is not None:
            parts = urlsplit(connection)
            # Only where it connects: the user name stays out of errors.
            host = parts.hostname or ""
            netloc = f"[{host}]" if ":" in host else host
            if parts.port is not None:
                netloc = f"{netloc}:{parts.port}"
            found.append(
                CatalogUrl(
                    ("connection",),
                    urlunsplit((parts.scheme, netloc, "", "", "")),
                    ("postgresql", "postgres"),
                )
            )
    return found
