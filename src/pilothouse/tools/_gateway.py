r"""The OpenAPI gateway's proxy: AI-enabled operations of a REST service as tools.

A gateway is a catalog tool of kind ``rest`` whose implementation names a
whole OpenAPI document (``openapi:<url-or-path>``, no ``#operationId``) and
whose settings hold a ``gateway`` block (see ``docs/mcp.md``). Each
operation marked ``x-ai-enabled: true`` or listed in ``include`` (by
``METHOD /path`` or ``operationId``) is a :class:`GatewayOperation` named
``<prefix>__<operation>``: the gateway's prefix (its row's ``name`` unless
``settings.gateway.prefix`` says) and the operation's ``operationId``, else
its method and path (``GET /customers/{id}`` → ``crm__get_customers_by_id``).
The catalog refuses two gateways sharing a prefix when they are written.

Two faces use the same proxy, so the same rules hold for both:

- the MCP server offers the operations as MCP tools (``_facade/mcpgateway.py``);
- a catalog action linked to the gateway row offers them to its model as
  tools of the turn (:meth:`GatewayProxy.tools`).

A call (:meth:`GatewayProxy.call`):

- checks path parameters first: a value that could walk the path (``/``,
  ``\``, ``.``/``..``, ``%``, control characters) is refused;
- counts against the gateway's per-caller rate limit;
- sends configured headers (secrets resolved) that always win; forwards the
  caller's ``Authorization`` only with ``forward_authorization: true`` (the
  face never hands over the pilothouse key), or makes it with the
  ``token_exchange`` hook; other caller headers only when listed in
  ``forward_headers``; trusted-IP headers never. A turn has no client
  headers: nothing is forwarded, and a token exchange gets None;
- writes one audit row (``gateway_call``: who, which operation, HTTP status,
  outcome, latency; never arguments or header values) through the sink it
  was given, and one line to the ``pilothouse.audit.gateway`` log.
"""

from __future__ import annotations

__all__ = [
    "TRUSTED_IP_HEADERS",
    "AuditSink",
    "GatewayCaller",
    "GatewayConfig",
    "GatewayOperation",
    "GatewayProxy",
    "GatewayToolForTurn",
    "gateway_config",
    "gateway_tool_name",
    "is_gateway",
    "namespaced",
]

import inspect
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

import anyio
import httpx

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.catalog._gateway_rules import (
    NAMESPACE_SEPARATOR,
    TRUSTED_IP_HEADERS,
    gateway_block_rules,
    gateway_prefix,
)
from pilothouse.errors import InvalidFieldError, PilothouseError
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolError, ToolResult
from pilothouse.tools._code import CodePolicy
from pilothouse.tools._openapi import load_document, operation
from pilothouse.tools._rest import HttpEndpoint, RestTool

if TYPE_CHECKING:
    from pilothouse.catalog._views import ToolRecord
    from pilothouse.providers import SecretSource
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.store import NewGatewayCall

logger = logging.getLogger(__name__)
audit_log = logging.getLogger("pilothouse.audit.gateway")

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")
_UNSAFE = re.compile(r"[^a-z0-9]+")
# Seconds a proxied call may take when neither its caller nor its row says.
_DEFAULT_TIMEOUT = 30.0

# A tool name's longest: what model APIs take as a function name.
_NAME_MAX = 64
_OPERATION_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_FORWARD = "__forward_"

AuditSink = Callable[["NewGatewayCall"], Awaitable[None]]
"""Records one gateway call (the store's ``gateway_call`` row)."""


def gateway_tool_name(method: str, path: str, operation_id: str | None = None) -> str:
    """Name an operation: its ``operationId`` when it has one, else its method and path.

    ``getPetById`` stays ``getPetById`` (characters a model API refuses become
    ``_``); ``GET /customers/{id}`` without one is ``get_customers_by_id``.
    The gateway puts its prefix before it (:func:`namespaced`).
    """
    if operation_id:
        cleaned_id = _OPERATION_ID_UNSAFE.sub("_", operation_id).strip("_")
        if cleaned_id:
            return cleaned_id
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
    return "_".join(words)


def namespaced(prefix: str, name: str) -> str:
    """A gateway's tool name: ``petstore`` and ``getPetById`` → ``petstore__getPetById``."""
    return f"{prefix}{NAMESPACE_SEPARATOR}{name}"


