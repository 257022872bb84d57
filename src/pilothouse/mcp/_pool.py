"""The MCP client pool: one live, shared session per configured server.

Opening an MCP session is expensive (a process start or an HTTP handshake,
then ``initialize``), so the pool opens each lazily on first use and keeps it
for every later conversation. Each session lives in its own background task
of the pool's task group, because the SDK's context managers must be entered
and left in the same task. A call that finds the session's transport closed
(the server crashed or exited) reopens the session once and retries once;
tool lists are cached per session and dropped when the server announces
``notifications/tools/list_changed``.
"""

from __future__ import annotations

__all__ = ["McpClientPool", "McpUnavailableError"]

import logging
import math
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Any, Self, TypeVar, cast

import anyio
import anyio.abc
import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.session import IncomingMessage
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from pilothouse.mcp._config import McpClientConfig
from pilothouse.mcp._tool import McpTool, exposed_name, to_tool_result
from pilothouse.mcp._transports import TransportFactory, open_transport
from pilothouse.tools._base import ExecutableTool, ToolError, ToolResult

logger = logging.getLogger("pilothouse.mcp")

_T = TypeVar("_T")
_Operation = Callable[[Client, "_Session"], Awaitable[_T]]
_PAGE_LIMIT = 100
"""Most ``tools/list`` pages read, so a server whose cursor never ends cannot hang a turn."""

# What a dead transport looks like from the caller's side, besides the SDK's
# CONNECTION_CLOSED error: a closed memory stream, a broken pipe, a refused
# or reset HTTP connection.
_TRANSPORT_ERRORS = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    OSError,
    httpx2.TransportError,
)


class McpUnavailableError(ToolError):
    """The MCP server cannot be reached: it did not start, refused, or died."""


class _ConnectionLost(Exception):
    """The session's transport closed while a request waited on it."""


def _reason(exc: BaseException) -> str:
    # Task groups wrap the real cause; the innermost first leaf says what
    # went wrong (a refused connection, a missing program) in one line.
    while isinstance(exc, BaseExceptionGroup):
        group = cast("BaseExceptionGroup[BaseException]", exc)
        exc = group.exceptions[0]
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _client_version() -> str:
    try:
        return version("pilothouse")
    except PackageNotFoundError:  # running from a source tree without metadata
        return "0"


