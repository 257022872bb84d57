"""pilothouse as an MCP server: the official SDK's low-level ``Server`` over the facade.

:class:`McpService` builds one :class:`mcp.server.Server` for the process.
Each request's caller (:class:`~pilothouse.types.McpCaller`: tenant, key,
tool allow-list) is found by a function the face gives (the HTTP service
reads it from the request its authentication checked; stdio has one fixed
caller), and the request is answered by that tenant's
:class:`~pilothouse._facade.mcptools.McpToolbox`. Transports are the
face's business: the HTTP service mounts the SDK's streamable HTTP session
manager (both the stateless 2026-07-28 protocol and the session-based
handshake protocols) and its SSE transport; ``pilothouse mcp serve
--stdio`` runs the SDK's stdio transport.

**tools/list_changed.** While it runs (:meth:`McpService.running`), a watcher
reads the catalog revision of every tenant that has an open session or
listen stream every ``list_changed_seconds``; when it moved, each open
handshake-era session of the tenant gets ``notifications/tools/list_changed``
and ``notifications/prompts/list_changed``, and each 2026-07-28
``subscriptions/listen`` stream of the tenant the same events.

**Resource subscriptions.** A handshake-era session may
``resources/subscribe`` to any resource it can read (of its own tenant
only); a 2026-07-28 client names the resources in ``subscriptions/listen``
(``notifications.resourceSubscriptions``), refused before the
acknowledgement when one cannot be read. The same watcher reads each
subscribed resource again every ``list_changed_seconds``; when its content
changed (a conversation got a new message, a document was re-ingested, a
skill's prompt was edited), each session subscribed to it gets
``notifications/resources/updated``, and so does each listen stream naming it.
"""

from __future__ import annotations

__all__ = ["McpService"]

import hashlib
import json
import logging
import weakref
from collections.abc import AsyncGenerator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from functools import cache
from typing import TYPE_CHECKING, Any

