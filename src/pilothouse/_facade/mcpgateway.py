r"""The OpenAPI → MCP gateway: a REST service's AI-enabled operations as MCP tools.

A gateway is a catalog tool of kind ``rest`` whose implementation names a
whole OpenAPI document (``openapi:<url-or-path>``, no ``#operationId``) and
whose settings hold a ``gateway`` block::

    tools:
      - code: CRM
        name: crm
        kind: rest
        implementation: openapi:https://crm.internal/openapi.json
        settings:
          headers: {Authorization: "Bearer @secrets(CRM_TOKEN)"}   # the gateway's own credential
          gateway:
            include: ["GET /customers/{id}", createOrder]         # beside x-ai-enabled: true
            forward_authorization: false                          # the caller's Authorization
            forward_headers: [X-Tenant-Id]                        # other caller headers
            rate_limit_per_minute: 60                             # per key, per gateway
            token_exchange: myapp.auth:exchange                   # or: make Authorization

Each operation marked ``x-ai-enabled: true`` or listed in ``include`` (by
``METHOD /path`` or ``operationId``) is a tool named from its method and
path (``GET /customers/{id}`` → ``get_customers_by_id``), described by its
summary and description, with its parameters and JSON body as input schema
(:func:`pilothouse.tools._openapi.operation`). A call is proxied:

- path parameters are checked first: a value that could walk the path
  (``/``, ``\``, ``.``/``..``, ``%``, control characters) is refused;
- the base URL passes the deployment's egress policy (``egress_allow``);
- configured headers (secrets resolved) always win: a caller's header never
  replaces one, and no operation header parameter may set one;
- the caller's ``Authorization`` is forwarded only with
  ``forward_authorization: true``, and never when it carried the pilothouse
  key (the gateway's own credential); other caller headers only when listed
  in ``forward_headers``; trusted-IP headers (``X-Forwarded-For``,
  ``X-Real-IP``, ``Forwarded``, ...) never;
- each call counts against the gateway's per-key rate limit and is written
  to the audit log (``pilothouse.audit.gateway``: tenant, key prefix, tool,
  method, path template, status; never a header value or argument).
"""

from __future__ import annotations

__all__ = ["GatewayTool", "Gateways", "gateway_tool_name"]

import inspect
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

import httpx
import mcp_types as mt

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.errors import InvalidFieldError, PilothouseError
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolError
from pilothouse.tools._openapi import load_document, operation
from pilothouse.tools._python import resolve_reference
from pilothouse.tools._rest import HttpEndpoint, RestTool

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.providers import SecretResolver
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.types import McpCaller

logger = logging.getLogger(__name__)
audit = logging.getLogger("pilothouse.audit.gateway")

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_UNSAFE = re.compile(r"[^a-z0-9]+")
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
_SETTINGS = frozenset(
    {
        "include",
        "forward_authorization",
        "forward_headers",
        "rate_limit_per_minute",
        "token_exchange",
    }
)
_FORWARD = "__forward_"


def gateway_tool_name(method: str, path: str) -> str:
    """Name a tool from its method and path: ``GET /customers/{id}`` → ``get_customers_by_id``."""
    words = [method.lower()]
    for segment in path.strip("/").split("/"):
        if not segment:
            continue
        if segment.startswith("{") and segment.endswith("}"):
            words.append("by")
            segment = segment[1:-1]
        cleaned = _UNSAFE.sub("_", segment.lower()).strip("_")
        if cleaned:
            words.append(cleaned)
    return "_".join(words)[:128]


TokenExchange = Callable[[str | None, str, str], "Awaitable[str | None] | str | None"]
"""``(caller's Authorization or None, gateway code, tenant) -> Authorization to send``.

An OAuth2 token exchange (RFC 8693) lives here: trade the caller's token for
one the backend accepts. None sends no Authorization.
"""


@dataclass(frozen=True)
class _Config:
    include: frozenset[str]
    forward_authorization: bool
    forward_headers: tuple[str, ...]
    rate_limit_per_minute: int
    token_exchange: TokenExchange | None = None


