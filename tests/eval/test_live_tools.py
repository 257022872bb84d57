"""``live_tools``: only read-only tools run live in a replay; any other call is a divergence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog import ExecutionPolicy, ToolKind
from pilothouse.errors import CatalogValidationError, InvalidFieldError
from pilothouse.providers import SecretResolver
from pilothouse.runtime._repair import RepairedCall
from pilothouse.runtime._replaytape import ReplayTape, TapeCall, replaying
from pilothouse.runtime._toolexec import ToolExecutor
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel, ToolCall
from pilothouse.tools import ToolContext, ToolDefinition, ToolRegistry, ToolResult

pytestmark = pytest.mark.anyio

LIVE: list[str] = []


def stock(item: str) -> str:
    """Units in stock."""
    LIVE.append(f"stock {item}")
    return f"{item}: 7"


def restock(item: str) -> str:
    """Order more units."""
    LIVE.append(f"restock {item}")
    return f"{item}: ordered"


def catalog() -> CatalogBuilder:
    return (
        CatalogBuilder()
        .tool(
            "STOCK",
            name="stock",
            kind="python",
            implementation="stock",
            settings={"read_only": True},
        )
        .tool("RESTOCK", name="restock", kind="python", implementation="restock")
        .action("COUNT", prompt="Count stock.", tools=["STOCK", "RESTOCK"], ask_user=False)
    )


async def test_only_read_only_tools_run_live_and_others_are_divergences(
    database_url: str,
) -> None:
    LIVE.clear()
    registry = ToolRegistry(SecretResolver({}))
    registry.register(stock)
    registry.register(restock)
    model = ScriptedModel(
        [
            # Recorded.
            ToolCall("stock", {"item": "shirt"}),
            "7 left",
            # Replay: a read-only tool with other arguments, named live: it runs.
            ToolCall("stock", {"item": "shoe"}),
            "shoes: 7",
            # Replay: a tool that changes things, never recorded: a divergence.
            ToolCall("restock", {"item": "shirt"}),
            "could not order",
        ]
    )
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, tools=registry) as ph:
        await catalog().import_into(ph)
        await ph.command.start_and_send("how many shirts?", action="COUNT")
        assert LIVE == ["stock shirt"]
        await ph.evaluation.create_dataset("stock", from_conversations=True)

        # Naming a tool that is not read-only, or no tool, is refused before any case runs.
        with pytest.raises(InvalidFieldError, match="'restock' is not marked read-only"):
            await ph.evaluation.replay("stock", run="bad", live_tools=["stock", "restock"])
        with pytest.raises(InvalidFieldError, match="no active catalog tool named 'nope'"):
            await ph.evaluation.replay("stock", run="bad", live_tools=["nope"])
        assert [r.name for r in await ph.evaluation.list_runs()] == []

        live = await ph.evaluation.replay("stock", run="live", live_tools=["stock"])
        (result,) = live.results
        assert result.divergences == (
            {
                "tool": "stock",
                "arguments": {"item": "shoe"},
                "expected": [{"item": "shirt"}],
                "live": True,
            },
        )
        assert LIVE == ["stock shirt", "stock shoe"]
        assert "shoe: 7" in str(model.requests[-1].messages[-1])

        other = await ph.evaluation.replay("stock", run="other", live_tools=["stock"])
        (diverged,) = other.results
        assert diverged.divergences == (
            {"tool": "restock", "arguments": {"item": "shirt"}, "expected": [], "live": False},
        )
        # The tool that changes things never ran; the model was told so.
        assert LIVE == ["stock shirt", "stock shoe"]
        assert "replay.divergence" in str(model.requests[-1].messages[-1])


class _Counting:
    """A tool that counts its executions."""

    def __init__(self) -> None:
        self.runs = 0

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("restock", "Order more.", {"type": "object"})

    @property
    def kind(self) -> ToolKind:
        return ToolKind.PYTHON

    @property
    def policy(self) -> ExecutionPolicy:
        return ExecutionPolicy.ALLOW

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        del arguments, context
        self.runs += 1
        return ToolResult("ordered")


async def test_the_executor_runs_a_live_tool_only_when_it_is_read_only() -> None:
    # Whatever a replay was asked for, the executor holds the line at the call.
    tool = _Counting()
    tape = ReplayTape(
        calls=(TapeCall("restock", {"n": 1}, "done"),), live_tools=frozenset({"restock"})
    )
    call = RepairedCall("c1", "restock", {"n": 2})
    with replaying(tape):
        (refused,) = await ToolExecutor().run([(call, tool)], tenant="t", conversation_uuid="u")
    assert refused.error_code == "replay.divergence"
    assert "only read-only tools run live" in refused.content
    assert tool.runs == 0
    assert not tape.divergences[0].live
    with replaying(tape):
        (ran,) = await ToolExecutor().run(
            [(RepairedCall("c2", "restock", {"n": 3}), tool)],
            tenant="t",
            conversation_uuid="u",
            read_only={"restock"},
        )
    assert ran.content == "ordered"
    assert tool.runs == 1
    assert tape.divergences[1].live
    # The recorded call is still answered from the recording, read-only or not.
    with replaying(tape):
        (answered,) = await ToolExecutor().run(
            [(RepairedCall("c3", "restock", {"n": 1}), tool)], tenant="t", conversation_uuid="u"
        )
    assert answered.content == "done"
    assert tool.runs == 1


def test_read_only_is_a_flag() -> None:
    with pytest.raises(CatalogValidationError, match="read_only must be true or false"):
        CatalogBuilder().tool(
            "STOCK",
            name="stock",
            kind="python",
            implementation="stock",
            settings={"read_only": "yes"},
        )