TokenExchange = Callable[[str | None, str, str], "Awaitable[str | None] | str | None"]
"""``(caller's Authorization or None, gateway code, tenant) -> Authorization to send``.

An OAuth2 token exchange (RFC 8693) lives here: trade the caller's token for
one the backend accepts. None sends no Authorization.
"""


@dataclass(frozen=True)
class GatewayConfig:
    """A gateway row's ``settings.gateway`` block, checked."""

    include: frozenset[str]
    forward_authorization: bool
    forward_headers: tuple[str, ...]
    rate_limit_per_minute: int
    token_exchange: TokenExchange | None = None
    prefix: str = ""


def gateway_config(
    code: str,
    raw: Any,
    settings: Mapping[str, Any],
    policy: CodePolicy | None = None,
    *,
    name: str | None = None,
    implementation: str = "openapi:-",
) -> GatewayConfig:
    """Check a gateway block; every unknown or misplaced setting is refused by name.

    The rules are the catalog's (:func:`gateway_block_rules`), checked again
    here for rows stored before they were.

    Args:
        code: the gateway row's code.
        raw: its ``settings.gateway`` block.
        settings: the row's settings.
        policy: what ``token_exchange`` may name (any importable name when None).
        name: the row's name (the default prefix of its tools); ``code``
            lower-cased when None.
        implementation: the row's implementation.

    Raises:
        InvalidFieldError: the block is not what a gateway takes.
    """
    row_name = name if name is not None else code.lower()
    found = gateway_block_rules(row_name, "rest", implementation, {**settings, "gateway": raw})
    if found:
        location, rule = found[0]
        raise InvalidFieldError(f"tool '{code}': {'.'.join(map(str, location))}", rule)
    block = cast("dict[str, Any]", raw)
    exchange: TokenExchange | None = None
    reference = block.get("token_exchange")
    if reference is not None:
        where = f"tool '{code}': settings.gateway.token_exchange"
        try:
            target = (policy or CodePolicy.open()).resolve(str(reference))
        except ToolError as exc:
            raise InvalidFieldError(where, str(exc)) from None
        if not callable(target):
            raise InvalidFieldError(where, f"'{reference}' is not a function")
        exchange = cast("TokenExchange", target)
    return GatewayConfig(
        frozenset(str(i) for i in cast("list[Any]", block.get("include", []))),
        bool(block.get("forward_authorization", False)),
        tuple(str(h).lower() for h in cast("list[Any]", block.get("forward_headers", []))),
        cast("int", block.get("rate_limit_per_minute", 60)),
        exchange,
        gateway_prefix(row_name, block),
    )


def is_gateway(settings: Mapping[str, Any] | None) -> bool:
    """Whether a rest tool's settings make it a gateway."""
    return bool(settings) and "gateway" in (settings or {})


@dataclass(frozen=True)
class GatewayOperation:
    """One proxied operation.

    Attributes:
        definition: its tool name, description and input schema.
        title: the operation's summary (or the name).
        gateway: the gateway row's code.
        config: the gateway's settings.
        endpoint: how the request is built (configured headers included).
        template: ``METHOD /path`` as the document writes it.
    """

    definition: ToolDefinition
    title: str
    gateway: str
    config: GatewayConfig
    endpoint: HttpEndpoint
    template: str


@dataclass(frozen=True)
class GatewayCaller:
    """Who calls a gateway operation, for identity pass-through, limits and audit.

    Attributes:
        tenant: the tenant.
        via: ``mcp`` or ``turn``.
        key_prefix: the API key's prefix, when a key called.
        headers: the caller's headers (lower-case names) that may be
            forwarded when configured; never the pilothouse key. Empty in a turn.
        conversation_uuid: the turn's conversation.
        call_id: the turn's tool call id.
        timeout: the seconds the caller gives the call (a turn's tool
            timeout); None: the gateway row's ``settings.timeout``, else 30.
        face: the face the call came through (``mcp``); None in a turn,
            whose row takes its conversation's face and key.
        key_name: the API key's name, when a key called.
    """

    tenant: str
    via: str
    key_prefix: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    conversation_uuid: str | None = None
    call_id: str | None = None
    face: str | None = None
    key_name: str | None = None
    timeout: float | None = None


def _safe_segment(value: Any) -> bool:
    text = str(value)
    if not text or text in (".", ".."):
        return False
    return not any(c in "/\\%?#" or ord(c) < 32 for c in text)


class _Window:
    """Calls in the last minute, per caller and gateway."""

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


