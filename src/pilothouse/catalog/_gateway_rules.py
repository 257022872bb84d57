"""The rules of an OpenAPI gateway row, checked when the catalog is written.

A gateway is a tool of kind ``rest`` whose ``settings`` hold a ``gateway``
block (see ``docs/mcp.md``). Its block is checked here, where every catalog
write and ``catalog validate`` pass, so a gateway that could not offer its
tools is refused with the setting named, instead of being stored and then
offering nothing. The proxy (``tools/_gateway.py``) runs the same rules
again when it loads a row stored before they existed.

Each gateway's tools are named ``<prefix>__<operation>``; the prefix (the
row's ``name`` unless ``settings.gateway.prefix`` says otherwise) is the
gateway's namespace. Two gateways of a tenant may not share one, and no
other catalog tool may be named inside one: a name that reached one
backend must never silently reach another, with other credentials.
"""

from __future__ import annotations

__all__ = [
    "GATEWAY_SETTINGS",
    "NAMESPACE_SEPARATOR",
    "TRUSTED_IP_HEADERS",
    "gateway_block_rules",
    "gateway_namespace_rules",
    "gateway_prefix",
]

import re
from collections.abc import Mapping
from typing import Any, cast

# The catalog's Location, spelt here: importing _kinds would load the
# catalog's specs with the proxy, which a first turn must not.
Location = tuple[str | int, ...]

TRUSTED_IP_HEADERS = frozenset(
    {
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-proto",
        "x-real-ip",
        "forwarded",
        "x-client-ip",
        "true-client-ip",
        "cf-connecting-ip",
        "x-cluster-client-ip",
    }
)
"""Headers a proxy trusts to name the client's address: never passed on."""

GATEWAY_SETTINGS = frozenset(
    {
        "include",
        "forward_authorization",
        "forward_headers",
        "rate_limit_per_minute",
        "token_exchange",
        "prefix",
    }
)
"""The settings a ``settings.gateway`` block takes."""

NAMESPACE_SEPARATOR = "__"
"""Between a gateway's prefix and an operation's name: ``petstore__getPetById``."""

# Letters, digits, '-' and single '_' (two would read as the separator).
_PREFIX = re.compile(r"^[A-Za-z][A-Za-z0-9-]*(?:_[A-Za-z0-9-]+)*$")
_PREFIX_MAX = 32
# The MCP server's own tool names start with these words and '_'
# (``tool_add``, ``action_X``); a gateway prefix starting so could collide.
_RESERVED = ("action", "agent", "tool", "pilothouse")


def gateway_prefix(name: str, block: Mapping[str, Any]) -> str:
    """The namespace of a gateway's tools: ``settings.gateway.prefix``, else the row's name."""
    prefix = block.get("prefix")
    return prefix if isinstance(prefix, str) else name


def _prefix_rules(name: str, block: Mapping[str, Any]) -> list[tuple[Location, str]]:
    given = "prefix" in block
    prefix = block.get("prefix")
    where: Location = ("settings", "gateway", "prefix") if given else ("name",)
    if given and not isinstance(prefix, str):
        return [(where, "must be a string: the namespace of the gateway's tools, e.g. 'petstore'")]
    value = gateway_prefix(name, block)
    if len(value) > _PREFIX_MAX or not _PREFIX.match(value):
        hint = "" if given else " (or set settings.gateway.prefix)"
        return [
            (
                where,
                f"'{value}' cannot namespace the gateway's tools: write up to {_PREFIX_MAX} "
                f"letters, digits, '-' and single '_', starting with a letter{hint}",
            )
        ]
    if value.split("_", 1)[0].lower() in _RESERVED and ("_" in value or value.lower() in _RESERVED):
        return [
            (
                where,
                f"'{value}' could collide with the MCP server's own tool names "
                f"({', '.join(w + '_…' for w in _RESERVED)}); choose another prefix",
            )
        ]
    return []


