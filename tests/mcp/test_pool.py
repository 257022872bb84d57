"""The pool against an in-process server: listing, calling, errors, reconnects."""

from __future__ import annotations

import anyio
import pytest
from mcp_servers import build_server, config

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.mcp import (
    InMemoryMcpServer,
    McpClientPool,
    McpTool,
    McpUnavailableError,
    in_memory_transports,
)
from pilothouse.tools import ExecutableTool, ToolContext, ToolError, ToolResult

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="t", conversation_uuid="c", call_id="call-1", timeout=5)


async def test_tools_are_listed_with_the_servers_schemas(pool: McpClientPool) -> None:
    tools = await pool.tools(config())
    by_name = {t.definition.name: t for t in tools}
    assert set(by_name) == {"add", "echo", "fail", "slow", "picture", "grow"}
    add = by_name["add"]
    assert isinstance(add, ExecutableTool)
    assert add.kind is ToolKind.MCP
    assert add.policy is ExecutionPolicy.ALLOW
    assert add.definition.description == "Add two numbers."
    assert add.definition.parameters["type"] == "object"
    assert set(add.definition.parameters["properties"]) == {"a", "b"}
    assert add.definition.parameters["required"] == ["a", "b"]
    assert add.definition.output_schema is not None


async def test_a_call_returns_text_and_structured_content(pool: McpClientPool) -> None:
    add = await pool.tool(config(), "add")
    result = await add.execute({"a": 2, "b": 3}, CONTEXT)
    assert result.content == "5"
    assert result.is_error is False
    assert result.data == {"result": 5}


async def test_images_become_a_short_note(pool: McpClientPool) -> None:
    result = await (await pool.tool(config(), "picture")).execute({}, CONTEXT)
    assert result.content.splitlines()[0] == "a dot"
    assert result.content.splitlines()[1].startswith("[image: image/png, ")
    assert "iVBOR" not in result.content


async def test_is_error_maps_to_tool_exec_error(pool: McpClientPool) -> None:
    result = await (await pool.tool(config(), "fail")).execute({"reason": "no"}, CONTEXT)
    assert result.is_error is True
    assert result.error_code == "tool.exec.error"
    assert "refused: no" in result.content


async def test_bad_arguments_come_back_as_a_tool_error(pool: McpClientPool) -> None:
    result = await (await pool.tool(config(), "add")).execute({"a": "x", "b": 1}, CONTEXT)
    assert result.is_error is True
    assert result.error_code == "tool.exec.error"


async def test_a_call_past_its_timeout_is_tool_exec_timeout(pool: McpClientPool) -> None:
    slow = await pool.tool(config(), "slow")
    short = ToolContext(tenant="t", conversation_uuid="c", call_id="1", timeout=0.2)
    with anyio.fail_after(3):
        result = await slow.execute({"seconds": 5}, short)
    assert result.is_error is True
    assert result.error_code == "tool.exec.timeout"
    # The session survives a timed-out call.
    assert (
        await (await pool.tool(config(), "echo")).execute({"message": "hi"}, CONTEXT)
    ).content == ("Echo: hi")


async def test_an_unknown_tool_is_a_tool_error_listing_the_names(pool: McpClientPool) -> None:
    with pytest.raises(ToolError, match=r"has no tool 'nope'; available: add, echo, fail"):
        await pool.tool(config(), "nope")


async def test_a_second_conversation_reuses_the_session(
    pool: McpClientPool, demo_server: InMemoryMcpServer
) -> None:
    first = await pool.tool(config(), "echo")
    await first.execute({"message": "one"}, CONTEXT)
    second = await pool.tool(config(), "echo")
    await second.execute({"message": "two"}, CONTEXT)
    assert demo_server.connections == 1
    assert pool.opened == 1


async def test_tool_lists_are_cached(pool: McpClientPool) -> None:
    first = await pool.tools(config())
    second = await pool.tools(config())
    assert [id(t) for t in first] == [id(t) for t in second]


