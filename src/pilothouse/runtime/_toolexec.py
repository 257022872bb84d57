"""Authorize, override and run the tool calls of one model response.

Policy first: an ``authorized`` tool never runs without an authorizer's yes,
and an authorizer, when configured, is asked before every execution. Then
the caller's parameter overrides, then execution: independent calls run
concurrently (bounded), each under a timeout, and results come back in call
order. A tool that raises or hangs becomes a recorded tool error; it never
takes the conversation down with it.
"""

from __future__ import annotations

__all__ = [
    "Authorizer",
    "Execution",
    "OverrideRule",
    "ToolExecutor",
    "apply_overrides",
]

import inspect
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio

from pilothouse.catalog._enums import ExecutionPolicy, ToolCallStatus
from pilothouse.runtime._config import RuntimeConfigError
from pilothouse.runtime._repair import RepairedCall
from pilothouse.runtime._replaytape import current_tape
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.tools._base import ExecutableTool, ToolContext, ToolResult

Authorizer = Callable[[str, Mapping[str, Any]], Awaitable[bool] | bool]
"""Given a tool name and its arguments, say whether the call may run."""


@dataclass(frozen=True)
class OverrideRule:
    """Replace an argument before execution.

    Matches by parameter name, by a substring of the value, or both; scoped
    to one tool when ``tool`` is set. Two spellings are read: ours
    (``parameter``/``contains``/``value`` = the replacement) and Vantiq's
    (``tool``/``name``/``value`` = the substring/``override`` = the
    replacement, seed 004).
    """

    value: Any
    parameter: str | None = None
    contains: str | None = None
    tool: str | None = None

    @classmethod
    def parse(cls, raw: Any) -> list[OverrideRule]:
        """Read ``toolParameterOverride``: one rule or a list of them.

        Raises:
            RuntimeConfigError: a rule has no matcher or no value.
        """
        items: list[Any] = cast("list[Any]", raw) if isinstance(raw, list) else [raw]
        rules: list[OverrideRule] = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise RuntimeConfigError(
                    f"toolParameterOverride[{index}]: must be an object with 'value' and "
                    "'parameter' and/or 'contains'"
                )
            rule = cast("dict[str, Any]", item)
            if "override" in rule:
                rules.append(cls._vantiq(index, rule))
                continue
            unknown = set(rule) - {
                "parameter",
                "name",
                "contains",
                "valueContains",
                "value",
                "tool",
            }
            if unknown:
                raise RuntimeConfigError(
                    f"toolParameterOverride[{index}]: unknown key '{sorted(unknown)[0]}'"
                )
            parameter = rule.get("parameter", rule.get("name"))
            contains = rule.get("contains", rule.get("valueContains"))
            if "value" not in rule or (parameter is None and contains is None):
                raise RuntimeConfigError(
                    f"toolParameterOverride[{index}]: needs 'value' and 'parameter' "
                    "and/or 'contains'"
                )
            rules.append(cls(rule["value"], parameter, contains, _tool(index, rule)))
        return rules

    @classmethod
    def _vantiq(cls, index: int, rule: dict[str, Any]) -> OverrideRule:
        """Vantiq's ``{tool, name, value, override}``: ``value`` is the substring to match."""
        unknown = set(rule) - {"tool", "name", "value", "override"}
        if unknown:
            raise RuntimeConfigError(
                f"toolParameterOverride[{index}]: unknown key '{sorted(unknown)[0]}' "
                "(Vantiq's form takes tool, name, value, override)"
            )
        name, contains = rule.get("name"), rule.get("value")
        if name is None and contains is None:
            raise RuntimeConfigError(
                f"toolParameterOverride[{index}]: needs 'name' and/or 'value' with 'override'"
            )
        if contains is not None and not isinstance(contains, str):
            raise RuntimeConfigError(
                f"toolParameterOverride[{index}]: 'value' is the substring to match: a string"
            )
        return cls(rule["override"], name, contains, _tool(index, rule))

    def applies_to(self, tool: str | None) -> bool:
        """Whether this rule is for calls of ``tool`` (a rule without ``tool``: every tool)."""
        return self.tool is None or tool is None or self.tool == tool

    def matches(self, name: str, value: Any) -> bool:
        """Whether this rule applies to argument ``name`` with ``value``."""
        if self.parameter is not None and self.parameter != name:
            return False
        if self.contains is not None:
            text = value if isinstance(value, str) else json.dumps(value, default=str)
            return self.contains in text
        return True


