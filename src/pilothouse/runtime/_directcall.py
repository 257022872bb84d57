"""One catalog tool run outside a turn: governed like a turn's call, recorded like one.

An MCP client (or Python code) may call a catalog tool directly, without a
model. The call is governed by the very code a turn's call goes through:
the tool is built by the process's tool source (the registry with its
script sandbox, the MCP client pool, the gateway proxy), wrapped
``authorized`` when an active skill links it with access ``write`` or
``execute``, its arguments checked against its schema, and run by the
turn's :class:`~pilothouse.runtime._toolexec.ToolExecutor` (policy, the
authorizer, the tool's timeout).

It is recorded as a conversation of its own (action code
:data:`DIRECT_TOOL_ACTION`), so the audit trail reads like a turn's: an
assistant message carrying the call (the caller, not pilothouse's model,
asked for it: it has no AI-generated marker, and names the caller), the
tool call row with its status and result, the tool message, the timeline
(start, the ``tool_execution`` event with its timing, the status change),
and the conversation ``CO`` (the tool succeeded) or ``FA`` (it failed or
was denied, the reason in ``error_detail``). Transcripts, conversation
lists and exports show it with no new table.
"""

from __future__ import annotations

__all__ = [
    "DIRECT_TOOL_ACTION",
    "CallableTool",
    "DirectToolCall",
    "callable_tools",
    "run_catalog_tool",
]

import logging
import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy import select

from pilothouse._caller import Caller
from pilothouse.catalog._enums import (
    ExecutionPolicy,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
    ToolKind,
)
from pilothouse.catalog._models import DIRECT_TOOL_ACTION, Skill, SkillTool, Tool
from pilothouse.errors import InvalidFieldError, NotFoundError, ServiceUnavailableError
from pilothouse.runtime._record import status_event
from pilothouse.runtime._repair import RepairedCall
from pilothouse.runtime._toolexec import Execution, ToolExecutor
from pilothouse.runtime._toolset import build_toolset
from pilothouse.runtime._toolstep import record_execution
from pilothouse.store import NewEvent, NewMessage, NewToolCall, TurnBatch
from pilothouse.store._base import utcnow
from pilothouse.tools._base import ExecutableTool, ToolContext, ToolDefinition, ToolResult

if TYPE_CHECKING:
    from pilothouse.runtime._runner import Runner

logger = logging.getLogger(__name__)


RUNNABLE = frozenset({ToolKind.PYTHON, ToolKind.REST, ToolKind.SCRIPT, ToolKind.MCP})
"""Kinds a direct call runs: ``schema`` tools are the caller's own to run, ``event``
tools wait on the bus for a worker, and a gateway row is many tools."""


@dataclass(frozen=True, slots=True)
class DirectToolCall:
    """The outcome of one catalog tool run outside a turn.

    Attributes:
        conversation_uuid: the conversation that records it.
        tool: the name it ran under, as a turn offers it (the row's name;
            for an ``mcp`` row, its server's tool name).
        status: ``SU`` (succeeded), ``FA`` (failed) or ``DE`` (denied).
        content: the result text (what a model would read), or why it failed.
        data: the structured result, when the tool gave one.
        error_code: ``tool.exec.*`` when it failed or was denied.
    """

    conversation_uuid: str
    tool: str
    status: ToolCallStatus
    content: str
    data: Any = None
    error_code: str | None = None


def is_offered(row: Tool) -> bool:
    """Whether a catalog tool can be called directly (active, runnable, not a gateway)."""
    return row.active and row.kind in RUNNABLE and "gateway" not in (row.settings or {})


@dataclass(frozen=True, slots=True)
class CallableTool:
    """A catalog tool a caller may run directly.

    Attributes:
        name: the tool's name (what :func:`run_catalog_tool` takes).
        kind: its kind.
        description: what it does.
        input_schema: the JSON schema of its arguments (the row's, else
            the one its implementation gives).
        output_schema: the schema of its structured result, when declared.
    """

    name: str
    kind: ToolKind
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


async def callable_tools(runner: Runner) -> list[CallableTool]:
    """The tenant's tools a direct call may run, by name, each with its schemas.

    A tool that cannot be built (a missing module, an MCP server down) is
    left out and logged: one broken tool must not hide the others.
    """
    from pilothouse.tools._base import ToolError

    async with runner.runtime.database.sessions() as session:
        rows = await session.scalars(
            select(Tool)
            .where(Tool.tenant == runner.tenant, Tool.active.is_(True))
            .order_by(Tool.name)
        )
        offered = [row for row in rows.unique() if is_offered(row)]
    found: list[CallableTool] = []
    for row in offered:
        try:
            if row.kind is ToolKind.MCP:
                from pilothouse.runtime._compile import mcp_lookup

                lookup = await mcp_lookup(runner.runtime.database, runner.tenant, [row])
                toolset = await build_toolset(
                    runner.tool_source,
                    tools=[row],
                    mcp_clients=[],
                    skills=[],
                    active_skills=set(),
                    default_timeout=runner.runtime.tool_timeout,
                    mcp_lookup=lookup,
                    ask_user=False,
                )
                definition = next(iter(toolset.executable.values())).definition
            else:
                definition = (await runner.tool_source.tool(row)).definition
        except ToolError as exc:
            logger.warning("tool %s cannot be offered: %s", row.name, exc)
            continue
        found.append(
            CallableTool(
                # The row's name is what call_tool takes (an mcp row's tool
                # keeps its server's name for the model).
                row.name,
                row.kind,
                definition.description,
                dict(definition.parameters) or {"type": "object", "properties": {}},
                dict(definition.output_schema) if definition.output_schema else None,
            )
        )
    return found


