"""An authorizer that is itself a catalog tool.

A deployment may decide tool calls with a tool it already has (a REST call to
an approval service, a script, a Python function): it gets the tool's name
and arguments and answers allow or deny. Anything but a clear yes is a no.
"""

from __future__ import annotations

__all__ = ["CatalogToolAuthorizer"]

import json
from collections.abc import Mapping
from typing import Any, cast

from sqlalchemy import select

from pilothouse.catalog._models import Tool
from pilothouse.errors import NotFoundError
from pilothouse.runtime._toolset import ToolSource
from pilothouse.store import Database
from pilothouse.tools._base import ToolContext

_YES = frozenset({"allow", "allowed", "yes", "true", "approve", "approved", "ok"})


class CatalogToolAuthorizer:
    """Asks a catalog tool whether a call may run.

    The tool is called with ``{"tool": <name>, "arguments": {...}}``; it allows
    the call by answering ``allow`` (or yes/true/approved), as text or as
    JSON ``{"allow": true}`` / ``{"decision": "allow"}``.

    Args:
        database: the catalog's database.
        tenant: whose catalog holds the tool.
        code: the authorizer tool's code.
        source: builds the executable tool.
    """

    def __init__(self, database: Database, tenant: str, code: str, source: ToolSource) -> None:
        self._db = database
        self._tenant = tenant
        self._code = code
        self._source = source

    async def __call__(self, name: str, arguments: Mapping[str, Any]) -> bool:
        """Return whether the call of tool ``name`` with ``arguments`` may run."""
        async with self._db.sessions() as session:
            row = await session.scalar(
                select(Tool).where(Tool.tenant == self._tenant, Tool.code == self._code)
            )
        if row is None or not row.active:
            raise NotFoundError(f"authorizer tool '{self._code}' not found")
        tool = await self._source.tool(row)
        result = await tool.execute(
            {"tool": name, "arguments": dict(arguments)},
            ToolContext(self._tenant, "", f"authorize-{name}"),
        )
        return not result.is_error and _is_yes(result.content)


def _is_yes(content: str) -> bool:
    text = content.strip()
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        return text.lower().strip(".!") in _YES
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        return value.lower() in _YES
    if isinstance(value, dict):
        answer = cast("dict[str, Any]", value)
        decision = answer.get("allow", answer.get("decision"))
        return decision is True or (isinstance(decision, str) and decision.lower() in _YES)
    return False
