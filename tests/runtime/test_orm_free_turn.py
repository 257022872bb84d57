"""A process's turns run without importing SQLAlchemy's ORM.

the cold start must keep the ORM off the first turn. The
compile reads the catalog with Core statements into views, the store's
statements name Core tables, not mapped attributes (a statement naming a
mapped attribute is compiled by the ORM, which configures every mapping),
and a SQLite database opens without SQLAlchemy's asyncio extension (which
imports the ORM). Together that was about 0.25 s of CPU and 40,000 objects
of a cold start. This test process imported the ORM long ago, so the turns
run in a fresh interpreter: a plain turn, a second turn that reads
the history, a streamed turn with an agent, and a turn that calls a catalog
python tool, on a SQLite file whose catalog was imported beforehand.
(``start_conversation`` returns the mapped ``Conversation`` row, so the
two-step start still imports the ORM; ``start_and_send`` and
``start_and_stream``, one call each, do not: the benchmarks' first turn.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio

TOOLS = '''
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b
'''

CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings
    from pilothouse.testing import ScriptedModel, ToolCall, override

    async def main() -> dict:
        model = ScriptedModel(
            ["one", "two", "three", ToolCall("add", {"a": 2, "b": 3}), "five"]
        )
        with override(model=model):
            async with Pilothouse(Settings(database_url=sys.argv[1])) as ph:
                first = await ph.command.start_and_send("hi", action="CHAT")
                second = await ph.command.send_message(first.conversation_uuid, "again")
                events = [
                    type(event).__name__
                    async for event in ph.command.start_and_stream(
                        "stream", action="CHAT", agent="HELPER"
                    )
                ]
                tool = await ph.command.start_and_send("add 2 and 3", action="SUMS")
        orm_loaded = sorted(
            name for name in sys.modules if name.startswith(("sqlalchemy.orm", "sqlalchemy.ext"))
        )
        return {
            "outputs": [first.output, second.output, tool.output],
            "history": len(model.requests[1].messages),
            "streamed": "TurnFinished" in events,
            "requests": len(model.requests),
            "tool_result": "5" in str(model.requests[-1].messages[-1]),
            "orm_loaded": orm_loaded,
        }

    print(json.dumps(asyncio.run(main())))
    """
)


async def test_turns_of_a_fresh_process_import_no_orm(tmp_path: Path) -> None:
    (tmp_path / "orm_free_tools.py").write_text(TOOLS, encoding="utf-8")
    url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    catalog = (
        CatalogBuilder()
        .memory_strategy("WIN", kind="WINDOW", window_size=10)
        .action("CHAT", prompt="Chat.", memory_strategy="WIN")
        .tool("ADD", name="add", kind="python", implementation="orm_free_tools:add")
        .action("SUMS", prompt="Add numbers.", tools=["ADD"])
        .application("APP")
        .agent("HELPER", application="APP", goal_action="CHAT")
    )
    async with Pilothouse(Settings(database_url=url)) as ph:
        await catalog.import_into(ph)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, url],
        cwd=tmp_path,
        # The tool's module, and whatever put this pilothouse on the path.
        env={**_environ(), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    # The turns really ran (a child that did nothing would configure nothing).
    assert facts["outputs"] == ["one", "two", "five"]
    assert facts["history"] >= 3  # the second turn was sent the first one
    assert facts["streamed"] is True
    assert facts["requests"] == 5  # the tool turn went back to the model
    assert facts["tool_result"] is True  # with the tool's answer
    assert facts["orm_loaded"] == []


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PILOTHOUSE_")}