_OUR_KEYS = frozenset({"parameter", "name", "contains", "valueContains", "value", "tool"})


def _tool(index: int, rule: Mapping[str, Any]) -> str | None:
    tool = rule.get("tool")
    if tool is not None and not isinstance(tool, str):
        raise RuntimeConfigError(f"toolParameterOverride[{index}]: 'tool' must be a tool name")
    return tool


def apply_overrides(
    arguments: Mapping[str, Any], rules: Sequence[OverrideRule], tool: str | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Return the overridden arguments and what was changed (names only, for audit).

    A rule by name alone also sets a parameter the model left out (Vantiq:
    "to provide a value for an optional parameter the LLM did not set").
    """
    rules = [rule for rule in rules if rule.applies_to(tool)]
    result = dict(arguments)
    applied: list[dict[str, Any]] = []
    for rule in rules:
        if rule.parameter is not None and rule.contains is None and rule.parameter not in result:
            result[rule.parameter] = rule.value
            applied.append({"parameter": rule.parameter, "by": "parameter"})
    for name, value in arguments.items():
        for rule in rules:
            if rule.matches(name, value):
                result[name] = rule.value
                applied.append(
                    {"parameter": name, "by": "parameter" if rule.parameter else "value"}
                )
                break
    return result, applied


@dataclass
class Execution:
    """The outcome of one call, ready to record."""

    call: RepairedCall
    status: ToolCallStatus
    content: str
    error_code: str | None = None
    ms: float = 0.0
    overrides: list[dict[str, Any]] = field(default_factory=lambda: [])
    repeated: bool = False


@dataclass
class ToolExecutor:
    """Runs calls under policy, overrides, timeouts and a concurrency bound.

    Attributes:
        authorizer: asked before every execution when set.
        rules: parameter overrides from the runtime config.
        timeout: default seconds per call (a tool's own setting wins).
        concurrency: how many calls of one response run at once.
        telemetry: spans per tool call, and its meter's measurements.
        action: the action's code, for the measurements' labels.
    """

    authorizer: Authorizer | None = None
    rules: Sequence[OverrideRule] = ()
    timeout: float = 30.0
    concurrency: int = 4
    telemetry: Telemetry = field(default_factory=Telemetry)
    action: str = ""
    # Successful results of this turn by (tool, arguments): a model that asks
    # again for what it already has gets the same answer without a second
    # execution (no repeated side effects), and the loop then asks for text.
    _done: dict[str, Execution] = field(default_factory=lambda: {})

    async def run(
        self,
        calls: Sequence[tuple[RepairedCall, ExecutableTool]],
        *,
        tenant: str,
        conversation_uuid: str,
        timeouts: Mapping[str, float] | None = None,
        read_only: Collection[str] = frozenset(),
        finished: dict[str, Execution] | None = None,
    ) -> list[Execution]:
        """Run every call; results in call order.

        ``read_only`` names the tools a replay may run live (see
        :mod:`pilothouse.runtime._replaytape`). ``finished`` gets each
        execution by call id as soon as it ends, so a caller cancelled while
        others still run knows which calls finished and how.
        """
        results: list[Execution | None] = [None] * len(calls)
        limiter = anyio.CapacityLimiter(max(1, self.concurrency))

        async def one(index: int, call: RepairedCall, tool: ExecutableTool) -> None:
            key = _call_key(call)
            earlier = self._done.get(key)
            if earlier is not None:
                repeat = Execution(
                    call, earlier.status, earlier.content, earlier.error_code, 0.0, repeated=True
                )
                results[index] = repeat
                if finished is not None:
                    finished[call.call_id] = repeat
                return
            meter = self.telemetry.meter
            try:
                limiter.acquire_nowait()
            except anyio.WouldBlock:
                # Only a wait that blocked is measured: the common case costs nothing.
                waited = time.perf_counter()
                await limiter.acquire()
                if meter is not None:
                    meter.queue_wait(queue="tool_slot", seconds=time.perf_counter() - waited)
            try:
                timeout = (timeouts or {}).get(call.name, self.timeout)
                result = await self._one(
                    call, tool, tenant, conversation_uuid, timeout, call.name in read_only
                )
                if meter is not None:
                    meter.tool_call(
                        tool=call.name,
                        action=self.action,
                        status=result.status.value,
                        seconds=result.ms / 1000,
                    )
                results[index] = result
                if finished is not None:
                    finished[call.call_id] = result
                if result.status is ToolCallStatus.SUCCEEDED:
                    self._done[key] = result
            finally:
                limiter.release()

        async with anyio.create_task_group() as group:
            for index, (call, tool) in enumerate(calls):
                group.start_soon(one, index, call, tool)
        return [r for r in results if r is not None]

    async def _allowed(self, call: RepairedCall, tool: ExecutableTool) -> str | None:
        """Return why the call is denied, or None when it may run."""
        if self.authorizer is not None:
            verdict = self.authorizer(call.name, dict(call.arguments))
            if inspect.isawaitable(verdict):
                verdict = await verdict
            return None if verdict else "the authorizer denied this call"
        if tool.policy is ExecutionPolicy.AUTHORIZED:
            return "this tool needs an authorizer's approval and none is configured"
        return None

    async def _one(
        self,
        call: RepairedCall,
        tool: ExecutableTool,
        tenant: str,
        conversation_uuid: str,
        timeout: float,
        read_only: bool = False,
    ) -> Execution:
        started = time.perf_counter()
        with self.telemetry.tool_call(call.name, call.call_id):
            try:
                denial = await self._allowed(call, tool)
            except Exception as exc:
                denial = f"the authorizer failed ({type(exc).__name__})"
            if denial is not None:
                return Execution(
                    call,
                    ToolCallStatus.DENIED,
                    f"tool.exec.denied: {denial}",
                    "tool.exec.denied",
                    _ms(started),
                )
            arguments, applied = apply_overrides(call.arguments, self.rules, call.name)
            call.arguments = arguments
            tape = current_tape()
            if tape is not None:
                recorded = tape.answer(call.name, arguments, read_only=read_only)
                if recorded is not None:
                    return Execution(
                        call, ToolCallStatus.SUCCEEDED, recorded, None, _ms(started), applied
                    )
                if not tape.runs_live(call.name, read_only=read_only):
                    return Execution(
                        call,
                        ToolCallStatus.FAILED,
                        "replay.divergence: the recording has no such call of this tool"
                        + (
                            ", and only read-only tools run live in a replay"
                            if call.name in tape.live_tools
                            else ""
                        ),
                        "replay.divergence",
                        _ms(started),
                        applied,
                    )
            context = ToolContext(tenant, conversation_uuid, call.call_id, timeout)
            try:
                with anyio.fail_after(timeout):
                    result: ToolResult = await tool.execute(arguments, context)
            except TimeoutError:
                return Execution(
                    call,
                    ToolCallStatus.FAILED,
                    f"tool.exec.timeout: the tool did not answer within {timeout:g} s",
                    "tool.exec.timeout",
                    _ms(started),
                    applied,
                )
            except Exception as exc:
                return Execution(
                    call,
                    ToolCallStatus.FAILED,
                    f"tool.exec.error: {type(exc).__name__}: {exc}",
                    "tool.exec.error",
                    _ms(started),
                    applied,
                )
        status = ToolCallStatus.FAILED if result.is_error else ToolCallStatus.SUCCEEDED
        code = (result.error_code or "tool.exec.error") if result.is_error else None
        return Execution(call, status, result.content, code, _ms(started), applied)


def _call_key(call: RepairedCall) -> str:
    return call.name + ":" + json.dumps(call.arguments, sort_keys=True, default=str)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)
