"""The MCP server's tools and prompts for one tenant: actions, agents, skills.

Every active action is a tool ``action_<CODE>`` and every active agent a tool
``agent_<CODE>``; calling one runs a governed, audited conversation through
:meth:`CommandApi.start_and_send` (the same turn as REST or JSON-RPC). A
tool's input schema is built from the action:

- ``message``: the user's message (required unless the action has an input
  schema);
- one string per ``{placeholder}`` of the action's (and agent's) prompt,
  required;
- ``data``: the action's input schema (item, or a list), required when the
  action has one, sent to the model as JSON after the message.

Its output schema is the action's output schema (a list or a non-object
schema wrapped as ``{"items": [...]}`` / ``{"result": ...}``, since MCP
wants an object), and ``structuredContent`` carries the checked answer.

The tenant's catalog tools that run on their own (python, rest, script and
mcp kinds; :meth:`CommandApi.callable_tools`) are tools ``tool_<name>``;
calling one runs :meth:`CommandApi.call_tool`: governed like a call in a
turn (policy, authorizer, skill access level, sandbox, timeout) and
recorded as a conversation of its own, named in the result's ``_meta``.

Scoped long-term memory is a set of tools ``pilothouse_memory_*``
(:mod:`pilothouse._facade.mcpmemory`), always there. Two more pilothouse
tools: ``pilothouse_answer`` answers the
questions a conversation asked (it waits, ``WA``), and, when a tenant has
more actions than a client should see at once (``max_tools``), the action
tools are not listed but disclosed on demand by ``pilothouse_find_actions``
and run by ``pilothouse_run_action`` (every MCP client degrades past some
20–40 tools). Skills are MCP prompts: their name is the skill's code, their
text the skill's prompt.
"""

from __future__ import annotations

__all__ = ["ANSWER", "FIND", "RUN", "McpToolbox", "tool_name"]

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import mcp_types as mt

from pilothouse._facade.mcpgateway import GatewayTool
from pilothouse._facade.mcpmemory import MEMORY_TOOLS, call_memory_tool
from pilothouse.catalog._enums import Cardinality, ProcessStatus, SchemaDirection, ToolCallStatus
from pilothouse.errors import PilothouseError
from pilothouse.runtime._prompt import template_fields

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping, Sequence

    from pilothouse._facade.mcpgateway import Gateways
    from pilothouse.api import Pilothouse
    from pilothouse.catalog._models import Action
    from pilothouse.runtime._events import Question
    from pilothouse.types import McpCaller, TurnResult

    Ranker = Callable[[str, Mapping[str, str], int], Awaitable[Sequence[str]]]
    """Orders descriptions (name -> text) by meaning for a request: the best names first."""

logger = logging.getLogger(__name__)

ANSWER = "pilothouse_answer"
FIND = "pilothouse_find_actions"
RUN = "pilothouse_run_action"
_META = "pilothouse/conversation_uuid"
_SOURCES = "pilothouse/sources"
FIND_TOP = 8
"""How many actions ``pilothouse_find_actions`` returns when it ranks by meaning."""
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


def tool_name(kind: str, code: str) -> str:
    """Return the MCP tool name of an action or agent (``action_SUMBRAND``)."""
    return f"{kind}_{_UNSAFE.sub('_', code)}"[:128]


@dataclass(frozen=True)
class _CatalogTool:
    """One catalog tool offered as an MCP tool."""

    tool: mt.Tool
    name: str
    """The catalog tool's own name (what ``call_tool`` takes)."""


@dataclass(frozen=True)
class _Entry:
    """One action or agent offered as a tool."""

    tool: mt.Tool
    action: str
    agent: str | None
    placeholders: frozenset[str]
    has_data: bool
    output: str | None
    """How the answer goes into structuredContent: None (no output schema),
    ``object`` (as it is), ``items`` or ``result`` (wrapped)."""


def _schema(action: Action, direction: SchemaDirection) -> tuple[dict[str, Any], bool] | None:
    for item in action.schemas:
        if item.direction is direction:
            return dict(item.json_schema), item.cardinality is Cardinality.LIST
    return None