async def test_concurrent_first_uses_open_one_session(
    pool: McpClientPool, demo_server: InMemoryMcpServer
) -> None:
    results: list[str] = []

    async def use(n: int) -> None:
        tool = await pool.tool(config(), "echo")
        results.append((await tool.execute({"message": str(n)}, CONTEXT)).content)

    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(use, n)
    assert sorted(results) == sorted(f"Echo: {n}" for n in range(10))
    assert demo_server.connections == 1


async def test_list_changed_refreshes_the_tool_list(pool: McpClientPool) -> None:
    assert "extra" not in {t.definition.name for t in await pool.tools(config())}
    await (await pool.tool(config(), "grow")).execute({}, CONTEXT)
    with anyio.fail_after(3):
        while "extra" not in {t.definition.name for t in await pool.tools(config())}:
            await anyio.sleep(0.01)
    extra = await pool.tool(config(), "extra")
    assert (await extra.execute({}, CONTEXT)).content == "extra!"


async def test_a_crashed_server_is_reconnected_once_and_the_call_retried(
    pool: McpClientPool, demo_server: InMemoryMcpServer
) -> None:
    echo = await pool.tool(config(), "echo")
    assert (await echo.execute({"message": "before"}, CONTEXT)).content == "Echo: before"
    await demo_server.crash()
    assert demo_server.live == 0
    result = await echo.execute({"message": "after"}, CONTEXT)
    assert result.content == "Echo: after"
    assert demo_server.connections == 2


async def test_a_crash_during_a_call_reconnects_and_retries(
    pool: McpClientPool, demo_server: InMemoryMcpServer
) -> None:
    slow = await pool.tool(config(), "slow")
    outcome: list[str] = []

    async def call() -> None:
        outcome.append((await slow.execute({"seconds": 0.3}, CONTEXT)).content)

    async with anyio.create_task_group() as tg:
        tg.start_soon(call)
        await anyio.sleep(0.1)
        await demo_server.crash()
    assert outcome == ["done"]
    assert demo_server.connections == 2


async def test_a_server_that_keeps_dying_is_tool_exec_unavailable() -> None:
    server = InMemoryMcpServer(build_server())

    async with McpClientPool(transport_factory=in_memory_transports({"demo": server})) as pool:
        slow = await pool.tool(config(), "slow")
        outcome: list[ToolResult] = []

        async def call() -> None:
            outcome.append(await slow.execute({"seconds": 5}, CONTEXT))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            # Crash the first session, then the one the retry opens.
            for expected in (1, 2):
                with anyio.fail_after(3):
                    while server.connections < expected or server.live == 0:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.05)
                await server.crash()
    [result] = outcome
    assert result.error_code == "tool.exec.unavailable"
    assert "mcp client 'demo' is unavailable" in result.content


async def test_a_server_that_cannot_be_reached_is_unavailable_not_an_exception() -> None:
    async with McpClientPool(transport_factory=in_memory_transports({})) as pool:
        with pytest.raises(McpUnavailableError, match="could not connect: LookupError"):
            await pool.tools(config())
        result = await pool.call_tool(config(), "echo", {"message": "x"}, timeout=1)
    assert result.is_error is True
    assert result.error_code == "tool.exec.unavailable"


async def test_a_server_that_never_answers_times_out_connecting() -> None:
    class Silent:
        async def __aenter__(self) -> object:
            await anyio.sleep_forever()

        async def __aexit__(self, *exc: object) -> None:
            return None

    async with McpClientPool(transport_factory=lambda _c: Silent(), connect_timeout=0.2) as pool:  # type: ignore[arg-type, return-value]
        with anyio.fail_after(3), pytest.raises(McpUnavailableError, match="within 0.2 s"):
            await pool.tools(config())