def _config(code: str, raw: Any, settings: Mapping[str, Any]) -> _Config:
    where = f"tool '{code}': settings.gateway"
    if not isinstance(raw, dict):
        raise InvalidFieldError(where, "must be a mapping")
    block = cast("dict[str, Any]", raw)
    unknown = sorted(set(block) - _SETTINGS)
    if unknown:
        raise InvalidFieldError(
            where,
            f"unknown setting(s) {', '.join(unknown)}; write only {', '.join(sorted(_SETTINGS))}",
        )
    include = block.get("include", [])
    forward = block.get("forward_headers", [])
    if not isinstance(include, list) or not isinstance(forward, list):
        raise InvalidFieldError(where, "include and forward_headers must be lists")
    rate = block.get("rate_limit_per_minute", 60)
    if not isinstance(rate, int) or isinstance(rate, bool) or rate < 0:
        raise InvalidFieldError(f"{where}.rate_limit_per_minute", "must be a whole number ≥ 0")
    forward_authorization = block.get("forward_authorization", False)
    if not isinstance(forward_authorization, bool):
        raise InvalidFieldError(f"{where}.forward_authorization", "must be true or false")
    headers = tuple(str(h).lower() for h in cast("list[Any]", forward))
    trusted = sorted(set(headers) & TRUSTED_IP_HEADERS)
    if trusted or "authorization" in headers:
        raise InvalidFieldError(
            f"{where}.forward_headers",
            f"{', '.join(trusted) or 'authorization'} cannot be forwarded "
            "(use forward_authorization for Authorization; trusted-IP headers never pass)",
        )
    exchange: TokenExchange | None = None
    reference = block.get("token_exchange")
    if reference is not None:
        configured = {str(h).lower() for h in cast("dict[str, Any]", settings.get("headers") or {})}
        if "authorization" in configured or forward_authorization:
            raise InvalidFieldError(
                f"{where}.token_exchange",
                "a token exchange makes the Authorization header: drop headers.Authorization "
                "and forward_authorization, or the exchange",
            )
        try:
            target = resolve_reference(str(reference))
        except ToolError as exc:
            raise InvalidFieldError(f"{where}.token_exchange", str(exc)) from None
        if not callable(target):
            raise InvalidFieldError(f"{where}.token_exchange", f"'{reference}' is not a function")
        exchange = cast("TokenExchange", target)
    return _Config(
        frozenset(str(i) for i in cast("list[Any]", include)),
        forward_authorization,
        headers,
        rate,
        exchange,
    )


def is_gateway(settings: Mapping[str, Any] | None) -> bool:
    """Whether a rest tool's settings make it a gateway."""
    return bool(settings) and "gateway" in (settings or {})


@dataclass(frozen=True)
class GatewayTool:
    """One proxied operation."""

    tool: mt.Tool
    gateway: str
    config: _Config
    endpoint: HttpEndpoint
    template: str


def _safe_segment(value: Any) -> bool:
    text = str(value)
    if not text or text in (".", ".."):
        return False
    return not any(c in "/\\%?#" or ord(c) < 32 for c in text)


