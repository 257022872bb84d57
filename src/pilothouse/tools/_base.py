"""What every tool kind offers the run loop.

A tool of any kind (Python callable, REST operation, MCP server tool, script,
custom schema) is an :class:`ExecutableTool`: a definition the model sees, an
execution policy, and one ``execute`` coroutine. The loop validates, repairs,
authorizes and times out calls around it; a tool only does its work and
reports the outcome as a :class:`ToolResult`, never by raising for an
expected failure.
"""

from __future__ import annotations

__all__ = ["ExecutableTool", "ToolContext", "ToolDefinition", "ToolError", "ToolResult"]

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.errors import PilothouseError


@dataclass(frozen=True)
class ToolDefinition:
    """What the model sees of a tool.

    Attributes:
        name: the function name (``^[a-zA-Z0-9_-]{1,64}$``).
        description: what it does, for the model.
        parameters: a JSON schema of type object for the arguments.
        output_schema: a JSON schema of the result, when declared.
    """

    name: str
    description: str
    parameters: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ToolContext:
    """Where a call happens; passed to every execution.

    Attributes:
        tenant: the tenant of the conversation.
        conversation_uuid: the conversation.
        call_id: the model's id for this call.
        timeout: seconds the call may take (the loop enforces it too).
    """

    tenant: str
    conversation_uuid: str
    call_id: str
    timeout: float = 30.0


@dataclass(frozen=True)
class ToolResult:
    """The outcome of one call.

    Attributes:
        content: the text sent back to the model.
        is_error: the call failed; ``content`` says why, for the model.
        error_code: a stable code, e.g. ``tool.exec.timeout``.
        data: the structured result, when the tool has one.
        status_code: the HTTP status a REST tool's service answered (for
            audit rows; None for other kinds and when no answer came).
    """

    content: str
    is_error: bool = False
    error_code: str | None = None
    data: Any = field(default=None)
    status_code: int | None = None


class ToolError(PilothouseError):
    """A tool cannot be built or registered (bad reference, bad schema)."""


@runtime_checkable
class ExecutableTool(Protocol):
    """A tool the run loop can offer and call."""

    @property
    def definition(self) -> ToolDefinition:
        """What the model sees."""
        ...

    @property
    def kind(self) -> ToolKind:
        """How it is carried out."""
        ...

    @property
    def policy(self) -> ExecutionPolicy:
        """Whether it may run without an authorizer's yes."""
        ...

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Run the tool with validated arguments.

        Expected failures (a remote 4xx, a script's non-zero exit) come back
        as a ``ToolResult`` with ``is_error``; an exception is treated as a
        tool failure by the loop and recorded, never lost.
        """
        ...