async def test_clients_with_clashing_names_are_prefixed() -> None:
    servers = {
        "one": InMemoryMcpServer(build_server("one")),
        "two": InMemoryMcpServer(build_server("two")),
    }
    async with McpClientPool(transport_factory=in_memory_transports(servers)) as pool:
        tools = await pool.tools_for([config("one"), config("two")], taken=())
        names = [t.definition.name for t in tools]
        assert "one_add" in names and "two_add" in names and "add" not in names
        one_add = next(t for t in tools if t.definition.name == "one_add")
        assert (await one_add.execute({"a": 1, "b": 1}, CONTEXT)).content == "2"
        alone = await pool.tools_for([config("one")], taken=("echo",))
        assert {t.definition.name for t in alone} >= {"add", "one_echo"}


async def test_a_tool_keeps_its_remote_name_when_renamed(pool: McpClientPool) -> None:
    echo = await pool.tool(config(), "echo")
    assert isinstance(echo, McpTool)
    renamed = echo.renamed("demo_echo")
    assert renamed.remote_name == "echo"
    assert (await renamed.execute({"message": "x"}, CONTEXT)).content == "Echo: x"
    assert echo.with_policy(ExecutionPolicy.AUTHORIZED).policy is ExecutionPolicy.AUTHORIZED


async def test_aclose_closes_every_session(demo_server: InMemoryMcpServer) -> None:
    pool = McpClientPool(transport_factory=in_memory_transports({"demo": demo_server}))
    await pool.start()
    await pool.tools(config())
    assert demo_server.live == 1
    await pool.aclose()
    assert demo_server.live == 0
    with pytest.raises(McpUnavailableError, match="the pool is closed"):
        await pool.tools(config())
    with pytest.raises(RuntimeError, match="not started"):
        await McpClientPool().tools(config())


async def test_a_pre_2026_list_changed_notification_drops_the_cached_list(
    pool: McpClientPool,
) -> None:
    # Handshake-era servers (server-everything, most in the wild) send the
    # notification unasked; the session's message handler sees it directly.
    import mcp_types as types

    from pilothouse.mcp._pool import _Session

    first = await pool.tools(config())
    [session] = pool._sessions.values()
    assert isinstance(session, _Session)
    await session._on_message(types.ToolListChangedNotification())
    second = await pool.tools(config())
    assert [t.definition.name for t in second] == [t.definition.name for t in first]
    assert second[0] is not first[0]


async def test_a_call_running_while_the_pool_closes_is_unavailable(
    demo_server: InMemoryMcpServer,
) -> None:
    pool = McpClientPool(transport_factory=in_memory_transports({"demo": demo_server}))
    outcome: list[ToolResult] = []

    async def call(slow: ExecutableTool) -> None:
        outcome.append(await slow.execute({"seconds": 5}, CONTEXT))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            # The pool is started and closed by the same task, at the same
            # nesting, as anyio requires of a task group.
            await pool.start()
            tg.start_soon(call, await pool.tool(config(), "slow"))
            await anyio.sleep(0.1)
            await pool.aclose()
    assert outcome[0].error_code == "tool.exec.unavailable"
    assert "pool is closed" in outcome[0].content


async def test_a_huge_result_is_cut_to_the_kept_size_and_its_structured_copy_dropped() -> None:
    """A server answering megabytes is not stored or sent to the model whole (as a REST tool's)."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("huge")
    size = 5 * 1024 * 1024

    @server.tool()
    def dump() -> str:
        """Five mebibytes of text."""
        return "x" * size

    @server.tool()
    def small() -> str:
        """A short answer."""
        return "fine"

    factory = in_memory_transports({"huge": InMemoryMcpServer(server)})
    async with McpClientPool(transport_factory=factory, connect_timeout=5) as pool:
        result = await (await pool.tool(config("huge"), "dump")).execute({}, CONTEXT)
        short = await (await pool.tool(config("huge"), "small")).execute({}, CONTEXT)
    kept = 1024 * 1024
    assert result.is_error is False
    assert result.content == "x" * kept + f"…[truncated: {kept} of {size} bytes]"
    assert result.data is None
    assert (short.content, short.data) == ("fine", {"result": "fine"})