def _output(action: Action) -> tuple[dict[str, Any] | None, str | None]:
    found = _schema(action, SchemaDirection.OUTPUT)
    if found is None:
        return None, None
    schema, is_list = found
    if is_list:
        wrapped = {"type": "array", "items": schema}
        return {"type": "object", "properties": {"items": wrapped}, "required": ["items"]}, "items"
    if schema.get("type") == "object":
        return schema, "object"
    return {"type": "object", "properties": {"result": schema}, "required": ["result"]}, "result"


def _entry(action: Action, kind: str, code: str, description: str, extra_prompt: str) -> _Entry:
    placeholders = frozenset(template_fields(action.prompt) | template_fields(extra_prompt))
    properties: dict[str, Any] = {
        "message": {
            "type": "string",
            "minLength": 1,
            "description": "Your message (the user turn).",
        }
    }
    required: list[str] = []
    for name in sorted(placeholders):
        properties[name] = {"type": "string", "description": f"Fills {{{name}}} in the prompt."}
        required.append(name)
    data = _schema(action, SchemaDirection.INPUT)
    if data is not None:
        schema, is_list = data
        properties["data"] = {
            **({"type": "array", "items": schema} if is_list else schema),
            "description": "The input data, sent to the model as JSON.",
        }
        required.append("data")
    else:
        required.append("message")
    output_schema, output = _output(action)
    tool = mt.Tool(
        name=tool_name(kind, code),
        title=action.name or code,
        description=description,
        input_schema={
            "type": "object",
            "properties": properties,
            "required": sorted(set(required)),
            "additionalProperties": False,
        },
        output_schema=output_schema,
    )
    return _Entry(
        tool, action.code, code if kind == "agent" else None, placeholders, data is not None, output
    )


_ANSWER_TOOL = mt.Tool(
    name=ANSWER,
    title="Answer a conversation's questions",
    description=(
        "Answer the questions an action asked (its result said it waits for answers) "
        "and continue its conversation; returns the action's result."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "conversation_uuid": {"type": "string", "minLength": 1},
            "answers": {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "description": "The answer to each question, by question id.",
            },
        },
        "required": ["conversation_uuid", "answers"],
        "additionalProperties": False,
    },
)
_FIND_TOOL = mt.Tool(
    name=FIND,
    title="Find actions",
    description=(
        "List the actions (tasks) and tools you can run, with each one's input schema. "
        "Say what you want to do: those whose text holds all your words come first; when "
        "none does, the closest in meaning. Run one with pilothouse_run_action."
    ),
    input_schema={
        "type": "object",
        "properties": {"query": {"type": "string", "description": "What you want to do."}},
        "additionalProperties": False,
    },
)
_RUN_TOOL = mt.Tool(
    name=RUN,
    title="Run an action",
    description="Run an action found by pilothouse_find_actions with its arguments.",
    input_schema={
        "type": "object",
        "properties": {
            "tool": {"type": "string", "minLength": 1, "description": "The action's tool name."},
            "arguments": {"type": "object", "description": "Arguments per its input schema."},
        },
        "required": ["tool"],
        "additionalProperties": False,
    },
)


_MEMORY = {tool.name: tool for tool in MEMORY_TOOLS}


def _error(text: str) -> mt.CallToolResult:
    return mt.CallToolResult(content=[mt.TextContent(text=text)], is_error=True)


def _problems(schema: dict[str, Any], arguments: dict[str, Any]) -> str | None:
    from pilothouse.runtime._schema_patterns import schema_validator

    validator = schema_validator(schema)
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
    if not errors:
        return None
    first = errors[0]
    where = ".".join(str(p) for p in first.absolute_path) or "arguments"
    return f"{where}: {first.message}"


# Rounds of questions one call answers by elicitation before it hands the
# rest back (an action that keeps asking must not hold the call for ever).
_ELICIT_ROUNDS = 5