def gateway_block_rules(
    name: str, kind: str, implementation: str | None, settings: Mapping[str, Any]
) -> list[tuple[Location, str]]:
    """Check a gateway row's settings; each broken rule names its setting.

    ``token_exchange`` is checked for its shape only; whether the tenant may
    name that code is the code policy's business (``tools/_code.py``).

    Args:
        name: the row's ``name``.
        kind: the row's kind (a wire value: ``rest``).
        implementation: the row's implementation.
        settings: the row's settings, holding ``gateway``.

    Returns:
        ``(location, rule)`` for each broken rule.
    """
    where = ("settings", "gateway")
    if kind != "rest":
        return [(where, "a gateway is a tool of kind rest; remove settings.gateway")]
    found: list[tuple[Location, str]] = []
    source = (implementation or "").removeprefix("openapi:")
    if not (implementation or "").startswith("openapi:") or "#" in source or not source:
        found.append(
            (
                ("implementation",),
                "a gateway names a whole OpenAPI document: 'openapi:<url-or-path>' "
                "(no '#operationId')",
            )
        )
    timeout = settings.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        found.append((("settings", "timeout"), "must be a positive number of seconds"))
    raw = settings["gateway"]
    if not isinstance(raw, dict):
        return [*found, (where, "must be a mapping of gateway settings")]
    block = cast("dict[str, Any]", raw)
    for key in sorted(set(block) - GATEWAY_SETTINGS):
        found.append(
            (
                (*where, key),
                f"is not a gateway setting; write only {', '.join(sorted(GATEWAY_SETTINGS))}",
            )
        )
    found += _list_rules(block)
    rate = block.get("rate_limit_per_minute", 60)
    if not isinstance(rate, int) or isinstance(rate, bool) or rate < 0:
        found.append(((*where, "rate_limit_per_minute"), "must be a whole number ≥ 0"))
    forward_authorization = block.get("forward_authorization", False)
    if not isinstance(forward_authorization, bool):
        found.append(((*where, "forward_authorization"), "must be true or false"))
    reference = block.get("token_exchange")
    if reference is not None:
        configured = {str(h).lower() for h in cast("dict[str, Any]", settings.get("headers") or {})}
        if not isinstance(reference, str) or ":" not in reference:
            found.append(
                ((*where, "token_exchange"), "must name a function as 'package.module:function'")
            )
        elif "authorization" in configured or forward_authorization is True:
            found.append(
                (
                    (*where, "token_exchange"),
                    "a token exchange makes the Authorization header: drop headers.Authorization "
                    "and forward_authorization, or the exchange",
                )
            )
    found += _prefix_rules(name, block)
    return found


def _list_rules(block: Mapping[str, Any]) -> list[tuple[Location, str]]:
    found: list[tuple[Location, str]] = []
    for key in ("include", "forward_headers"):
        value = block.get(key, [])
        items = cast("list[Any]", value) if isinstance(value, list) else None
        if items is None or not all(isinstance(i, str) for i in items):
            found.append((("settings", "gateway", key), "must be a list of strings"))
    forward = block.get("forward_headers", [])
    if isinstance(forward, list):
        headers = [str(h).lower() for h in cast("list[Any]", forward)]
        trusted = sorted(set(headers) & TRUSTED_IP_HEADERS)
        if trusted or "authorization" in headers:
            found.append(
                (
                    ("settings", "gateway", "forward_headers"),
                    f"{', '.join(trusted) or 'authorization'} cannot be forwarded "
                    "(use forward_authorization for Authorization; trusted-IP headers never pass)",
                )
            )
    return found


def gateway_namespace_rules(
    written: Mapping[str, tuple[str, Mapping[str, Any]]],
    stored: Mapping[str, tuple[str, Mapping[str, Any]]],
) -> list[tuple[str, Location, str]]:
    """Find the namespaces the written tools would share, or another tool would enter.

    Args:
        written: the tools being written: code → (name, settings).
        stored: the tenant's stored tools, same shape (a written code
            replaces its stored row).

    Returns:
        ``(code, location, rule)`` for each clash, on a written tool.
    """
    tools = {**stored, **written}
    owners: dict[str, list[str]] = {}
    for code, (name, settings) in tools.items():
        block = settings.get("gateway")
        if isinstance(block, dict):
            prefix = gateway_prefix(name, cast("dict[str, Any]", block)).lower()
            owners.setdefault(prefix, []).append(code)
    found: list[tuple[str, Location, str]] = []
    for code, (name, settings) in sorted(written.items()):
        block = settings.get("gateway")
        if isinstance(block, dict):
            gateway = cast("dict[str, Any]", block)
            prefix = gateway_prefix(name, gateway)
            others = sorted(c for c in owners.get(prefix.lower(), []) if c != code)
            if others:
                where: Location = (
                    ("settings", "gateway", "prefix") if "prefix" in gateway else ("name",)
                )
                found.append(
                    (
                        code,
                        where,
                        f"the tool namespace '{prefix}' is taken by gateway "
                        f"'{others[0]}': give this gateway another settings.gateway.prefix",
                    )
                )
            continue
        head, separator, _ = name.partition(NAMESPACE_SEPARATOR)
        if separator and head.lower() in owners:
            found.append(
                (
                    code,
                    ("name",),
                    f"'{name}' lies in the tool namespace of gateway "
                    f"'{owners[head.lower()][0]}'; rename the tool",
                )
            )
    return found
