"""Custom-schema tools: offered to the model, answered by the caller.

A ``schema`` tool has a definition (name, description, input schema from the
catalog) and no implementation. When the model calls one, the run loop stops
and hands the call to the application, which answers it on a later turn;
that is how an application lets the model "call" something only it can do.
"""

from __future__ import annotations

__all__ = ["SchemaTool"]

from collections.abc import Mapping
from typing import Any

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolResult


class SchemaTool:
    """A definition without an implementation; satisfies ``ExecutableTool``.

    Args:
        definition: what the model sees.
        policy: the execution policy (the loop may still ask an authorizer
            before returning the call).
    """

    def __init__(self, definition: ToolDefinition, policy: ExecutionPolicy) -> None:
        self._definition = definition
        self._policy = policy

    @property
    def definition(self) -> ToolDefinition:
        """What the model sees."""
        return self._definition

    @property
    def kind(self) -> ToolKind:
        """Always :attr:`ToolKind.SCHEMA`."""
        return ToolKind.SCHEMA

    @property
    def policy(self) -> ExecutionPolicy:
        """Whether it may run without an authorizer's yes."""
        return self._policy

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Refuse: the run loop returns calls of this tool to the caller.

        Args:
            arguments: ignored.
            context: ignored.

        Returns:
            Always an error result ``tool.exec.not_executable``, so a loop that
            calls it by mistake records a clear failure instead of a crash.
        """
        del arguments, context
        return ToolResult(
            content=(
                f"tool '{self._definition.name}' is answered by the application, "
                "not executed by pilothouse"
            ),
            is_error=True,
            error_code="tool.exec.not_executable",
        )