class Asker(Protocol):
    """Asks the MCP client's user (elicitation), when the client declared it."""

    async def approve(self, tool: str, arguments: Mapping[str, Any]) -> bool:
        """Whether the user allows ``tool`` to run with ``arguments``."""
        ...

    async def answers(self, questions: Sequence[Question]) -> dict[str, str] | None:
        """The user's answers by question id; None when declined or cancelled."""
        ...


class McpToolbox:
    """The tools and prompts one tenant offers over MCP.

    Args:
        ph: the tenant's facade; every call goes through it.
        max_tools: list the action tools only while there are at most this
            many; past it, the disclosure tools are listed instead.
        gateways: the OpenAPI gateways whose operations are tools too.
        rank: orders descriptions by meaning (seed 002's description
            embeddings); None: ``pilothouse_find_actions`` matches words only.
    """

    def __init__(
        self,
        ph: Pilothouse,
        *,
        max_tools: int,
        gateways: Gateways | None = None,
        rank: Ranker | None = None,
    ) -> None:
        self._ph = ph
        self._max_tools = max_tools
        self._gateways = gateways
        self._rank = rank

    async def _entries(self) -> dict[str, _Entry | GatewayTool | _CatalogTool]:
        actions = {a.code: a for a in await self._ph.query.get_all_actions()}
        entries: dict[str, _Entry | GatewayTool | _CatalogTool] = {}
        for callable_tool in await self._ph.command.callable_tools():
            offered = mt.Tool(
                name=tool_name("tool", callable_tool.name),
                title=callable_tool.name,
                description=callable_tool.description or callable_tool.name,
                input_schema=callable_tool.input_schema,
            )
            entries[offered.name] = _CatalogTool(offered, callable_tool.name)
        if self._gateways is not None:
            for proxied in await self._gateways.tools(self._ph):
                if proxied.tool.name in entries:
                    logger.warning(
                        "MCP gateway %s: tool %s is offered already; skipped",
                        proxied.gateway,
                        proxied.tool.name,
                    )
                    continue
                entries[proxied.tool.name] = proxied
        for action in actions.values():
            description = action.goal_description or action.name or action.code
            entry = _entry(action, "action", action.code, description, "")
            entries[entry.tool.name] = entry
        for target in await self._ph.query.list_targets():
            kind, _, code = target.target_id.partition(":")
            if kind != "agent":
                continue
            agent = await self._ph.query.find_agent_by_code(code)
            if agent is None or agent.goal_action is None or agent.goal_action.code not in actions:
                continue
            goal = actions[agent.goal_action.code]
            description = f"{agent.name or code}: {goal.goal_description or goal.name or goal.code}"
            entry = _entry(goal, "agent", code, description, agent.prompt or "")
            entries[entry.tool.name] = entry
        return entries

    async def list_tools(self, caller: McpCaller) -> list[mt.Tool]:
        """Return the tools ``caller`` may see; a denied tool is never listed."""
        entries = [e.tool for e in (await self._entries()).values() if caller.allows(e.tool.name)]
        tools = [_ANSWER_TOOL, *MEMORY_TOOLS]
        if len(entries) > self._max_tools:
            tools.extend([_FIND_TOOL, _RUN_TOOL])
        else:
            tools.extend(entries)
        return [t for t in tools if caller.allows(t.name)]

    async def call_tool(
        self,
        caller: McpCaller,
        name: str,
        arguments: dict[str, Any] | None,
        ask: Asker | None = None,
    ) -> mt.CallToolResult:
        """Call a tool; every failure is a tool error result, never an exception.

        With ``ask`` (the client declared elicitation), a call that needs
        approval asks the user, and an action's questions are asked too; the
        answers resume the turn. Without it, a call needing approval is
        denied and questions come back for ``pilothouse_answer``.
        """
        # Not allowed and not there read the same: a caller learns nothing of
        # the tools it may not use.
        unknown = _error(f"unknown tool '{name}'")
        if not caller.allows(name):
            return unknown
        args = dict(arguments or {})
        try:
            if name == ANSWER:
                if (problem := _problems(_ANSWER_TOOL.input_schema, args)) is not None:
                    return _error(problem)
                answers = cast("dict[str, str]", args["answers"])
                turn = await self._ph.command.submit_answers(args["conversation_uuid"], answers)
                return self._result(None, await self._elicited(turn, ask))
            memory = _MEMORY.get(name)
            if memory is not None:
                if (problem := _problems(memory.input_schema, args)) is not None:
                    return _error(problem)
                return await call_memory_tool(self._ph, name, args)
            entries = await self._entries()
            if name == FIND:
                return await self._find(caller, entries, args)
            if name == RUN:
                if (problem := _problems(_RUN_TOOL.input_schema, args)) is not None:
                    return _error(problem)
                name = str(args["tool"])
                args = cast("dict[str, Any]", args.get("arguments") or {})
                if not caller.allows(name):
                    return _error(f"unknown tool '{name}'")
            entry = entries.get(name)
            if entry is None:
                return _error(f"unknown tool '{name}'")
            if isinstance(entry, GatewayTool):
                assert self._gateways is not None
                if (problem := _problems(entry.tool.input_schema, args)) is not None:
                    return await self._gateways.refuse(caller, entry, problem)
                return await self._gateways.call(caller, entry, args)
            if isinstance(entry, _CatalogTool):
                return await self._call_catalog_tool(caller, entry, args, ask)
            return await self._run(entry, args, ask)
        except PilothouseError as exc:
            return _error(exc.public_message)

    async def _call_catalog_tool(
        self, caller: McpCaller, entry: _CatalogTool, args: dict[str, Any], ask: Asker | None
    ) -> mt.CallToolResult:
        outcome = await self._ph.command.call_tool(
            entry.name,
            args,
            via="mcp",
            key_prefix=caller.key_prefix,
            approve=ask.approve if ask is not None else None,
        )
        failed = outcome.status is not ToolCallStatus.SUCCEEDED
        data: Any = outcome.data
        result = mt.CallToolResult(
            content=[mt.TextContent(text=outcome.content)],
            is_error=failed,
            structured_content=cast("dict[str, Any]", data) if isinstance(data, dict) else None,
        )
        # Which conversation recorded the call: the caller can read its transcript.
        result.meta = {_META: outcome.conversation_uuid}
        return result

    async def _find(
        self,
        caller: McpCaller,
        entries: dict[str, _Entry | GatewayTool | _CatalogTool],
        args: dict[str, Any],
    ) -> mt.CallToolResult:
        if (problem := _problems(_FIND_TOOL.input_schema, args)) is not None:
            return _error(problem)
        query = str(args.get("query") or "")
        words = query.lower().split()
        allowed = {name: e.tool for name, e in entries.items() if caller.allows(e.tool.name)}

        def text(tool: mt.Tool) -> str:
            return f"{tool.name} {tool.title or ''} {tool.description or ''}".lower()

        chosen = [tool for tool in allowed.values() if all(word in text(tool) for word in words)]
        if not chosen and words and self._rank is not None:
            # No action holds every word: the closest in meaning (clients
            # degrade past ~20-40 tools, so a few, never the whole catalog).
            descriptions = {
                name: f"{tool.title or tool.name}: {tool.description or ''}"
                for name, tool in allowed.items()
            }
            chosen = [allowed[name] for name in await self._rank(query, descriptions, FIND_TOP)]
        found = [
            {"tool": tool.name, "description": tool.description, "inputSchema": tool.input_schema}
            for tool in chosen
        ]
        return mt.CallToolResult(
            content=[mt.TextContent(text=json.dumps(found, indent=1))],
            structured_content={"actions": found},
        )

    async def _elicited(self, turn: TurnResult, ask: Asker | None) -> TurnResult:
        """Ask a waiting turn's questions by elicitation and resume it with the answers."""
        rounds = 0
        while ask is not None and turn.status is ProcessStatus.WAITING and turn.questions:
            if rounds == _ELICIT_ROUNDS:
                break
            rounds += 1
            answers = await ask.answers(turn.questions)
            if answers is None:
                break  # declined: the questions go back as today, for pilothouse_answer
            turn = await self._ph.command.submit_answers(turn.conversation_uuid, answers)
        return turn

    async def _run(
        self, entry: _Entry, args: dict[str, Any], ask: Asker | None = None
    ) -> mt.CallToolResult:
        if (problem := _problems(entry.tool.input_schema, args)) is not None:
            return _error(problem)
        message = cast("str | None", args.get("message"))
        parts = [message] if message else []
        if entry.has_data:
            parts.append(json.dumps(args["data"], ensure_ascii=False))
        input_data = {name: args.get(name, message) for name in entry.placeholders}
        turn = await self._ph.command.start_and_send(
            "\n\n".join(parts), action=entry.action, agent=entry.agent, input_data=input_data
        )
        return self._result(entry, await self._elicited(turn, ask))

    def _result(self, entry: _Entry | None, turn: TurnResult) -> mt.CallToolResult:
        result = self._outcome(entry, turn)
        # Which conversation recorded the call: the caller can read its transcript.
        meta: dict[str, Any] = {_META: turn.conversation_uuid}
        if turn.sources:
            # The chunks a retrieval-augmented answer was given, as every face returns them.
            meta[_SOURCES] = [source.to_dict() for source in turn.sources]
        result.meta = meta
        return result

    def _outcome(self, entry: _Entry | None, turn: TurnResult) -> mt.CallToolResult:
        if turn.status is ProcessStatus.WAITING:
            asked = [{"id": q.id, "question": q.question} for q in turn.questions]
            text = (
                f"The action asks before it can answer: {json.dumps(asked, ensure_ascii=False)}. "
                f"Answer with the tool {ANSWER} (conversation_uuid "
                f"'{turn.conversation_uuid}', answers by id)."
            )
            return mt.CallToolResult(content=[mt.TextContent(text=text)], is_error=True)
        if turn.status is not ProcessStatus.COMPLETED:
            detail = turn.error or f"the conversation ended with status {turn.status.value}"
            return mt.CallToolResult(
                content=[mt.TextContent(text=f"the action failed: {detail}")],
                is_error=True,
            )
        if turn.tool_calls:
            calls = [
                {"id": c.id, "tool": c.name, "arguments": c.arguments} for c in turn.tool_calls
            ]
            text = (
                "The action returned tool calls for its caller to run, which MCP cannot "
                f"carry: {json.dumps(calls, ensure_ascii=False)}"
            )
            return mt.CallToolResult(content=[mt.TextContent(text=text)], is_error=True)
        structured: dict[str, Any] | None = None
        if entry is not None and entry.output is not None:
            structured = (
                cast("dict[str, Any]", turn.output)
                if entry.output == "object"
                else {entry.output: turn.output}
            )
        text = turn.text if structured is None else json.dumps(turn.output, ensure_ascii=False)
        return mt.CallToolResult(content=[mt.TextContent(text=text)], structured_content=structured)

    async def list_prompts(self) -> list[mt.Prompt]:
        """Return the tenant's active skills as prompts."""
        prompts: list[mt.Prompt] = []
        for entry in await self._ph.catalog.list_entries("skills", active=True):
            document = entry.document
            prompts.append(
                mt.Prompt(
                    name=entry.key,
                    title=str(document.get("name") or entry.key),
                    description=str(document.get("description") or document.get("name") or ""),
                )
            )
        return prompts

    async def get_prompt(self, name: str) -> mt.GetPromptResult:
        """Return a skill's prompt.

        Raises:
            NotFoundError: no active skill has this code.
        """
        entry = await self._ph.catalog.get("skills", name)
        if not entry.active:
            from pilothouse.errors import NotFoundError

            raise NotFoundError(f"no skill '{name}'")
        document = entry.document
        return mt.GetPromptResult(
            description=str(document.get("description") or document.get("name") or name),
            messages=[
                mt.PromptMessage(role="user", content=mt.TextContent(text=str(document["prompt"])))
            ],
        )
