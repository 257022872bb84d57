"""One MCP server tool as an :class:`~pilothouse.tools.ExecutableTool`.

An :class:`McpTool` carries the definition the model sees (from the server's
``tools/list``) and calls ``tools/call`` through the pool, which owns the
session. The call's outcome is always a :class:`ToolResult`: the server's
content as text, ``isError`` as ``tool.exec.error``, an expired timeout as
``tool.exec.timeout`` and an unreachable server as ``tool.exec.unavailable``.
A result longer than :data:`MAX_RESULT_BYTES` is cut, as a REST tool's is.
"""

from __future__ import annotations

__all__ = ["MAX_RESULT_BYTES", "McpTool", "exposed_name", "to_tool_result"]

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import mcp_types as types

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolResult

if TYPE_CHECKING:
    from pilothouse.mcp._config import McpClientConfig
    from pilothouse.mcp._pool import McpClientPool

MAX_RESULT_BYTES = 1024 * 1024
"""The most of an MCP tool's result (UTF-8 bytes) kept, stored and sent to the model.

The server is whoever the catalog (or an ``/v1/invoke`` caller) names; its
answer is stored with the conversation and sent to the model on every later
turn, so megabytes of it would fill the database and the context window.
"""

_INVALID_NAME_CHARACTERS = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME = 64


def exposed_name(tool_name: str, prefix: str | None = None) -> str:
    """The function name the model sees for an MCP tool.

    Characters a model API refuses in a function name (anything outside
    ``[a-zA-Z0-9_-]``, e.g. the dots and slashes MCP allows) become ``_``,
    and the name is cut to 64 characters.

    Args:
        tool_name: the tool's name on its server.
        prefix: the client name to put in front (``<client>_<tool>``), used
            only when names clash.

    Returns:
        A valid function name.
    """
    name = f"{prefix}_{tool_name}" if prefix else tool_name
    return _INVALID_NAME_CHARACTERS.sub("_", name)[:_MAX_NAME] or "_"


def _object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    # Function calling needs an object schema; a server that declares none
    # (or an empty one) takes no arguments.
    parameters = dict(schema)
    parameters.setdefault("type", "object")
    if parameters["type"] == "object":
        parameters.setdefault("properties", {})
    return parameters


def _describe_block(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        # The model gets a note, not base64: pasting the bytes would burn
        # tokens and a text channel cannot show the picture anyway.
        return f"[image: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}, {len(block.data) * 3 // 4} bytes]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.name} {block.uri}]"
    resource = block.resource
    if isinstance(resource, types.TextResourceContents):
        return resource.text
    return f"[resource: {resource.uri}, {resource.mime_type or 'binary'}]"


def to_tool_result(result: types.CallToolResult) -> ToolResult:
    """Map an MCP ``tools/call`` result to a :class:`ToolResult`.

    Text blocks are joined by newlines; images, audio and binary resources
    become short notes; structured content is kept as ``data`` and, when the
    server sent no text, serialized as the content.

    Args:
        result: the server's answer.

    Returns:
        The result for the model; ``isError`` becomes ``is_error`` with the
        code ``tool.exec.error``. Text past :data:`MAX_RESULT_BYTES` is cut
        (the end says how much came), and structured content that large
        is not kept.
    """
    parts = [_describe_block(block) for block in result.content]
    structured = result.structured_content
    if not any(isinstance(block, types.TextContent) for block in result.content) and structured:
        parts.append(json.dumps(structured, ensure_ascii=False))
    content = "\n".join(parts)
    encoded = content.encode()
    if len(encoded) > MAX_RESULT_BYTES:
        # A cut may split a character: its fragment is dropped, not replaced.
        kept = encoded[:MAX_RESULT_BYTES].decode(errors="ignore")
        content = f"{kept}…[truncated: {MAX_RESULT_BYTES} of {len(encoded)} bytes]"
    if structured is not None and len(json.dumps(structured, default=str)) > MAX_RESULT_BYTES:
        # Kept whole it would be stored whole; the (cut) text says what came.
        structured = None
    if result.is_error:
        return ToolResult(
            content=content or "the MCP tool failed without saying why",
            is_error=True,
            error_code="tool.exec.error",
            data=structured,
        )
    return ToolResult(content=content, data=structured)


class McpTool:
    """A tool of an MCP server, called through the pool's shared session.

    Args:
        pool: the pool that owns the session.
        config: the MCP client the tool belongs to.
        tool: the tool as the server listed it.
        name: the name the model sees; defaults to the server's name made valid.
        policy: whether the tool may run without an authorizer's yes; MCP
            tools are allowed by default.
    """

    def __init__(
        self,
        pool: McpClientPool,
        config: McpClientConfig,
        tool: types.Tool,
        *,
        name: str | None = None,
        policy: ExecutionPolicy = ExecutionPolicy.ALLOW,
    ) -> None:
        self._pool = pool
        self._config = config
        self._tool = tool
        self._policy = policy
        self._definition = ToolDefinition(
            name=name or exposed_name(tool.name),
            description=tool.description or tool.title or tool.name,
            parameters=_object_schema(tool.input_schema),
            output_schema=tool.output_schema,
        )

    @property
    def definition(self) -> ToolDefinition:
        """What the model sees."""
        return self._definition

    @property
    def kind(self) -> ToolKind:
        """Always :attr:`ToolKind.MCP`."""
        return ToolKind.MCP

    @property
    def policy(self) -> ExecutionPolicy:
        """Allowed unless the catalog says otherwise."""
        return self._policy

    @property
    def client_name(self) -> str:
        """The MCP client the tool belongs to."""
        return self._config.name

    @property
    def remote_name(self) -> str:
        """The tool's name on its server (what ``tools/call`` is sent)."""
        return self._tool.name

    def renamed(self, name: str) -> McpTool:
        """The same tool under another name for the model (e.g. prefixed).

        Args:
            name: the new function name.

        Returns:
            A new tool; the server still gets the original name.
        """
        return McpTool(self._pool, self._config, self._tool, name=name, policy=self._policy)

    def with_policy(self, policy: ExecutionPolicy) -> McpTool:
        """The same tool under another execution policy.

        Args:
            policy: the catalog's policy for this tool.

        Returns:
            A new tool with that policy.
        """
        return McpTool(
            self._pool, self._config, self._tool, name=self._definition.name, policy=policy
        )

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Call the tool on its server within ``context.timeout`` seconds.

        Args:
            arguments: the validated arguments.
            context: where the call happens; its timeout bounds the call.

        Returns:
            The server's answer, or an error result (``tool.exec.error``,
            ``tool.exec.timeout``, ``tool.exec.unavailable``); never raises
            for a failing or unreachable server.
        """
        return await self._pool.call_tool(
            self._config, self._tool.name, arguments, timeout=context.timeout
        )

    def __repr__(self) -> str:
        return f"McpTool({self._config.name!r}, {self._tool.name!r} as {self._definition.name!r})"