import anyio
import mcp_types as mt
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.connection import Connection as McpConnection
from mcp.server.models import InitializationOptions
from mcp.server.subscriptions import (
    InMemorySubscriptionBus,
    ListenHandler,
    PromptsListChanged,
    ResourceUpdated,
    ToolsListChanged,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from sqlalchemy import Connection, Select, bindparam, select

from pilothouse._facade.mcptools import McpToolbox
from pilothouse.catalog._models import CatalogRevision
from pilothouse.errors import ErrorCategory, PilothouseError
from pilothouse.store import Caller, Database

if TYPE_CHECKING:
    from pilothouse._facade.mcpgateway import Gateways
    from pilothouse._facade.mcptools import Ranker
    from pilothouse.api import Pilothouse
    from pilothouse.runtime._events import Question
    from pilothouse.types import McpCaller

logger = logging.getLogger(__name__)

CallerOf = Callable[[ServerRequestContext[Any, Any]], "McpCaller"]
"""Finds the caller of one MCP request (raises PilothouseError to refuse it)."""


@cache
def _revision_statement() -> Select[Any]:
    return select(CatalogRevision.revision).where(CatalogRevision.tenant == bindparam("b_tenant"))


def _revision(connection: Connection, tenant: str) -> int:
    value = connection.execute(_revision_statement(), {"b_tenant": tenant}).scalar()
    return int(value or 0)


class _Elicitor:
    """Asks the user of one MCP request's client by form elicitation.

    Made only when the client declared form elicitation on a session that
    can carry a server request (handshake-era protocols).
    """

    def __init__(self, ctx: ServerRequestContext[Any, Any]) -> None:
        self._session = ctx.session
        self._request_id = ctx.request_id

    @staticmethod
    def of(ctx: ServerRequestContext[Any, Any]) -> _Elicitor | None:
        """The elicitor of ``ctx``'s client, or None when it cannot be asked."""
        session = ctx.session
        capabilities = session.client_capabilities
        if capabilities is None or capabilities.elicitation is None or not session.can_send_request:
            return None
        declared = capabilities.elicitation
        # An empty elicitation capability means form mode (2025-06-18).
        if declared.url is not None and declared.form is None:
            return None
        return _Elicitor(ctx)

    async def approve(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Ask whether ``tool`` may run with ``arguments``; only an explicit yes allows it."""
        shown = json.dumps(dict(arguments), ensure_ascii=False, default=str)
        if len(shown) > 2000:
            shown = shown[:2000] + " …"
        result = await self._session.elicit_form(
            message=f"pilothouse asks your approval: run the tool '{tool}' with {shown}?",
            requested_schema={
                "type": "object",
                "properties": {
                    "approve": {
                        "type": "boolean",
                        "title": f"Run {tool}",
                        "description": "Allow this one call",
                        "default": False,
                    }
                },
                "required": ["approve"],
            },
            related_request_id=self._request_id,
        )
        return result.action == "accept" and (result.content or {}).get("approve") is True

    async def answers(self, questions: Sequence[Question]) -> dict[str, str] | None:
        """Ask the questions in one form; None when the user declines or cancels."""
        properties: dict[str, Any] = {}
        for question in questions:
            field: dict[str, Any] = {"type": "string", "title": question.question[:200]}
            if len(question.question) > 200:
                field["description"] = question.question
            if question.choices:
                field["enum"] = list(question.choices)
            properties[question.id] = field
        result = await self._session.elicit_form(
            message="The action asks before it can answer.",
            requested_schema={
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
            related_request_id=self._request_id,
        )
        content = result.content or {}
        if result.action != "accept" or any(q.id not in content for q in questions):
            return None
        return {q.id: str(content[q.id]) for q in questions}


class _Server(Server[Any]):
    """The SDK's server, announcing the list changes pilothouse does send.

    Transports that build the handshake themselves (the streamable HTTP
    session manager) ask the server for its initialization options without
    notification options, which the SDK reads as "no
    list changes": every handshake would advertise ``tools.listChanged:
    false`` though the watcher sends the notifications.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The handshake's options, with tools and prompts list changes announced."""
        return super().create_initialization_options(
            notification_options or NotificationOptions(prompts_changed=True, tools_changed=True),
            experimental_capabilities,
            extensions,
        )


class McpService:
    """The MCP server of one process: SDK server, per-tenant tools, list_changed.

    Made by :meth:`pilothouse.api.Pilothouse.mcp_service`.

    Args:
        ph: the process's facade; each caller's tenant is a view of it.
        database: the facade's database (catalog revisions are read there).
        caller_of: finds the caller of a request.
        max_tools: list action tools only up to this many (then disclose).
        list_changed_seconds: how often the watcher reads catalog revisions.
        gateways: the OpenAPI → MCP gateways (their tools join each tenant's).
        rank: orders action descriptions by meaning for ``pilothouse_find_actions``.

    Attributes:
        server: the SDK's low-level server to hand to a transport.
    """

    def __init__(
        self,
        ph: Pilothouse,
        database: Callable[[], Database],
        caller_of: CallerOf,
        *,
        max_tools: int = 30,
        list_changed_seconds: float = 2.0,
        gateways: Gateways | None = None,
        rank: Ranker | None = None,
    ) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            release = version("pilothouse")
        except PackageNotFoundError:
            release = "0.0.0"
        self._ph = ph
        self._database = database
        self._caller_of = caller_of
        self._max_tools = max_tools
        self._interval = list_changed_seconds
        self.gateways = gateways
        self._rank = rank
        # Per tenant: its open handshake-era sessions and its listen bus.
        # Weak: a connection the client closed is forgotten with it.
        self._connections: dict[str, weakref.WeakSet[McpConnection]] = {}
        self._buses: dict[str, InMemorySubscriptionBus] = {}
        self._listeners: dict[str, ListenHandler] = {}
        self._revisions: dict[str, int] = {}
        # Per (tenant, key prefix, uri): the sessions subscribed to it, the
        # caller reading it and the fingerprint of its last content.
        self._subscribed: dict[tuple[str, str, str], weakref.WeakSet[McpConnection]] = {}
        self._readers: dict[tuple[str, str, str], McpCaller] = {}
        # Per (tenant, key prefix, uri): the 2026-07-28 listen streams naming it.
        self._listening: dict[tuple[str, str, str], int] = {}
        self._fingerprints: dict[tuple[str, str, str], str] = {}
        self.server: Server[Any] = _Server(
            "pilothouse",
            version=release,
            title="pilothouse",
            instructions=(
                "Each tool runs one governed, audited task (an action of the catalog). "
                "If a result says the action asks questions, answer them with "
                "pilothouse_answer."
            ),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
            on_subscriptions_listen=self._listen,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
        )

    def initialization_options(self) -> InitializationOptions:
        """The handshake options: tools and prompts, both announcing list changes."""
        return self.server.create_initialization_options(
            NotificationOptions(prompts_changed=True, tools_changed=True)
        )

    async def _toolbox(self, ctx: ServerRequestContext[Any, Any]) -> tuple[McpCaller, McpToolbox]:
        caller = self._caller_of(ctx)
        await self._track(caller.tenant, ctx)
        view = self._ph.for_tenant(
            caller.tenant, caller=Caller("mcp", caller.key_prefix, caller.key_name)
        )
        return caller, McpToolbox(
            view, max_tools=self._max_tools, gateways=self.gateways, rank=self._rank
        )

    async def _track(self, tenant: str, ctx: ServerRequestContext[Any, Any]) -> None:
        if tenant not in self._revisions:
            # The baseline: a change after this first request is announced.
            self._revisions[tenant] = await self.revision(tenant)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
            # No session to notify: 2026-07-28 clients listen instead.
            return
        # ctx.session is made per request; the connection under it is the
        # client's, and the SDK names it only privately.
        connection = getattr(ctx.session, "_connection", None)
        if isinstance(connection, McpConnection):
            self._connections.setdefault(tenant, weakref.WeakSet()).add(connection)

    async def virtual_server(self, tenant: str, code: str) -> tuple[str, ...]:
        """The tool names (and gateway namespaces) ``tenant``'s virtual server ``code`` serves.

        Read at every request, so a change to the bundle applies at once.

        Args:
            tenant: the caller's tenant (another tenant's server reads as unknown).
            code: the virtual server's code (the path ``/mcp/<code>``).

        Returns:
            Patterns for :attr:`McpCaller.bundle`: exact tool names, and
            ``<prefix>__*`` for a whole gateway.

        Raises:
            NotFoundError: the tenant has no active virtual server ``code``.
        """
        from pilothouse._facade.mcpvirtual import bundle_of

        view = self._ph.for_tenant(tenant)
        return await bundle_of(view, code, self.gateways)

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], _: mt.PaginatedRequestParams | None
    ) -> mt.ListToolsResult:
        caller, toolbox = await self._toolbox(ctx)
        return mt.ListToolsResult(tools=await toolbox.list_tools(caller))

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: mt.CallToolRequestParams
    ) -> mt.CallToolResult:
        caller, toolbox = await self._toolbox(ctx)
        logger.info(
            "MCP tool %s called for tenant %s by key %s",
            params.name,
            caller.tenant,
            caller.key_prefix,
        )
        return await toolbox.call_tool(caller, params.name, params.arguments, _Elicitor.of(ctx))

    async def _list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListPromptsResult:
        del params  # one page holds every prompt
        _, toolbox = await self._toolbox(ctx)
        return mt.ListPromptsResult(prompts=await toolbox.list_prompts())

    async def _get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: mt.GetPromptRequestParams
    ) -> mt.GetPromptResult:
        from mcp.shared.exceptions import MCPError

        toolbox = (await self._toolbox(ctx))[1]
        try:
            return await toolbox.get_prompt(params.name)
        except PilothouseError as exc:
            raise MCPError(mt.INVALID_PARAMS, exc.public_message) from None

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: mt.PaginatedRequestParams | None
    ) -> mt.ListResourcesResult:
        from mcp.shared.exceptions import MCPError

        from pilothouse._facade.mcpresources import McpResources

        caller = self._caller_of(ctx)
        view = self._ph.for_tenant(
            caller.tenant, caller=Caller("mcp", caller.key_prefix, caller.key_name)
        )
        try:
            return await McpResources(view, caller).list(params.cursor if params else None)
        except PilothouseError as exc:
            raise MCPError(mt.INVALID_PARAMS, exc.public_message) from None

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: mt.ReadResourceRequestParams
    ) -> mt.ReadResourceResult:
        from mcp.shared.exceptions import MCPError

        from pilothouse._facade.mcpresources import McpResources

        caller = self._caller_of(ctx)
        view = self._ph.for_tenant(
            caller.tenant, caller=Caller("mcp", caller.key_prefix, caller.key_name)
        )
        try:
            return await McpResources(view, caller).read(str(params.uri))
        except PilothouseError as exc:
            # MCP's code for an unknown resource (-32002) when not found.
            code = -32002 if exc.category is ErrorCategory.NOT_FOUND else mt.INVALID_PARAMS
            raise MCPError(code, exc.public_message) from None

    async def _fingerprint(self, caller: McpCaller, uri: str) -> str:
        """A digest of the resource's current content, as ``caller`` reads it."""
        from pilothouse._facade.mcpresources import McpResources

        view = self._ph.for_tenant(
            caller.tenant, caller=Caller("mcp", caller.key_prefix, caller.key_name)
        )
        result = await McpResources(view, caller).read(uri)
        body = json.dumps([c.model_dump(mode="json") for c in result.contents], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mt.SubscribeRequestParams
    ) -> mt.EmptyResult:
        from mcp.shared.exceptions import MCPError

        caller = self._caller_of(ctx)
        connection = getattr(ctx.session, "_connection", None)
        if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS or not isinstance(
            connection, McpConnection
        ):
            raise MCPError(
                mt.INVALID_REQUEST,
                "resources/subscribe needs a session (the handshake protocol); on the "
                "2026-07-28 protocol, name the resources in subscriptions/listen "
                "(notifications.resourceSubscriptions)",
            )
        key = await self._watch_resource(caller, str(params.uri))
        self._subscribed.setdefault(key, weakref.WeakSet()).add(connection)
        return mt.EmptyResult()

    async def _watch_resource(self, caller: McpCaller, uri: str) -> tuple[str, str, str]:
        """Start watching ``uri`` for ``caller`` (it must be able to read it); its key."""
        from mcp.shared.exceptions import MCPError

        key = (caller.tenant, caller.key_prefix or "", uri)
        try:
            fingerprint = await self._fingerprint(caller, uri)
        except PilothouseError as exc:
            code = -32002 if exc.category is ErrorCategory.NOT_FOUND else mt.INVALID_PARAMS
            raise MCPError(code, exc.public_message) from None
        if key not in self._subscribed and key not in self._listening:
            self._fingerprints[key] = fingerprint
        self._readers[key] = caller
        return key

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: mt.UnsubscribeRequestParams
    ) -> mt.EmptyResult:
        caller = self._caller_of(ctx)
        connection = getattr(ctx.session, "_connection", None)
        sessions = self._subscribed.get((caller.tenant, caller.key_prefix or "", str(params.uri)))
        if sessions is not None and isinstance(connection, McpConnection):
            sessions.discard(connection)
        return mt.EmptyResult()

    async def check_resources(self) -> list[str]:
        """Notify the sessions subscribed to a resource whose content changed.

        Returns:
            The URIs of the resources that changed since the last check.
        """
        changed: list[str] = []
        published: set[tuple[str, str]] = set()
        for key in list({*self._subscribed, *self._listening}):
            sessions = list(self._subscribed.get(key, ()))
            listening = self._listening.get(key, 0)
            if not sessions and not listening:
                # Every subscriber unsubscribed or closed: stop reading it.
                self._forget(key)
                continue
            uri = key[2]
            try:
                now = await self._fingerprint(self._readers[key], uri)
            except PilothouseError as exc:
                # Deleted (or no longer readable): announced once, then dropped.
                logger.info("MCP resource %s is no longer readable: %s", uri, exc.public_message)
                now = ""
            if now == self._fingerprints.get(key):
                continue
            self._fingerprints[key] = now
            changed.append(uri)
            # Read again: a session may have unsubscribed while the content
            # was read, and must hear nothing after its unsubscribe returned.
            for connection in list(self._subscribed.get(key, ())):
                await connection.send_resource_updated(uri)
            bus = self._buses.get(key[0])
            if listening and bus is not None and (key[0], uri) not in published:
                # Once per tenant and resource: the bus hands it to every
                # listen stream of the tenant that named the resource.
                published.add((key[0], uri))
                await bus.publish(ResourceUpdated(uri))
            if not now:
                self._forget(key)
        return changed

    def _forget(self, key: tuple[str, str, str]) -> None:
        for table in (self._subscribed, self._listening, self._readers, self._fingerprints):
            table.pop(key, None)

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: mt.SubscriptionsListenRequestParams
    ) -> mt.SubscriptionsListenResult:
        caller = self._caller_of(ctx)
        tenant = caller.tenant
        if tenant not in self._revisions:
            self._revisions[tenant] = await self.revision(tenant)
        # Each resource named must be one the caller can read, of its own
        # tenant (another tenant's reads as unknown): refused before the ack.
        uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
        keys = [await self._watch_resource(caller, uri) for uri in uris]
        if tenant not in self._listeners:
            bus = InMemorySubscriptionBus()
            self._buses[tenant] = bus
            self._listeners[tenant] = ListenHandler(bus)
        for key in keys:
            self._listening[key] = self._listening.get(key, 0) + 1
        try:
            return await self._listeners[tenant](ctx, params)
        finally:
            # The stream ended (the client went away or the server closed it).
            for key in keys:
                left = self._listening.get(key, 0) - 1
                if left > 0:
                    self._listening[key] = left
                else:
                    self._listening.pop(key, None)

    async def revision(self, tenant: str) -> int:
        """Return the catalog revision of ``tenant`` (0 before its first write)."""
        return await self._database().transaction(_revision, tenant)

    async def check_changes(self) -> list[str]:
        """Notify every open session and listen stream of a tenant whose catalog changed.

        Returns:
            The tenants whose catalog changed since the last check.
        """
        changed: list[str] = []
        for tenant in sorted({*self._connections, *self._buses}):
            now = await self.revision(tenant)
            before = self._revisions.get(tenant)
            self._revisions[tenant] = now
            if before is None or before == now:
                continue
            changed.append(tenant)
            for connection in list(self._connections.get(tenant, ())):
                # Best effort by the SDK: a closed stream drops it, never raises.
                await connection.send_tool_list_changed()
                await connection.send_prompt_list_changed()
            bus = self._buses.get(tenant)
            if bus is not None:
                await bus.publish(ToolsListChanged())
                await bus.publish(PromptsListChanged())
        return changed

    @asynccontextmanager
    async def running(self) -> AsyncGenerator[None]:
        """Run the list_changed watcher for as long as the block lasts."""
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch)
                try:
                    yield
                finally:
                    group.cancel_scope.cancel()
        finally:
            if self.gateways is not None:
                await self.gateways.aclose()

    async def _watch(self) -> None:
        while True:
            await anyio.sleep(self._interval)
            try:
                await self.check_changes()
                await self.check_resources()
            except Exception:
                # A failed read (the database restarting) must not end the
                # watcher; the next round tries again.
                logger.exception("MCP server: checking catalog revisions failed")
