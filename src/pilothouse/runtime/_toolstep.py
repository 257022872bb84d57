"""One step of the tool loop: run the calls of one response and say what's next.

A step turns the repaired calls of a model response into executions
(catalog and MCP tools), skill activations (``use_skill``), questions for
the user (``AskUserQuestion``) and calls returned to the caller (custom
schema tools), and produces the batch to record plus either the next request
for the model, a pause for answers, or the end of the turn with calls for
the caller.
"""

from __future__ import annotations

__all__ = [
    "StepOutcome",
    "answers_reply",
    "normalized_response",
    "results_as_text",
    "run_tool_step",
]

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pydantic_ai.messages import (
    ModelRequest,
    ModelRequestPart,
    ModelResponse,
    ModelResponsePart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pilothouse.catalog._enums import MessageRole, TimelineKind, ToolCallStatus
from pilothouse.runtime._repair import CallProblem, RepairedCall
from pilothouse.runtime._toolexec import Execution, ToolExecutor
from pilothouse.runtime._toolset import ASK_USER, USE_SKILL, SkillInfo, ToolSet, activate
from pilothouse.runtime._toolset import skill_reply as _skill_reply
from pilothouse.store._writer import NewEvent, NewMessage, NewToolCall, ToolCallOutcome, TurnBatch


@dataclass
class StepOutcome:
    """What a tool step produced.

    Attributes:
        batch: messages, tool calls, outcomes and events to record.
        request: the tool results to send back to the model, when the loop goes on.
        questions: the questions asked, when the turn pauses for answers.
        returned: calls handed to the caller, when the turn ends with them.
        activated: skill codes activated in this step.
        only_repeats: every call asked again for a result the turn already had.
    """

    batch: TurnBatch
    request: ModelRequest | None = None
    questions: list[dict[str, Any]] | None = None
    returned: list[dict[str, Any]] | None = None
    activated: list[str] = field(default_factory=lambda: [])
    only_repeats: bool = False


def normalized_response(
    response: ModelResponse, calls: Sequence[RepairedCall], problems: Sequence[CallProblem]
) -> ModelResponse:
    """The response as the history should hold it: one well-formed part per call.

    Calls repaired from text, or given new ids, must appear as tool calls
    with those ids, or the results sent back would answer nothing.
    """
    from_text = any(c.from_text for c in calls) or any(p.from_text for p in problems)
    parts: list[ModelResponsePart] = [
        part
        for part in response.parts
        if not isinstance(part, ToolCallPart) and not (from_text and isinstance(part, TextPart))
    ]
    by_id: dict[str, tuple[str, dict[str, Any]]] = {}
    for call in calls:
        by_id[call.call_id] = (call.name, call.arguments)
    for problem in problems:
        by_id.setdefault(problem.call_id, (problem.name, {}))
    parts.extend(ToolCallPart(name, args, tool_call_id=cid) for cid, (name, args) in by_id.items())
    return replace(response, parts=parts)


def _questions(call: RepairedCall) -> list[dict[str, Any]]:
    raw: list[Any] = call.arguments.get("questions") or [call.arguments]
    questions: list[dict[str, Any]] = []
    for index, item in enumerate(raw, start=1):
        question = cast("dict[str, Any]", item) if isinstance(item, dict) else {"question": item}
        choices = cast("list[Any]", question.get("choices") or [])
        questions.append(
            {
                "id": str(question.get("id") or f"q{index}"),
                "question": str(question.get("question", "")),
                "choices": [str(c) for c in choices],
                "call_id": call.call_id,
            }
        )
    return questions


def _tool_message(call_id: str, name: str, content: str, **data: Any) -> NewMessage:
    return NewMessage(
        MessageRole.TOOL, content, tool_call_id=call_id, data={"tool_name": name, **data}
    )


async def run_tool_step(
    *,
    tenant: str,
    conversation_uuid: str,
    response: ModelResponse,
    text: str,
    calls: Sequence[RepairedCall],
    problems: Sequence[CallProblem],
    toolset: ToolSet,
    executor: ToolExecutor,
    skills: Sequence[SkillInfo],
    marker: dict[str, Any],
) -> StepOutcome:
    """Run one response's calls and return what to record and what comes next."""
    executable = [(c, toolset.executable[c.name]) for c in calls if c.name in toolset.executable]
    executions = {
        e.call.call_id: e
        for e in await executor.run(
            executable,
            tenant=tenant,
            conversation_uuid=conversation_uuid,
            timeouts=toolset.timeouts,
        )
    }
    listed = [
        *(NewToolCall(c.call_id, c.name, c.arguments) for c in calls),
        *(NewToolCall(p.call_id, p.name, {}) for p in problems),
    ]
    all_calls = [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in listed]
    batch = TurnBatch(
        messages=[
            NewMessage(
                MessageRole.ASSISTANT,
                text,
                token_count=response.usage.output_tokens,
                data={"tool_calls": all_calls, "ai": marker},
            )
        ],
        tool_calls=listed,
    )
    returns: list[ModelRequestPart] = []
    outcome = StepOutcome(batch=batch)
    outcome.only_repeats = (
        bool(executions)
        and len(executions) == len(calls)
        and all(e.repeated for e in executions.values())
    )
    asked: list[dict[str, Any]] = []
    returned: list[dict[str, Any]] = []
    for call in calls:
        repairs = {"repairs": call.repairs} if call.repairs else {}
        if call.call_id in executions:
            _record_execution(batch, returns, executions[call.call_id], repairs)
        elif call.name == USE_SKILL:
            activated = activate(skills, str(call.arguments.get("skill", "")))
            outcome.activated.extend(s.code for s in activated)
            reply = _skill_reply(activated) or "unknown skill"
            batch.messages.append(
                _tool_message(call.call_id, call.name, reply, activated=outcome.activated)
            )
            batch.outcomes.append(ToolCallOutcome(call.call_id, ToolCallStatus.SUCCEEDED, reply))
            batch.events.append(
                NewEvent(
                    TimelineKind.TOOL_EXECUTION,
                    {"call_id": call.call_id, "tool": USE_SKILL, "activated": outcome.activated},
                )
            )
            returns.append(ToolReturnPart(USE_SKILL, reply, tool_call_id=call.call_id))
        elif call.name == ASK_USER:
            asked.extend(_questions(call))
        else:
            returned.append({"id": call.call_id, "name": call.name, "arguments": call.arguments})
            batch.outcomes.append(
                ToolCallOutcome(call.call_id, ToolCallStatus.RETURNED, "returned to the caller")
            )
    for problem in problems:
        message = f"tool.call.invalid: {problem.message}"
        batch.messages.append(_tool_message(problem.call_id, problem.name, message, invalid=True))
        batch.outcomes.append(ToolCallOutcome(problem.call_id, ToolCallStatus.FAILED, message))
        batch.events.append(
            NewEvent(
                TimelineKind.TOOL_EXECUTION,
                {"call_id": problem.call_id, "tool": problem.name, "status": "invalid"},
            )
        )
        returns.append(
            ToolReturnPart(problem.name, message, tool_call_id=problem.call_id, outcome="retried")
        )
    if asked:
        for question in asked:
            batch.messages.append(
                NewMessage(
                    MessageRole.QUESTION,
                    question["question"],
                    tool_call_id=question["call_id"],
                    data={"question_id": question["id"], "choices": question["choices"]},
                )
            )
        outcome.questions = asked
        return outcome
    if returned:
        outcome.returned = returned
        return outcome
    outcome.request = ModelRequest(parts=returns)
    return outcome


def _record_execution(
    batch: TurnBatch,
    returns: list[ModelRequestPart],
    execution: Execution,
    repairs: dict[str, Any],
) -> None:
    call = execution.call
    batch.messages.append(
        _tool_message(
            call.call_id,
            call.name,
            execution.content,
            status=execution.status.value,
            error_code=execution.error_code,
        )
    )
    batch.outcomes.append(ToolCallOutcome(call.call_id, execution.status, execution.content))
    batch.events.append(
        NewEvent(
            TimelineKind.TOOL_EXECUTION,
            {
                "call_id": call.call_id,
                "tool": call.name,
                "status": execution.status.value,
                "error_code": execution.error_code,
                "ms": execution.ms,
                **({"repeated": True} if execution.repeated else {}),
                **({"overrides": execution.overrides} if execution.overrides else {}),
                **repairs,
            },
        )
    )
    failed = execution.status is not ToolCallStatus.SUCCEEDED
    returns.append(
        ToolReturnPart(
            call.name,
            execution.content,
            tool_call_id=call.call_id,
            outcome=("denied" if execution.status is ToolCallStatus.DENIED else "failed")
            if failed
            else "success",
        )
    )


def answers_reply(questions: Sequence[dict[str, Any]], answers: dict[str, str]) -> str:
    """The AskUserQuestion result the model sees once the user answered."""
    return json.dumps(
        {
            "answers": [
                {"id": q["id"], "question": q["question"], "answer": answers[q["id"]]}
                for q in questions
            ]
        },
        ensure_ascii=False,
    )


def results_as_text(request: ModelRequest) -> ModelRequest:
    """The tool results of a step as one user message, for models that read text best."""
    lines = [
        f"The {part.tool_name} tool returned: {part.model_response_str()}"
        for part in request.parts
        if isinstance(part, ToolReturnPart)
    ]
    lines.append("Answer my question using this result.")
    return ModelRequest(parts=[UserPromptPart("\n".join(lines))])
