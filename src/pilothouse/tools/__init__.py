"""Tool kinds and their registry.

Every tool the run loop can offer is an :class:`ExecutableTool`: Python
callables (:func:`tool`, :func:`python_tool`), REST endpoints hand-declared or
taken from an OpenAPI document (:class:`RestTool`), catalog-stored scripts
(:class:`ScriptTool`) and custom-schema tools answered by the caller
(:class:`SchemaTool`). :class:`ToolRegistry` builds them from code and from
catalog rows. MCP tools come from the MCP client pool (``pilothouse.mcp``).

Each name is imported on first use, so a turn that offers no tools loads
none of the tool kinds (nor httpx's REST machinery behind them).
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_SCRIPT_TIMEOUT",
    "TOOL_NAME",
    "ExecutableTool",
    "HttpEndpoint",
    "PythonTool",
    "RestTool",
    "SchemaTool",
    "ScriptLimits",
    "ScriptTool",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolMarker",
    "ToolRegistry",
    "ToolResult",
    "python_tool",
    "tool",
    "validate_definition",
]

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pilothouse.tools._base import (
        ExecutableTool,
        ToolContext,
        ToolDefinition,
        ToolError,
        ToolResult,
    )
    from pilothouse.tools._limits import ScriptLimits
    from pilothouse.tools._python import PythonTool, ToolMarker, python_tool, tool
    from pilothouse.tools._registry import TOOL_NAME, ToolRegistry, validate_definition
    from pilothouse.tools._rest import DEFAULT_MAX_RESPONSE_BYTES, HttpEndpoint, RestTool
    from pilothouse.tools._schema_tool import SchemaTool
    from pilothouse.tools._script import DEFAULT_SCRIPT_TIMEOUT, ScriptTool

_LAZY: dict[str, tuple[str, ...]] = {
    "_base": ("ExecutableTool", "ToolContext", "ToolDefinition", "ToolError", "ToolResult"),
    "_limits": ("ScriptLimits",),
    "_python": ("PythonTool", "ToolMarker", "python_tool", "tool"),
    "_registry": ("TOOL_NAME", "ToolRegistry", "validate_definition"),
    "_rest": ("DEFAULT_MAX_RESPONSE_BYTES", "HttpEndpoint", "RestTool"),
    "_schema_tool": ("SchemaTool",),
    "_script": ("DEFAULT_SCRIPT_TIMEOUT", "ScriptTool"),
}
"""The names imported on first use, by the private module that defines them."""

_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