async def _row(runner: Runner, name: str) -> tuple[Tool, bool]:
    """The active tool called ``name`` and whether a skill guards it (write/execute link)."""
    async with runner.runtime.database.sessions() as session:
        row = (
            (
                await session.scalars(
                    select(Tool).where(Tool.tenant == runner.tenant, Tool.name == name)
                )
            )
            .unique()
            .one_or_none()
        )
        if row is None or not row.active:
            raise NotFoundError(f"no active tool named '{name}'")
        if not is_offered(row):
            raise InvalidFieldError(
                "tool",
                f"'{name}' is a {row.kind.value} tool"
                + (" gateway" if "gateway" in (row.settings or {}) else "")
                + ": only python, rest, script and mcp tools run on their own "
                "(a gateway's operations are tools of their own)",
            )
        guarded = await session.scalar(
            select(SkillTool.tool_id)
            .join(Skill, Skill.id == SkillTool.skill_id)
            .where(
                SkillTool.tool_id == row.id,
                Skill.active.is_(True),
                SkillTool.access_level.in_(("write", "execute")),
            )
            .limit(1)
        )
        return row, guarded is not None


async def run_catalog_tool(
    runner: Runner,
    name: str,
    arguments: Mapping[str, Any],
    *,
    via: str,
    key_prefix: str | None = None,
    default_audit: bool = True,
    started_by: Caller | None = None,
) -> DirectToolCall:
    """Run the tenant's catalog tool ``name`` once, governed and recorded.

    A cancel (``ph.command.cancel``, another process's) stops the tool; the
    call then returns ``failed`` with ``tool.exec.cancelled`` and the
    conversation ends ``TE``, as it does when the caller itself is cancelled.

    Raises:
        NotFoundError: no active tool has this name.
        InvalidFieldError: the tool cannot run on its own, or the arguments
            do not match its schema (nothing is recorded).
        ToolError: the tool cannot be built (nothing is recorded).
        ServiceUnavailableError: the service shut down while the tool ran
            (recorded ``TE``).

    ``started_by`` (the face and API key) is kept on the call's conversation.
    """
    with runner.runtime.tenant_egress(runner.tenant):
        return await _run_catalog_tool(
            runner,
            name,
            arguments,
            via=via,
            key_prefix=key_prefix,
            default_audit=default_audit,
            started_by=started_by,
        )