class _Session:
    """One MCP session, run by its own task in the pool's task group."""

    def __init__(
        self,
        config: McpClientConfig,
        transports: TransportFactory,
        request_timeout: float,
        client_info: types.Implementation,
    ) -> None:
        self.config = config
        self._transports = transports
        self._request_timeout = request_timeout
        self._client_info = client_info
        self.client: Client | None = None
        self.error: BaseException | None = None
        self.ready = anyio.Event()
        self.closed = anyio.Event()
        self._stop = anyio.Event()
        self._scope = anyio.CancelScope()
        self._waiters: set[anyio.CancelScope] = set()
        self.tools: list[McpTool] | None = None
        self.tools_generation = 0

    @property
    def alive(self) -> bool:
        return self.client is not None and not self.closed.is_set() and not self._stop.is_set()

    def stop(self) -> None:
        """Ask the session's task to close the session and end."""
        self._stop.set()
        if not self.ready.is_set():
            # Still connecting (a server that never answers): nothing to
            # close gracefully yet, so abandon the attempt.
            self._scope.cancel()

    def invalidate_tools(self) -> None:
        # The generation makes a listing that was in flight when the change
        # arrived land nowhere, instead of caching the stale list.
        self.tools = None
        self.tools_generation += 1

    async def run(self) -> None:
        """Open the session, serve until stopped or broken, then close it."""
        try:
            with self._scope:
                await self._serve()
        except Exception as exc:
            # Never let one server's failure reach the pool's task group: it
            # would cancel every other session. Before ready this is the
            # connect error the opener reports; after, a transport that died.
            if self.ready.is_set():
                logger.info("MCP session '%s' ended: %s", self.config.name, _reason(exc))
            else:
                self.error = exc
        finally:
            self.client = None
            self.closed.set()
            self.ready.set()
            # Wake every request still waiting on this transport: a dead HTTP
            # transport can end without answering them.
            for scope in list(self._waiters):
                scope.cancel()

    async def _serve(self) -> None:
        client = Client(
            self._transports(self.config),
            mode="auto",
            read_timeout_seconds=self._request_timeout,
            message_handler=self._on_message,
            client_info=self._client_info,
            # The pool caches tool lists itself and drops them on
            # list_changed; a second, TTL-driven cache would only disagree.
            cache=None,
        )
        async with client, anyio.create_task_group() as tg:
            if self._wants_listen(client):
                tg.start_soon(self._listen, client)
            self.client = client
            self.ready.set()
            await self._stop.wait()
            tg.cancel_scope.cancel()

    @staticmethod
    def _wants_listen(client: Client) -> bool:
        # Since 2026-07-28 change notifications arrive only on a
        # subscriptions/listen stream the client opened; before, the server
        # sends them unasked and the message handler sees them.
        tools = client.server_capabilities.tools
        return (
            client.protocol_version in MODERN_PROTOCOL_VERSIONS
            and tools is not None
            and bool(tools.list_changed)
        )

    async def _listen(self, client: Client) -> None:
        try:
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self.invalidate_tools()
        except (MCPError, SubscriptionLost, TimeoutError, *_TRANSPORT_ERRORS) as exc:
            # Without the stream the list may go stale; the session itself may
            # be fine, so only log. A reconnect subscribes again.
            logger.info("MCP session '%s' stopped listening: %s", self.config.name, _reason(exc))

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.invalidate_tools()
        elif isinstance(message, Exception):
            logger.debug("MCP session '%s' transport fault: %s", self.config.name, _reason(message))

    async def request(self, operation: _Operation[_T]) -> _T:
        """Run one request on the session; raise ``_ConnectionLost`` if it dies meanwhile."""
        client = self.client
        if client is None or not self.alive:
            raise _ConnectionLost
        with anyio.CancelScope() as scope:
            self._waiters.add(scope)
            try:
                return await operation(client, self)
            finally:
                self._waiters.discard(scope)
        raise _ConnectionLost


