"""Tool kinds and their registry.

Every tool the run loop can offer is an :class:`ExecutableTool`: Python
callables (:func:`tool`, :func:`python_tool`), REST endpoints hand-declared or
taken from an OpenAPI document (:class:`RestTool`), catalog-stored scripts
(:class:`ScriptTool`) and custom-schema tools answered by the caller
(:class:`SchemaTool`). :class:`ToolRegistry` builds them from code and from
catalog rows. MCP tools come from the MCP client pool (``pilothouse.mcp``).
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

from pilothouse.tools._base import (
    ExecutableTool,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolResult,
)
from pilothouse.tools._python import PythonTool, ToolMarker, python_tool, tool
from pilothouse.tools._registry import TOOL_NAME, ToolRegistry, validate_definition
from pilothouse.tools._rest import DEFAULT_MAX_RESPONSE_BYTES, HttpEndpoint, RestTool
from pilothouse.tools._schema_tool import SchemaTool
from pilothouse.tools._script import DEFAULT_SCRIPT_TIMEOUT, ScriptTool