async def _run_catalog_tool(
    runner: Runner,
    name: str,
    arguments: Mapping[str, Any],
    *,
    via: str,
    key_prefix: str | None = None,
    default_audit: bool = True,
    started_by: Caller | None = None,
) -> DirectToolCall:
    from pilothouse.runtime._compile import mcp_lookup

    row, guarded = await _row(runner, name)
    runtime = runner.runtime
    lookup = await mcp_lookup(runtime.database, runner.tenant, [row])
    toolset = await build_toolset(
        runner.tool_source,
        tools=[row],
        mcp_clients=[],
        skills=[],
        active_skills=set(),
        default_timeout=runtime.tool_timeout,
        mcp_lookup=lookup,
        ask_user=False,
        guarded=frozenset({row.name}) if guarded else frozenset(),
    )
    ((tool_name, tool),) = toolset.executable.items()
    args = dict(arguments)
    errors = sorted(
        toolset.validators[tool_name].iter_errors(args), key=lambda e: list(e.absolute_path)
    )
    if errors:
        first = errors[0]
        where = ".".join(str(p) for p in first.absolute_path)
        raise InvalidFieldError(f"arguments{'.' + where if where else ''}", first.message)
    call = RepairedCall(f"call_{uuid_module.uuid4().hex[:24]}", tool_name, args)
    conversation_uuid = str(uuid_module.uuid4())
    caller: dict[str, Any] = {"via": via, "key_prefix": key_prefix, "tool_kind": row.kind.value}
    opening = TurnBatch(
        messages=[
            NewMessage(
                MessageRole.ASSISTANT,
                "",
                data={
                    "tool_calls": [{"id": call.call_id, "name": tool_name, "arguments": args}],
                    "direct_call": caller,
                },
            )
        ],
        tool_calls=[NewToolCall(call.call_id, tool_name, args)],
    )
    # Registered as a turn is, before the conversation is written: a cancel
    # (ph.command.cancel, another process's, the shutdown's) stops the call
    # and it is recorded TE, rather than the cancel ending the conversation
    # under a tool that runs on and then writes its result into it.
    scope = runtime.running.register(runner.tenant, conversation_uuid)
    try:
        handle = await runtime.store.start_turn(
            runner.tenant,
            conversation_uuid,
            action_code=DIRECT_TOOL_ACTION,
            agent_code=None,
            first=opening,
            default_audit=default_audit,
            caller=started_by,
        )
    except BaseException:
        runtime.running.unregister(runner.tenant, conversation_uuid)
        raise
    executor = ToolExecutor(
        authorizer=runner.authorizer, timeout=runtime.tool_timeout, telemetry=runtime.telemetry
    )
    # The executor records what it ran; the tool's structured data is kept
    # by wrapping it (the executor keeps the text a model would read).
    captured = _Capture(tool)
    ended = False
    try:
        execution: Execution | None = None
        with scope:
            (execution,) = await executor.run(
                [(call, captured)],
                tenant=runner.tenant,
                conversation_uuid=conversation_uuid,
                timeouts=toolset.timeouts,
                read_only=toolset.read_only,
            )
        # The last write is shielded: a caller cancelled as it starts must
        # not leave the conversation RU.
        if execution is None:  # a cancel stopped it
            why = runtime.running.why(runner.tenant, conversation_uuid)
            ended = True
            with anyio.CancelScope(shield=True):
                await runtime.store.write(handle, _cancelled(why))
            return _refused_after_cancel(conversation_uuid, tool_name, why)
        ended = True
        with anyio.CancelScope(shield=True):
            await runtime.store.write(handle, _ending(execution))
    except BaseException as exc:
        if not ended:
            # The caller went away (its request was cancelled) or the call
            # broke: the record ends here too, whatever is cancelling us.
            with anyio.CancelScope(shield=True):
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    batch = _cancelled(runtime.running.why(runner.tenant, conversation_uuid))
                else:
                    batch = _failed(f"internal error: {type(exc).__name__}")
                await runtime.store.write(handle, batch)
        raise
    finally:
        runtime.running.unregister(runner.tenant, conversation_uuid)
    return DirectToolCall(
        conversation_uuid,
        tool_name,
        execution.status,
        execution.content,
        captured.data if execution.status is ToolCallStatus.SUCCEEDED else None,
        execution.error_code,
    )


def _ending(execution: Execution) -> TurnBatch:
    """The last write of a call that ran: its result, and ``CO`` or ``FA``."""
    ending = TurnBatch()
    record_execution(ending, [], execution, {})
    succeeded = execution.status is ToolCallStatus.SUCCEEDED
    final = ProcessStatus.COMPLETED if succeeded else ProcessStatus.FAILED
    ending.events.append(status_event(ProcessStatus.RUNNING, final))
    ending.status = final
    ending.finished_at = utcnow()
    if not succeeded:
        ending.error_detail = execution.content[:2000]
    return ending


def _cancelled(requested_by: str | None) -> TurnBatch:
    """The last write of a call that was cancelled: ``TE``, as a cancelled turn's."""
    data: dict[str, Any] = {} if requested_by is None else {"requested_by": requested_by}
    return TurnBatch(
        events=[
            NewEvent(TimelineKind.CANCEL, data),
            status_event(ProcessStatus.RUNNING, ProcessStatus.TERMINATED),
        ],
        status=ProcessStatus.TERMINATED,
        finished_at=utcnow(),
    )


def _failed(detail: str) -> TurnBatch:
    """The last write of a call that broke inside pilothouse: ``FA`` with why."""
    return TurnBatch(
        events=[status_event(ProcessStatus.RUNNING, ProcessStatus.FAILED)],
        status=ProcessStatus.FAILED,
        finished_at=utcnow(),
        error_detail=detail,
    )


def _refused_after_cancel(conversation_uuid: str, tool: str, why: str | None) -> DirectToolCall:
    """What the caller of a call that a cancel stopped gets (the record says ``TE``)."""
    from pilothouse.runtime._runner import SHUTDOWN

    if why == SHUTDOWN:
        raise ServiceUnavailableError(
            f"the service is shutting down: the call of tool '{tool}' was stopped and recorded "
            f"TE (conversation {conversation_uuid})",
            retry_after=5,
        )
    return DirectToolCall(
        conversation_uuid,
        tool,
        ToolCallStatus.FAILED,
        f"the call was cancelled{f' ({why})' if why else ''} before the tool answered",
        None,
        "tool.exec.cancelled",
    )


class _Capture:
    """A tool that keeps the structured data of its result."""

    def __init__(self, tool: ExecutableTool) -> None:
        self._tool = tool
        self.data: Any = None

    @property
    def definition(self) -> ToolDefinition:
        return self._tool.definition

    @property
    def kind(self) -> ToolKind:
        return self._tool.kind

    @property
    def policy(self) -> ExecutionPolicy:
        return self._tool.policy

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        result = await self._tool.execute(arguments, context)
        self.data = result.data
        return result
