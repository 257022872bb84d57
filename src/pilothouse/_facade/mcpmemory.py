"""Scoped long-term memory as MCP tools: list, get, search, add, edit, forget, versions.

Each tool calls the tenant's :class:`~pilothouse._facade.memory.MemoryApi`
(``ph.memory``), the same door as REST's ``/v1/memory`` and JSON-RPC's
``memory.*`` methods, so the same rules hold: the key's tenant bounds
everything, every call names its scope (``scope`` with the keys it needs:
``user_id``, ``agent``, ``session_id``), and a record of another scope reads
as a missing one. Erasing or exporting a user stays an administrator's REST
or CLI call. A key's ``mcp:tool:<glob>`` allow-list applies to these tools
as to every other.
"""

from __future__ import annotations

__all__ = ["MEMORY_TOOLS", "call_memory_tool"]

from typing import TYPE_CHECKING, Any

import mcp_types as mt

from pilothouse.types import MemoryScope

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from pilothouse.api import Pilothouse

_SCOPE_PROPERTIES: dict[str, Any] = {
    "scope": {"type": "string", "enum": ["session", "user", "agent", "organization"]},
    "user_id": {"type": "string", "minLength": 1, "maxLength": 256},
    "agent": {"type": "string", "minLength": 1, "maxLength": 256},
    "session_id": {"type": "string", "minLength": 1, "maxLength": 256},
}
_ID = {"memory_id": {"type": "string", "minLength": 1, "maxLength": 64}}
_FIELDS: dict[str, Any] = {
    "memory_type": {"type": "string", "minLength": 1},
    "importance": {"type": "number", "minimum": 0, "maximum": 1},
    "metadata": {"type": "object"},
}


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {**_SCOPE_PROPERTIES, **properties},
        "required": ["scope", *required],
        "additionalProperties": False,
    }


def _tool(name: str, title: str, description: str, schema: dict[str, Any]) -> mt.Tool:
    return mt.Tool(name=name, title=title, description=description, input_schema=schema)


MEMORY_TOOLS: tuple[mt.Tool, ...] = (
    _tool(
        "pilothouse_memory_list",
        "List memories",
        "The live memories of one scope, newest first.",
        _schema(
            {
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "offset": {"type": "integer", "minimum": 0},
            },
            [],
        ),
    ),
    _tool(
        "pilothouse_memory_get",
        "Get a memory",
        "One memory of a scope.",
        _schema(_ID, ["memory_id"]),
    ),
    _tool(
        "pilothouse_memory_search",
        "Search memories",
        "Memories of one scope by meaning, best first (similarity, importance and recency).",
        _schema(
            {
                "query": {"type": "string", "minLength": 1},
                "limit": {"type": "integer", "minimum": 0, "maximum": 100},
                "threshold": {"type": "number", "minimum": -1, "maximum": 1},
            },
            ["query"],
        ),
    ),
    _tool(
        "pilothouse_memory_add",
        "Add a memory",
        "Remember a sentence in a scope (the same text twice in one scope stays one record).",
        _schema({"content": {"type": "string", "minLength": 1}, **_FIELDS}, ["content"]),
    ),
    _tool(
        "pilothouse_memory_edit",
        "Change a memory",
        "Change a memory of a scope; what is left out stays, its former value is kept.",
        _schema({**_ID, "content": {"type": "string", "minLength": 1}, **_FIELDS}, ["memory_id"]),
    ),
    _tool(
        "pilothouse_memory_forget",
        "Forget a memory",
        "Delete one memory of a scope.",
        _schema(_ID, ["memory_id"]),
    ),
    _tool(
        "pilothouse_memory_versions",
        "A memory's versions",
        "Every value a memory of a scope held, oldest first; the last is current.",
        _schema(_ID, ["memory_id"]),
    ),
)
"""The memory tools, every one listed to a caller its allow-list admits."""


def _scope(args: dict[str, Any]) -> MemoryScope:
    return MemoryScope(
        args["scope"],
        user_id=args.get("user_id"),
        agent=args.get("agent"),
        session_id=args.get("session_id"),
    )


async def _list(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    items = await ph.memory.list(_scope(a), limit=a.get("limit", 100), offset=a.get("offset", 0))
    return {"items": [item.as_json() for item in items]}


async def _get(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    return (await ph.memory.get(a["memory_id"], _scope(a))).as_json()


async def _search(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    hits = await ph.memory.search(
        a["query"], _scope(a), limit=a.get("limit", 5), threshold=a.get("threshold", 0.0)
    )
    return {"hits": [hit.as_json() for hit in hits]}


async def _add(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    item = await ph.memory.add(
        a["content"],
        _scope(a),
        memory_type=a.get("memory_type"),
        importance=a.get("importance", 1.0),
        metadata=a.get("metadata"),
    )
    return item.as_json()


async def _edit(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    item = await ph.memory.edit(
        a["memory_id"],
        _scope(a),
        content=a.get("content"),
        memory_type=a.get("memory_type"),
        importance=a.get("importance"),
        metadata=a.get("metadata"),
    )
    return item.as_json()


async def _forget(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    await ph.memory.forget(a["memory_id"], _scope(a))
    return {"forgotten": a["memory_id"]}


async def _versions(ph: Pilothouse, a: dict[str, Any]) -> dict[str, Any]:
    versions = await ph.memory.versions(a["memory_id"], _scope(a))
    return {"versions": [version.as_json() for version in versions]}


_CALLS: dict[str, Callable[[Pilothouse, dict[str, Any]], Awaitable[dict[str, Any]]]] = {
    "pilothouse_memory_list": _list,
    "pilothouse_memory_get": _get,
    "pilothouse_memory_search": _search,
    "pilothouse_memory_add": _add,
    "pilothouse_memory_edit": _edit,
    "pilothouse_memory_forget": _forget,
    "pilothouse_memory_versions": _versions,
}


async def call_memory_tool(ph: Pilothouse, name: str, args: dict[str, Any]) -> mt.CallToolResult:
    """Run one memory tool whose arguments were checked against its schema.

    Args:
        ph: the caller's tenant facade.
        name: one of :data:`MEMORY_TOOLS`' names.
        args: the checked arguments.

    Returns:
        The result: its JSON as text and as structured content.

    Raises:
        PilothouseError: what the memory door refused (a missing record, a bad scope).
    """
    import json

    data = await _CALLS[name](ph, args)
    return mt.CallToolResult(
        content=[mt.TextContent(text=json.dumps(data, ensure_ascii=False, default=str))],
        structured_content=data,
    )