class _Window:
    """Calls in the last minute, per key and gateway."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str], deque[float]] = {}

    def take(self, key: tuple[str, str], per_minute: int) -> bool:
        if per_minute == 0:
            return True
        now = time.monotonic()
        calls = self._calls.setdefault(key, deque())
        while calls and now - calls[0] >= 60:
            calls.popleft()
        if len(calls) >= per_minute:
            return False
        calls.append(now)
        return True


class Gateways:
    """Every gateway of the process: documents, their tools, the HTTP client, the limits.

    Args:
        secrets: resolves ``@secrets(NAME)`` in configured headers.
        egress: the deployment's egress policy.
    """

    def __init__(self, secrets: SecretResolver, egress: EgressPolicy) -> None:
        self._secrets = secrets
        self._egress = egress
        self._tools: dict[tuple[str, str, int], list[GatewayTool]] = {}
        self._window = _Window()
        self.http = httpx.AsyncClient(follow_redirects=False)

    async def tools(self, ph: Pilothouse) -> list[GatewayTool]:
        """The tools of every active gateway of ``ph``'s tenant (documents cached per version)."""
        found: list[GatewayTool] = []
        for entry in await ph.catalog.list_entries("tools", active=True):
            settings = cast("dict[str, Any]", entry.document.get("settings") or {})
            if entry.document.get("kind") != ToolKind.REST.value or not is_gateway(settings):
                continue
            key = (ph.tenant, entry.key, entry.version)
            if key not in self._tools:
                try:
                    self._tools[key] = await self._load(entry.key, entry.document, settings)
                except (PilothouseError, ToolError, httpx.HTTPError) as exc:
                    # One broken gateway must not hide the others' tools.
                    logger.warning("MCP gateway %s: cannot load its document: %s", entry.key, exc)
                    continue
            found.extend(self._tools[key])
        return found

    async def _load(
        self, code: str, document: Mapping[str, Any], settings: Mapping[str, Any]
    ) -> list[GatewayTool]:
        config = _config(code, settings["gateway"], settings)
        source = str(document.get("implementation") or "").removeprefix("openapi:")
        if not str(document.get("implementation") or "").startswith("openapi:") or "#" in source:
            raise InvalidFieldError(
                f"tool '{code}': implementation",
                "a gateway names a whole document: 'openapi:<url-or-path>'",
            )
        spec = await load_document(source, self.http)
        headers = cast("dict[str, str]", settings.get("headers") or {})
        configured = {h.lower() for h in headers}
        base_url = settings.get("base_url")
        tools: list[GatewayTool] = []
        for template, item in cast("dict[str, Any]", spec.get("paths") or {}).items():
            for method in _METHODS:
                op = cast("dict[str, Any] | None", cast("dict[str, Any]", item).get(method))
                if op is None:
                    continue
                ident = f"{method.upper()} {template}"
                if not (
                    op.get("x-ai-enabled") is True
                    or ident in config.include
                    or op.get("operationId") in config.include
                ):
                    continue
                name = gateway_tool_name(method, template)
                # Operations without an operationId get the tool's name, so
                # the shared mapper can find them.
                op.setdefault("operationId", name)
                mapped = operation(
                    spec,
                    str(op["operationId"]),
                    source=source,
                    base_url=str(base_url) if base_url else None,
                    headers=headers,
                )
                endpoint = mapped.endpoint
                # An operation's header parameter never sets a configured or
                # trusted-IP header.
                kept = {
                    h: a
                    for h, a in endpoint.header_arguments.items()
                    if h.lower() not in configured and h.lower() not in TRUSTED_IP_HEADERS
                }
                endpoint = replace(endpoint, header_arguments=kept)
                await self._egress.check(endpoint.url.split("{", 1)[0], f"tool '{code}': base URL")
                tool = mt.Tool(
                    name=name,
                    title=str(op.get("summary") or name),
                    description=mapped.description or ident,
                    input_schema=mapped.parameters,
                )
                tools.append(GatewayTool(tool, code, config, endpoint, ident))
        return tools

    async def call(
        self, caller: McpCaller, gateway: GatewayTool, arguments: dict[str, Any]
    ) -> mt.CallToolResult:
        """Proxy one call; every failure is a tool error."""
        name = gateway.tool.name
        for argument in gateway.endpoint.path:
            if argument in arguments and not _safe_segment(arguments[argument]):
                return _error(
                    f"{argument}: a path parameter may not hold '/', '\\\\', '%', '.' or '..'"
                )
        if not self._window.take(
            (caller.key_prefix or caller.tenant, gateway.gateway),
            gateway.config.rate_limit_per_minute,
        ):
            return _error(
                f"rate limit of {gateway.config.rate_limit_per_minute} calls a minute for this "
                f"gateway reached; retry later"
            )
        endpoint = gateway.endpoint
        args = {k: v for k, v in arguments.items() if not k.startswith(_FORWARD)}
        configured = {h.lower() for h in endpoint.headers}
        forwarded: dict[str, str] = {}
        if gateway.config.forward_authorization and "authorization" not in configured:
            value = caller.headers.get("authorization")
            if value is not None:
                forwarded["Authorization"] = value
        exchange = gateway.config.token_exchange
        if exchange is not None:
            try:
                made = exchange(caller.headers.get("authorization"), gateway.gateway, caller.tenant)
                if inspect.isawaitable(made):
                    made = await made
            except Exception:
                # The hook's own failure: logged here, never shown (it may
                # hold a token in its message).
                logger.exception("MCP gateway %s: the token exchange failed", gateway.gateway)
                return _error("the token exchange failed; the call was not sent")
            if made is not None:
                forwarded["Authorization"] = str(made)
        for header in gateway.config.forward_headers:
            value = caller.headers.get(header)
            if value is not None and header not in configured:
                forwarded[header] = value
        extra = {h: f"{_FORWARD}{i}" for i, h in enumerate(forwarded)}
        args.update({extra[h]: v for h, v in forwarded.items()})
        endpoint = replace(endpoint, header_arguments={**endpoint.header_arguments, **extra})
        definition = ToolDefinition(name=name, description="", parameters=gateway.tool.input_schema)
        tool = RestTool(definition, endpoint, ExecutionPolicy.ALLOW, self.http, self._secrets)
        context = ToolContext(tenant=caller.tenant, conversation_uuid="", call_id=name)
        result = await tool.execute(args, context)
        audit.info(
            "gateway=%s tool=%s call=%s tenant=%s key=%s outcome=%s",
            gateway.gateway,
            name,
            gateway.template,
            caller.tenant,
            caller.key_prefix,
            result.error_code or "ok",
        )
        data: Any = result.data
        structured = cast("dict[str, Any]", data) if isinstance(data, dict) else None
        return mt.CallToolResult(
            content=[mt.TextContent(text=result.content)],
            is_error=result.is_error,
            structured_content=structured,
        )

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()


def _error(text: str) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(text=text)], is_error=True)
