"""Datasets built from recorded conversations: filters, JSONL round trip, erasure."""

from __future__ import annotations

from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel, ToolCall
from pilothouse.tools import ToolRegistry
from pilothouse.types import DatasetCase, RecordedCall

pytestmark = pytest.mark.anyio

CATALOG: dict[str, Any] = {
    "providers": [{"code": "P", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [
        {"code": "M", "provider": "P", "model_name": "m", "input_price": 1, "output_price": 2}
    ],
    "configurations": [{"code": "C", "max_tokens": 64}],
    "actions": [
        {"code": "ASK", "model": "M", "configuration": "C", "prompt": "Answer about {topic}."},
        {"code": "OTHER", "model": "M", "configuration": "C", "prompt": "Say it."},
    ],
}


async def _record(ph: Pilothouse) -> list[str]:
    uuids: list[str] = []
    for topic in ("shirts", "shoes"):
        result = await ph.command.start_and_send(
            f"tell me about {topic}", action="ASK", input_data={"topic": topic}
        )
        uuids.append(result.conversation_uuid)
    await ph.command.start_and_send("hi", action="OTHER")
    return uuids


async def test_dataset_from_conversations_filters_and_round_trips(settings: Settings) -> None:
    model = ScriptedModel(["S", "H", "other"])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuids = await _record(ph)
        info = await ph.evaluation.create_dataset("asks", from_conversations=True, action="ASK")
        assert info.cases == 2
        cases = await ph.evaluation.cases("asks")
        assert [c.input_data for c in cases] == [{"topic": "shirts"}, {"topic": "shoes"}]
        assert [c.expected_output for c in cases] == ["S", "H"]
        assert [c.source_conversation for c in cases] == uuids
        assert cases[0].recorded["input_tokens"] > 0
        one = await ph.evaluation.create_dataset(
            "one", from_conversations=True, uuids=[uuids[1]], sample=1, seed=3
        )
        assert one.cases == 1
        lines = await ph.evaluation.export_dataset("asks")
        copied = await ph.evaluation.import_dataset("copy", lines)
        assert copied.cases == 2
        assert await ph.evaluation.export_dataset("copy") == lines
        assert [d.name for d in await ph.evaluation.list_datasets()] == ["asks", "copy", "one"]
        with pytest.raises(InvalidFieldError, match="filters need from_conversations: action"):
            await ph.evaluation.create_dataset("bad", action="ASK")
        with pytest.raises(InvalidFieldError, match="unknown fields surprise"):
            await ph.evaluation.import_dataset("bad", [{**lines[0], "surprise": 1}])
        with pytest.raises(InvalidFieldError, match="already exists"):
            await ph.evaluation.create_dataset("asks")
        await ph.evaluation.delete_dataset("copy")
        with pytest.raises(NotFoundError):
            await ph.evaluation.cases("copy")
        # Another tenant sees none of them.
        assert await ph.for_tenant("other").evaluation.list_datasets() == []


def stock(item: str) -> str:
    """Units in stock."""
    return f"{item}: 7"


async def test_hand_written_cases_and_tool_calls_are_kept(database_url: str) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(stock)
    model = ScriptedModel([ToolCall("stock", {"item": "shirt"}), "7 left"])
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, tools=registry) as ph:
        await (
            CatalogBuilder()
            .tool("STOCK", name="stock", kind="python", implementation="stock")
            .action("COUNT", prompt="Count stock.", tools=["STOCK"], ask_user=False)
            .import_into(ph)
        )
        await ph.command.start_and_send("how many?", action="COUNT")
        info = await ph.evaluation.create_dataset("tools", from_conversations=True)
        assert info.cases == 1
        (case,) = await ph.evaluation.cases("tools")
        assert case.tool_calls == (RecordedCall("stock", {"item": "shirt"}, "shirt: 7"),)
        assert case.expected_output == "7 left"
        await ph.evaluation.create_dataset("hand")
        written = DatasetCase(action="COUNT", input_text="hello", expected_output="hi", tags=("x",))
        assert (await ph.evaluation.add_cases("hand", [written, written])).cases == 2
        assert [c.sequence for c in await ph.evaluation.cases("hand")] == [1, 2]


async def test_erasing_a_user_removes_their_cases_and_keeps_them_out(settings: Settings) -> None:
    from pilothouse.types import MemoryScope

    async with Pilothouse(settings, model=ScriptedModel(["S", "H", "other"])) as ph:
        await ph.catalog.import_documents([CATALOG])
        alice, bob = await _record(ph)
        await ph.memory.add("Likes shirts.", MemoryScope("session", session_id=alice, user_id="al"))
        await ph.evaluation.create_dataset("asks", from_conversations=True, action="ASK")
        report = await ph.memory.erase_user("al", requested_by="test")
        assert report.conversations == 1
        assert [c.source_conversation for c in await ph.evaluation.cases("asks")] == [bob]
        later = await ph.evaluation.create_dataset("later", from_conversations=True, action="ASK")
        assert later.cases == 1
