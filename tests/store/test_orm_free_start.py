"""Cold start: opening pilothouse on SQLite and a turn's store statements load no ORM.

SQLAlchemy's ORM (``sqlalchemy.orm``, and ``sqlalchemy.ext.asyncio``, which
imports it) costs a cold start about 0.2 s: its import, the mapped classes
and their mapper configuration. The tables are Core tables in modules of
their own, the store's turn statements are Core statements on them, and
:class:`~pilothouse.store.Database` makes its async engine and sessions only
when asked for them; these checks keep it so. Each runs in a fresh
interpreter and looks at ``sys.modules``: facts about imports, not timings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from database_templates import migrated_sqlite

ORM = ["sqlalchemy.orm", "sqlalchemy.ext.asyncio"]

# Opens pilothouse as an application does, then runs what a turn writes
# through the store's fast path: the conversation taken by its first step,
# the answer and the finish, a second turn with the memory read.
#
# Whole turns (the compile included) are checked the same way in
# tests/runtime/test_orm_free_turn.py and tests/test_imports.py.
OPEN_AND_WRITE = """
import asyncio, json, sys
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.store import Database

ORM = {orm!r}
seen = {{}}

def loaded(): return sorted(m for m in ORM if m in sys.modules)

async def main() -> None:
    seen["imported"] = loaded()
    database = Database({url!r})
    async with Pilothouse(Settings(database_url={url!r}), database=database):
        seen["opened"] = loaded()
        from pilothouse.catalog import MessageRole, ProcessStatus
        from pilothouse.store import NewMessage, SqlTurnStore, TurnBatch

        store = SqlTurnStore(database)
        user = TurnBatch(messages=[NewMessage(MessageRole.USER, "Hi")])
        handle = await store.start_turn(
            "default", "0b9d1c52-52a4-4c50-9b1e-1f4a3f2c2d10",
            action_code="GREET", agent_code=None, first=user,
        )
        await store.write(handle, TurnBatch(
            messages=[NewMessage(MessageRole.ASSISTANT, "Hello.")],
            status=ProcessStatus.COMPLETED,
        ))
        again = await store.begin_turn("default", handle.uuid, first=user, read_memory=True)
        assert [m.content for m in again.memory] == ["Hi", "Hello."], again.memory
        await store.write(again, TurnBatch(status=ProcessStatus.COMPLETED))
        seen["written"] = loaded()
    print(json.dumps(seen))

asyncio.run(main())
"""


def _run(code: str) -> dict[str, list[str]]:
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    seen: dict[str, list[str]] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def test_opening_on_sqlite_and_a_turns_store_writes_load_no_orm(tmp_path: Path) -> None:
    seen = _run(OPEN_AND_WRITE.format(url=migrated_sqlite(tmp_path / "ph.db"), orm=ORM))
    assert seen == {"imported": [], "opened": [], "written": []}


def test_the_store_and_catalog_packages_import_no_orm() -> None:
    code = (
        "import sys, pilothouse.store, pilothouse.catalog\n"
        "import pilothouse.store._tables, pilothouse.catalog._tables\n"
        f"print(sorted(m for m in {ORM!r} if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_the_mapped_classes_are_still_the_packages_names() -> None:
    # Loaded on first use, they are the classes declared on the Core tables.
    from pilothouse.catalog import Action
    from pilothouse.catalog._tables import action_table
    from pilothouse.store import Base, Conversation
    from pilothouse.store._tables import conversation_table, metadata

    assert Action.__table__ is action_table
    assert Conversation.__table__ is conversation_table
    assert Base.metadata is metadata