class McpClientPool:
    """Shared MCP sessions, opened lazily and reused across conversations.

    Use it as ``async with McpClientPool() as pool`` (or call :meth:`start`
    and :meth:`aclose`): the sessions' tasks live in the pool's task group,
    and leaving it closes every session and stops every stdio server.

    Args:
        transport_factory: opens a session's transport from its config; the
            default speaks stdio, streamable HTTP or SSE as configured. Tests
            pass :func:`~pilothouse.mcp.in_memory_transports`.
        connect_timeout: seconds a session may take to open (start the
            server, handshake).
        request_timeout: seconds a ``tools/list`` may take; a tool call uses
            its context's timeout instead.
    """

    def __init__(
        self,
        *,
        transport_factory: TransportFactory | None = None,
        connect_timeout: float = 30.0,
        request_timeout: float = 30.0,
    ) -> None:
        self._transports = transport_factory or open_transport
        self._connect_timeout = connect_timeout
        self._request_timeout = request_timeout
        self._client_info = types.Implementation(name="pilothouse", version=_client_version())
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._locks: dict[tuple[str, str], anyio.Lock] = {}
        self._task_group: anyio.abc.TaskGroup | None = None
        self._closed = False
        self.opened = 0
        """How many sessions were opened so far (reconnects included)."""

    async def start(self) -> None:
        """Start the pool's task group; sessions open on first use after this."""
        if self._task_group is not None:
            raise RuntimeError("the MCP client pool is already started")
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group

    async def aclose(self) -> None:
        """Close every session (stdio servers are stopped) and end the task group."""
        task_group = self._task_group
        if task_group is None:
            return
        self._task_group = None
        self._closed = True
        for session in self._sessions.values():
            session.stop()
        self._sessions.clear()
        # Each session closes in its own task, so servers shut down in
        # parallel; the group returns when the last one is gone.
        await task_group.__aexit__(None, None, None)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def tools(self, config: McpClientConfig) -> list[ExecutableTool]:
        """The server's tools, from the session's cache or a fresh ``tools/list``.

        Names are the server's own, made valid for a model (see
        :func:`~pilothouse.mcp._tool.exposed_name`); use :meth:`tools_for`
        to combine several servers with prefixes where names clash.

        Args:
            config: the MCP client.

        Returns:
            One executable tool per server tool, policy ``allow``.

        Raises:
            McpUnavailableError: the server cannot be reached, even after one
                reconnect.
        """
        return list(await self._mcp_tools(config))

    async def tool(self, config: McpClientConfig, name: str) -> ExecutableTool:
        """One tool of the server, by its server name or its exposed name.

        Args:
            config: the MCP client.
            name: the tool's name.

        Returns:
            The tool.

        Raises:
            ToolError: the server has no such tool; the message lists the
                names it has.
            McpUnavailableError: the server cannot be reached.
        """
        tools = await self._mcp_tools(config)
        for candidate in tools:
            if name in (candidate.remote_name, candidate.definition.name):
                return candidate
        available = ", ".join(sorted(t.remote_name for t in tools)) or "none"
        raise ToolError(f"mcp client '{config.name}' has no tool '{name}'; available: {available}")

    async def tools_for(
        self, configs: Iterable[McpClientConfig], taken: Collection[str] = ()
    ) -> list[ExecutableTool]:
        """The tools of several servers, prefixed ``<client>_<tool>`` only where names clash.

        A name is prefixed when two of the servers offer it, or when it is in
        ``taken`` (the names of the action's other tools); all other tools
        keep their plain names, which models read best.

        Args:
            configs: the action's MCP clients, in order.
            taken: names already used by the action's other tools.

        Returns:
            Every tool of every server, with unique names.

        Raises:
            McpUnavailableError: one of the servers cannot be reached.
        """
        per_client = [(config, await self._mcp_tools(config)) for config in configs]
        counts: dict[str, int] = {}
        for _config, tools in per_client:
            for tool in tools:
                counts[tool.definition.name] = counts.get(tool.definition.name, 0) + 1
        result: list[ExecutableTool] = []
        for config, tools in per_client:
            for tool in tools:
                plain = tool.definition.name
                if counts[plain] > 1 or plain in taken:
                    result.append(tool.renamed(exposed_name(tool.remote_name, config.name)))
                else:
                    result.append(tool)
        return result

    async def call_tool(
        self,
        config: McpClientConfig,
        name: str,
        arguments: Mapping[str, Any],
        *,
        timeout: float,
    ) -> ToolResult:
        """Call a tool on the server; every outcome is a :class:`ToolResult`.

        Args:
            config: the MCP client.
            name: the tool's name on the server.
            arguments: its arguments.
            timeout: seconds the call may take.

        Returns:
            The mapped result; ``tool.exec.error`` when the tool or the server
            reported an error, ``tool.exec.timeout`` when it took too long,
            ``tool.exec.unavailable`` when the server could not be reached
            even after one reconnect.
        """
        arguments = dict(arguments)
        deadline = timeout if timeout > 0 and math.isfinite(timeout) else None

        async def call(client: Client, _session: _Session) -> types.CallToolResult:
            return await client.call_tool(name, arguments, read_timeout_seconds=deadline)

        try:
            result = await self._with_session(config, call)
        except McpUnavailableError as exc:
            return ToolResult(content=str(exc), is_error=True, error_code="tool.exec.unavailable")
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return ToolResult(
                    content=f"MCP tool '{name}' did not answer within {timeout:g} s",
                    is_error=True,
                    error_code="tool.exec.timeout",
                )
            return ToolResult(
                content=f"MCP tool '{name}' failed: {exc.error.message}",
                is_error=True,
                error_code="tool.exec.error",
            )
        return to_tool_result(result)

    async def _mcp_tools(self, config: McpClientConfig) -> list[McpTool]:
        async def list_tools(client: Client, session: _Session) -> list[McpTool]:
            if session.tools is not None:
                return session.tools
            generation = session.tools_generation
            listed: list[types.Tool] = []
            cursor: str | None = None
            for _page in range(_PAGE_LIMIT):
                page = await client.list_tools(cursor=cursor)
                listed.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            tools = [McpTool(self, config, tool) for tool in listed]
            if session.tools_generation == generation:
                session.tools = tools
            return tools

        try:
            return await self._with_session(config, list_tools)
        except MCPError as exc:
            raise McpUnavailableError(
                f"mcp client '{config.name}' could not list its tools: {exc.error.message}"
            ) from exc

    async def _with_session(self, config: McpClientConfig, operation: _Operation[_T]) -> _T:
        # One reconnect, one retry: a server that crashed since the last call
        # gets a fresh session; one that keeps dying is reported unavailable.
        # A call the server ran just before dying may so run twice; MCP gives
        # no way to tell, and losing the call would be worse for a turn.
        for attempt in range(2):
            session = await self._session(config)
            try:
                return await session.request(operation)
            except MCPError as exc:
                if exc.code != CONNECTION_CLOSED:
                    raise
                failure: BaseException = exc
            except (_ConnectionLost, *_TRANSPORT_ERRORS) as exc:
                failure = exc
            self._discard(session)
            if attempt == 0:
                logger.info(
                    "MCP session '%s' lost (%s); reconnecting", config.name, _reason(failure)
                )
                continue
            raise McpUnavailableError(
                f"mcp client '{config.name}' is unavailable: the server closed the connection"
            ) from failure
        raise AssertionError("unreachable")  # pragma: no cover

    def _discard(self, session: _Session) -> None:
        # Only the session that failed: a concurrent caller may already have
        # replaced it with a fresh one, which must stay.
        key = session.config.key
        if self._sessions.get(key) is session:
            del self._sessions[key]
        session.stop()

    async def _session(self, config: McpClientConfig) -> _Session:
        key = config.key
        session = self._sessions.get(key)
        if session is not None and session.alive:
            return session
        lock = self._locks.setdefault(key, anyio.Lock())
        # One opener per key: concurrent first uses wait for it and share
        # the session instead of starting a server each.
        async with lock:
            session = self._sessions.get(key)
            if session is not None and session.alive:
                return session
            if session is not None:
                self._discard(session)
            session = await self._open(config)
            self._sessions[key] = session
            return session

    async def _open(self, config: McpClientConfig) -> _Session:
        task_group = self._task_group
        if task_group is None and self._closed:
            # A call still running while the pool shuts down: report it like
            # any unreachable server instead of raising into the turn.
            raise McpUnavailableError(
                f"mcp client '{config.name}' is unavailable: the pool is closed"
            )
        if task_group is None:
            raise RuntimeError(
                "the MCP client pool is not started: use 'async with McpClientPool()'"
            )
        session = _Session(config, self._transports, self._request_timeout, self._client_info)
        self.opened += 1
        task_group.start_soon(session.run, name=f"mcp session {config.name}")
        with anyio.move_on_after(self._connect_timeout):
            await session.ready.wait()
        if session.client is not None and session.alive:
            return session
        session.stop()
        if session.error is not None:
            raise McpUnavailableError(
                f"mcp client '{config.name}' could not connect: {_reason(session.error)}"
            ) from session.error
        if not session.ready.is_set():
            raise McpUnavailableError(
                f"mcp client '{config.name}' did not connect within {self._connect_timeout:g} s"
            )
        raise McpUnavailableError(f"mcp client '{config.name}' closed while connecting")