class GatewayProxy:
    """Every gateway of the process: documents, operations, the HTTP client, limits, audit.

    Args:
        secrets: resolves ``@secrets(NAME)`` in configured headers, in the
            calling tenant's scope.
        egress: the deployment's egress policy (each base URL must pass it).
        audit: records each call as a store row; None records log lines only.
        http: the HTTP client to send with (tests pass a mock transport's);
            one of its own, closed by :meth:`aclose`, when None.
        code: what a ``token_exchange`` hook may name: the operator's grants
            where tenants write the catalog; any importable name when None.
    """

    def __init__(
        self,
        secrets: SecretSource,
        egress: EgressPolicy,
        audit: AuditSink | None = None,
        *,
        http: httpx.AsyncClient | None = None,
        code: CodePolicy | None = None,
    ) -> None:
        self._code = code or CodePolicy.open()
        self._secrets = secrets
        self._egress = egress
        self._audit = audit
        self._operations: dict[tuple[str, str, int], list[GatewayOperation]] = {}
        self._lock = anyio.Lock()
        self._window = _Window()
        if http is None:
            from pilothouse.providers._egress_transport import PinnedHttpxTransport

            # Every request (document fetch, proxied call) goes to an address
            # the calling tenant's policy checked, resolved once (no DNS
            # rebinding).
            http = httpx.AsyncClient(follow_redirects=False, transport=PinnedHttpxTransport(egress))
        self.http = http

    async def operations(
        self, tenant: str, code: str, version: int, document: Mapping[str, Any]
    ) -> list[GatewayOperation]:
        """The operations of one gateway row (its document read once per row version).

        Args:
            tenant: the row's tenant.
            code: the row's code.
            version: the row's version (an edit reloads the document).
            document: the row as the catalog stores it (``implementation``,
                ``settings``).

        Raises:
            InvalidFieldError: the gateway's settings are wrong.
            ToolError: the document cannot be read or mapped.
        """
        key = (tenant, code, version)
        async with self._lock:
            if key not in self._operations:
                settings = cast("dict[str, Any]", document.get("settings") or {})
                implementation = str(document.get("implementation") or "")
                name = str(document.get("name") or code.lower())
                policy = self._egress.for_tenant(tenant)
                with policy.applied():
                    self._operations[key] = await self._load(
                        code, name, implementation, settings, policy
                    )
            return self._operations[key]

    async def tools(self, row: ToolRecord) -> list[GatewayToolForTurn]:
        """The operations of a gateway row as tools of a turn, under the row's policy."""
        document = {
            "name": row.name,
            "implementation": row.implementation,
            "settings": row.settings or {},
        }
        try:
            found = await self.operations(row.tenant, row.code, row.version, document)
        except PilothouseError as exc:
            raise ToolError(f"tool '{row.name}': {exc}") from exc
        policy = ExecutionPolicy(row.policy or ExecutionPolicy.ALLOW)
        return [GatewayToolForTurn(self, op, policy) for op in found]

    async def _load(
        self,
        code: str,
        name: str,
        implementation: str,
        settings: Mapping[str, Any],
        egress: EgressPolicy,
    ) -> list[GatewayOperation]:
        config = gateway_config(
            code,
            settings["gateway"],
            settings,
            self._code,
            name=name,
            implementation=implementation,
        )
        timeout = settings.get("timeout")
        source = implementation.removeprefix("openapi:")
        spec = await load_document(source, self.http)
        headers = cast("dict[str, str]", settings.get("headers") or {})
        configured = {h.lower() for h in headers}
        base_url = settings.get("base_url")
        found: list[GatewayOperation] = []
        named: dict[str, str] = {}
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
                given = op.get("operationId")
                tool_name = namespaced(
                    config.prefix,
                    gateway_tool_name(method, template, given if isinstance(given, str) else None),
                )
                _check_name(code, tool_name, ident, named)
                # Operations without an operationId get the tool's name, so
                # the shared mapper can find them.
                op.setdefault("operationId", tool_name)
                mapped = operation(
                    spec,
                    str(op["operationId"]),
                    source=source,
                    base_url=str(base_url) if base_url else None,
                    headers=headers,
                    timeout=float(timeout) if timeout is not None else None,
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
                await egress.check(endpoint.url.split("{", 1)[0], f"tool '{code}': base URL")
                definition = ToolDefinition(
                    name=tool_name,
                    description=mapped.description or ident,
                    parameters=mapped.parameters,
                )
                found.append(
                    GatewayOperation(
                        definition,
                        str(op.get("summary") or tool_name),
                        code,
                        config,
                        endpoint,
                        ident,
                    )
                )
        return found

    async def call(
        self, op: GatewayOperation, arguments: Mapping[str, Any], caller: GatewayCaller
    ) -> ToolResult:
        """Proxy one call and audit it; every failure is a tool error result.

        The row is written whatever the outcome: a timeout (the row's
        ``settings.timeout``, or the caller's), and a call the caller stops
        (a turn's own tool deadline, a cancel), whose row is written before
        the cancel goes on.
        """
        started = time.perf_counter()
        try:
            result = await self._call(op, arguments, caller)
        except anyio.get_cancelled_exc_class():
            seconds = time.perf_counter() - started
            limit = self.timeout_of(op, caller)
            # Stopped from outside: by the turn's deadline when it ran that
            # long (the same timeout as the gateway's, which lost the race).
            code = "tool.exec.timeout" if seconds >= limit * 0.99 else "tool.exec.cancelled"
            stopped = _refused(f"the call was stopped after {seconds:.1f} s", code)
            with anyio.CancelScope(shield=True):
                try:
                    await self._record(op, caller, stopped, round(seconds * 1000, 1))
                except ToolError:
                    # Logged by _record; the cancel goes on, not replaced by it.
                    pass
            raise
        await self._record(op, caller, result, round((time.perf_counter() - started) * 1000, 1))
        return result

    async def refuse(
        self, op: GatewayOperation, caller: GatewayCaller, text: str, code: str
    ) -> ToolResult:
        """Refuse a call before sending it (arguments off the schema, ...), with its row."""
        result = _refused(text, code)
        await self._record(op, caller, result, 0.0)
        return result

    @staticmethod
    def timeout_of(op: GatewayOperation, caller: GatewayCaller) -> float:
        """The seconds a call may take: the caller's, else the row's, else 30."""
        return caller.timeout or op.endpoint.timeout or _DEFAULT_TIMEOUT

    async def _record(
        self, op: GatewayOperation, caller: GatewayCaller, result: ToolResult, latency: float
    ) -> None:
        """Log the call and write its audit row.

        Raises:
            ToolError: the row could not be written.
        """
        outcome = result.error_code or ("tool.exec.error" if result.is_error else "ok")
        audit_log.info(
            "gateway=%s tool=%s call=%s via=%s tenant=%s key=%s status=%s outcome=%s ms=%s",
            op.gateway,
            op.definition.name,
            op.template,
            caller.via,
            caller.tenant,
            caller.key_prefix,
            result.status_code,
            outcome,
            latency,
        )
        if self._audit is not None:
            from pilothouse.store import NewGatewayCall

            row = NewGatewayCall(
                tenant=caller.tenant,
                gateway=op.gateway,
                tool=op.definition.name,
                operation=op.template,
                via=caller.via,
                key_prefix=caller.key_prefix,
                conversation_uuid=caller.conversation_uuid,
                call_id=caller.call_id,
                status_code=result.status_code,
                outcome=outcome,
                latency_ms=latency,
                face=caller.face,
                key_name=caller.key_name,
            )
            try:
                await self._audit(row)
            except Exception as exc:
                # A call without its audit row must not pass as a plain
                # success; the database's own text (SQL, parameters) stays in
                # the log, never in a tool result.
                logger.exception("gateway %s: the audit row could not be written", op.gateway)
                raise ToolError(
                    f"the call was sent ({outcome}) but its audit row could not be written"
                ) from exc

    async def _call(
        self, op: GatewayOperation, arguments: Mapping[str, Any], caller: GatewayCaller
    ) -> ToolResult:
        for argument in op.endpoint.path:
            if argument in arguments and not _safe_segment(arguments[argument]):
                return _refused(
                    f"{argument}: a path parameter may not hold '/', '\\\\', '%', '.' or '..'",
                    "gateway.path_refused",
                )
        who = caller.key_prefix or (
            f"conversation:{caller.conversation_uuid}"
            if caller.conversation_uuid
            else caller.tenant
        )
        if not self._window.take((who, op.gateway), op.config.rate_limit_per_minute):
            return _refused(
                f"rate limit of {op.config.rate_limit_per_minute} calls a minute for this "
                "gateway reached; retry later",
                "gateway.rate_limited",
            )
        endpoint = op.endpoint
        args = {k: v for k, v in arguments.items() if not k.startswith(_FORWARD)}
        configured = {h.lower() for h in endpoint.headers}
        forwarded: dict[str, str] = {}
        if op.config.forward_authorization and "authorization" not in configured:
            value = caller.headers.get("authorization")
            if value is not None:
                forwarded["Authorization"] = value
        exchange = op.config.token_exchange
        if exchange is not None:
            try:
                made = exchange(caller.headers.get("authorization"), op.gateway, caller.tenant)
                if inspect.isawaitable(made):
                    made = await made
            except Exception:
                # The hook's own failure: logged here, never shown (it may
                # hold a token in its message).
                logger.exception("gateway %s: the token exchange failed", op.gateway)
                return _refused(
                    "the token exchange failed; the call was not sent", "gateway.token_exchange"
                )
            if made is not None:
                forwarded["Authorization"] = str(made)
        for header in op.config.forward_headers:
            value = caller.headers.get(header)
            if value is not None and header not in configured:
                forwarded[header] = value
        extra = {h: f"{_FORWARD}{i}" for i, h in enumerate(forwarded)}
        args.update({extra[h]: v for h, v in forwarded.items()})
        endpoint = replace(endpoint, header_arguments={**endpoint.header_arguments, **extra})
        context = ToolContext(
            tenant=caller.tenant,
            conversation_uuid=caller.conversation_uuid or "",
            call_id=caller.call_id or op.definition.name,
            timeout=self.timeout_of(op, caller),
        )
        # The caller's deadline wins over the row's: the endpoint's own
        # timeout would otherwise outlast a turn's shorter one.
        endpoint = replace(endpoint, timeout=context.timeout)
        secrets = self._secrets.for_tenant(caller.tenant)
        tool = RestTool(op.definition, endpoint, ExecutionPolicy.ALLOW, self.http, secrets)
        with self._egress.for_tenant(caller.tenant).applied():
            return await tool.execute(args, context)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.http.aclose()


def _check_name(code: str, name: str, ident: str, named: dict[str, str]) -> None:
    """Refuse a tool name too long for a model, or one two operations would share.

    Raises:
        ToolError: naming the operations and what to change.
    """
    if len(name) > _NAME_MAX:
        raise ToolError(
            f"gateway '{code}': the tool name of {ident} ('{name}') is longer than "
            f"{_NAME_MAX} characters; give the operation a shorter operationId or the "
            "gateway a shorter settings.gateway.prefix"
        )
    if name in named:
        raise ToolError(
            f"gateway '{code}': {named[name]} and {ident} would both be the tool '{name}'; "
            "give them distinct operationIds"
        )
    named[name] = ident


def _refused(text: str, code: str) -> ToolResult:
    return ToolResult(content=text, is_error=True, error_code=code)


class GatewayToolForTurn:
    """A gateway operation as a tool of a turn; satisfies ``ExecutableTool``.

    The call goes through :meth:`GatewayProxy.call` like an MCP client's,
    with the turn as its caller (no client headers to forward).
    """

    def __init__(self, proxy: GatewayProxy, op: GatewayOperation, policy: ExecutionPolicy) -> None:
        self._proxy = proxy
        self.operation = op
        self._policy = policy

    @property
    def definition(self) -> ToolDefinition:
        """The operation's name, description and input schema."""
        return self.operation.definition

    @property
    def kind(self) -> ToolKind:
        """Always :attr:`ToolKind.REST`."""
        return ToolKind.REST

    @property
    def policy(self) -> ExecutionPolicy:
        """The gateway row's policy."""
        return self._policy

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Proxy the call for the turn's conversation."""
        return await self._proxy.call(self.operation, arguments, _turn_caller(context))

    async def refuse(self, problem: str, context: ToolContext) -> None:
        """Record a call of the turn refused before sending (arguments off the schema)."""
        await self._proxy.refuse(
            self.operation, _turn_caller(context), problem, "gateway.schema_refused"
        )


def _turn_caller(context: ToolContext) -> GatewayCaller:
    """A turn as the gateway's caller: its conversation, its call, its tool timeout."""
    return GatewayCaller(
        tenant=context.tenant,
        via="turn",
        conversation_uuid=context.conversation_uuid or None,
        call_id=context.call_id or None,
        timeout=context.timeout,
    )
