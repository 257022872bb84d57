"""One step of the tool loop: run the calls of one response and say what's next.

A step turns the repaired calls of a model response into executions
(catalog and MCP tools), skill activations (``use_skill``), questions for
the user (``AskUserQuestion``) and calls returned to the caller (custom
schema tools). It returns what comes next, with the batch to record: the
results for the model (:class:`ToolResults`), a pause for answers
(:class:`~pilothouse.runtime._turn.Paused`), or the end of the turn with
calls for the caller (:class:`~pilothouse.runtime._turn.Returned`).
"""

from __future__ import annotations

__all__ = [
    "ToolResults",
    "answers_reply",
    "CANCELLED",
    "event_command",
    "normalized_response",
    "record_execution",
    "results_as_text",
    "run_tool_step",
]

import json
import time
import uuid as uuid_module
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, cast

import anyio
from pydantic_ai.messages import (
    ModelMessage,
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
from pilothouse.runtime._events import Question, ReturnedCall, ToolCallRecord
from pilothouse.runtime._repair import EXPECTED_FORMAT, CallProblem, RepairedCall
from pilothouse.runtime._toolexec import Execution, ToolExecutor
from pilothouse.runtime._toolset import (
    ASK_USER,
    USE_SKILL,
    EventRoute,
    SkillInfo,
    ToolSet,
    activate,
)
from pilothouse.runtime._toolset import skill_reply as _skill_reply
from pilothouse.runtime._turn import CallModel, Paused, Returned, ToolReply
from pilothouse.store import (
    NewEvent,
    NewMessage,
    NewOutboxMessage,
    NewToolCall,
    ToolCallOutcome,
    TurnBatch,
)
from pilothouse.store._base import utcnow
from pilothouse.tools._base import ToolContext
from pilothouse.tools._gateway import GatewayToolForTurn


@dataclass(frozen=True, slots=True)
class ToolResults:
    """The loop goes on: results to record, then to send back to the model.

    Attributes:
        batch: messages, tool calls, outcomes and events to record.
        request: the tool results for the model's next request.
        activated: skill codes activated in this step.
        only_repeats: every call asked again for a result the turn already had.
    """

    batch: TurnBatch
    request: ModelRequest
    activated: tuple[str, ...]
    only_repeats: bool


UNNAMED = "unnamed_call"
"""The name a call without one carries in the history sent back to the model."""


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
        # What the model sent, so it sees its mistake next to the feedback;
        # a call without a name still needs one the wire accepts.
        by_id.setdefault(problem.call_id, (problem.name or UNNAMED, problem.arguments))
    parts.extend(ToolCallPart(name, args, tool_call_id=cid) for cid, (name, args) in by_id.items())
    return replace(response, parts=parts)


def _questions(call: RepairedCall) -> list[Question]:
    raw: list[Any] = call.arguments.get("questions") or [call.arguments]
    questions: list[Question] = []
    for index, item in enumerate(raw, start=1):
        question = cast("dict[str, Any]", item) if isinstance(item, dict) else {"question": item}
        choices = cast("list[Any]", question.get("choices") or [])
        questions.append(
            Question(
                id=str(question.get("id") or f"q{index}"),
                question=str(question.get("question", "")),
                choices=tuple(str(c) for c in choices),
                call_id=call.call_id,
            )
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
    records: list[ToolCallRecord],
    interrupted: Callable[[TurnBatch], None],
) -> ToolResults | Paused | Returned:
    """Run one response's calls; return what comes next and the batch to record.

    Every call, with its outcome once it has one, is appended to ``records``.
    A cancel while the calls run hands ``interrupted`` what the stopped step
    records (see :func:`_interrupted_step`), then goes on.
    """
    finished: dict[str, Execution] = {}
    started = time.perf_counter()
    try:
        for problem in problems:
            tool = toolset.executable.get(problem.name or "")
            if isinstance(tool, GatewayToolForTurn):
                # A gateway keeps a row of every call, refused ones included.
                timeout = toolset.timeouts.get(problem.name or "")
                context = ToolContext(tenant, conversation_uuid, problem.call_id, timeout or 30.0)
                await tool.refuse(problem.message, context)
        executable = [
            (c, toolset.executable[c.name]) for c in calls if c.name in toolset.executable
        ]
        ran = await executor.run(
            executable,
            tenant=tenant,
            conversation_uuid=conversation_uuid,
            timeouts=toolset.timeouts,
            read_only=toolset.read_only,
            finished=finished,
        )
    except anyio.get_cancelled_exc_class():
        # The calls were started and may have acted: the cancelled turn's
        # record keeps them and what each did, not only its usage.
        interrupted(
            _interrupted_step(
                response=response,
                text=text,
                calls=calls,
                problems=problems,
                toolset=toolset,
                marker=marker,
                records=records,
                finished=finished,
                elapsed_ms=(time.perf_counter() - started) * 1000,
            )
        )
        raise
    executions = {e.call.call_id: e for e in ran}
    batch = _requested(response, text, calls, problems, marker)
    returns: list[ModelRequestPart] = []
    only_repeats = (
        bool(executions)
        and len(executions) == len(calls)
        and all(e.repeated for e in executions.values())
    )
    activated: list[str] = []
    asked: list[Question] = []
    returned: list[ReturnedCall] = []
    for call in calls:
        audit = _audit(call, toolset)
        if call.call_id in executions:
            record_execution(batch, returns, executions[call.call_id], audit)
        elif call.name == USE_SKILL:
            skills_now = activate(skills, str(call.arguments.get("skill", "")))
            activated.extend(s.code for s in skills_now)
            reply = _skill_reply(skills_now) or "unknown skill"
            batch.messages.append(
                _tool_message(call.call_id, call.name, reply, activated=activated)
            )
            batch.outcomes.append(ToolCallOutcome(call.call_id, ToolCallStatus.SUCCEEDED, reply))
            batch.events.append(
                NewEvent(
                    TimelineKind.TOOL_EXECUTION,
                    {
                        "call_id": call.call_id,
                        "tool": USE_SKILL,
                        "activated": activated,
                        # genai-4j's skill_t.version of each skill it brought in.
                        "releases": {s.code: s.release for s in skills_now},
                    },
                )
            )
            returns.append(ToolReturnPart(USE_SKILL, reply, tool_call_id=call.call_id))
        elif call.name == ASK_USER:
            asked.extend(_questions(call))
        elif call.name in toolset.events:
            command = event_command(
                call, toolset.events[call.name], tenant=tenant, conversation_uuid=conversation_uuid
            )
            batch.outbox.append(command)
            returned.append(
                ReturnedCall(call.call_id, call.name, call.arguments, command.correlation_id)
            )
            batch.outcomes.append(
                ToolCallOutcome(
                    call.call_id,
                    ToolCallStatus.RETURNED,
                    f"published on {command.topic} as {command.correlation_id}",
                )
            )
            batch.events.append(
                NewEvent(
                    TimelineKind.TOOL_EXECUTION,
                    {
                        "call_id": call.call_id,
                        "tool": call.name,
                        "status": "published",
                        "correlation_id": command.correlation_id,
                        "topic": command.topic,
                        "deadline": command.deadline.isoformat(),
                        **audit,
                    },
                )
            )
        else:
            returned.append(ReturnedCall(call.call_id, call.name, call.arguments))
            batch.outcomes.append(
                ToolCallOutcome(call.call_id, ToolCallStatus.RETURNED, "returned to the caller")
            )
    for problem in problems:
        # One line per call, then the expected shape (seed 001's feedback).
        message = (
            f"tool.call.invalid: Tool call {problem.index}"
            f"{f' ({problem.name})' if problem.name else ''}: {problem.message}\n"
            f"Please ensure the format: {EXPECTED_FORMAT}"
        )
        batch.messages.append(_tool_message(problem.call_id, problem.name, message, invalid=True))
        batch.outcomes.append(ToolCallOutcome(problem.call_id, ToolCallStatus.FAILED, message))
        batch.events.append(
            NewEvent(
                TimelineKind.TOOL_EXECUTION,
                {"call_id": problem.call_id, "tool": problem.name, "status": "invalid"},
            )
        )
        returns.append(
            ToolReturnPart(
                problem.name or UNNAMED, message, tool_call_id=problem.call_id, outcome="retried"
            )
        )
    _note_records(records, batch)
    if asked:
        for question in asked:
            batch.messages.append(
                NewMessage(
                    MessageRole.QUESTION,
                    question.question,
                    tool_call_id=question.call_id,
                    data={"question_id": question.id, "choices": list(question.choices)},
                )
            )
        return Paused(response.model_name, batch, tuple(asked))
    if returned:
        return Returned(response.model_name, batch, tuple(returned), waiting=bool(batch.outbox))
    return ToolResults(batch, ModelRequest(parts=returns), tuple(activated), only_repeats)


CANCELLED = "tool.exec.cancelled"
"""The error code of a call whose turn was cancelled while the tool ran."""


def _interrupted_step(
    *,
    response: ModelResponse,
    text: str,
    calls: Sequence[RepairedCall],
    problems: Sequence[CallProblem],
    toolset: ToolSet,
    marker: dict[str, Any],
    records: list[ToolCallRecord],
    finished: Mapping[str, Execution],
    elapsed_ms: float,
) -> TurnBatch:
    """What a tool step the turn's cancel stopped records.

    The model's answer with every call it made, as a finished step records
    it; the outcome of each execution that ended before the cancel; every
    other call to an executable tool ``FAILED`` with ``tool.exec.cancelled``
    (it was started and may have acted: the record says it was cut off, not
    that it never ran). Calls that were never started (skills, questions,
    calls for the caller, invalid calls) stay ``requested``.

    Args:
        response: the normalized response that made the calls.
        text: the answer's text, as the finished step records it.
        calls: the repaired calls.
        problems: the calls that could not be repaired.
        toolset: the step's tools.
        marker: the answer's AI marker.
        records: the turn's call records; the calls are appended.
        finished: the executions that ended, by call id.
        elapsed_ms: how long the step ran before the cancel.

    Returns:
        The batch to write with the turn's ``TE``.
    """
    batch = _requested(response, text, calls, problems, marker)
    returns: list[ModelRequestPart] = []  # no next request: the turn ends here
    for call in calls:
        execution = finished.get(call.call_id)
        if execution is None and call.name in toolset.executable:
            execution = Execution(
                call,
                ToolCallStatus.FAILED,
                f"{CANCELLED}: the turn was cancelled while the tool ran",
                CANCELLED,
                round(elapsed_ms, 1),
            )
        if execution is not None:
            record_execution(batch, returns, execution, _audit(call, toolset))
    _note_records(records, batch)
    return batch


def _requested(
    response: ModelResponse,
    text: str,
    calls: Sequence[RepairedCall],
    problems: Sequence[CallProblem],
    marker: dict[str, Any],
) -> TurnBatch:
    """A step's batch as the model's answer opens it: the message and its calls."""
    listed = [
        *(NewToolCall(c.call_id, c.name, c.arguments) for c in calls),
        # An invalid call is recorded with the arguments the model sent.
        *(NewToolCall(p.call_id, p.name, p.arguments) for p in problems),
    ]
    all_calls = [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in listed]
    return TurnBatch(
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


def _audit(call: RepairedCall, toolset: ToolSet) -> dict[str, Any]:
    """What a call's ``tool_execution`` event adds: its repairs and its tool's release."""
    audit: dict[str, Any] = {"repairs": call.repairs} if call.repairs else {}
    if call.name in toolset.releases:
        # The audit names the catalog tool's semantic version (genai-4j's tool_t.version).
        audit["release"] = toolset.releases[call.name]
    return audit


def _note_records(records: list[ToolCallRecord], batch: TurnBatch) -> None:
    """Append the batch's calls to the turn's records, each with its outcome if it has one."""
    outcomes = {o.call_id: o for o in batch.outcomes}
    records.extend(
        ToolCallRecord(
            c.call_id,
            c.name,
            dict(c.arguments),
            outcomes[c.call_id].status if c.call_id in outcomes else ToolCallStatus.REQUESTED,
            outcomes[c.call_id].result if c.call_id in outcomes else None,
        )
        for c in batch.tool_calls
    )


def event_command(
    call: RepairedCall, route: EventRoute, *, tenant: str, conversation_uuid: str
) -> NewOutboxMessage:
    """The ``SkillInvocationEvent`` of an event tool's call, for the outbox (seed 002's names)."""
    correlation_id = uuid_module.uuid4().hex
    deadline = utcnow() + timedelta(seconds=route.timeout)
    payload: dict[str, Any] = {
        "type": "SkillInvocationEvent",
        "correlationId": correlation_id,
        "skillName": route.skill_name,
        "arguments": dict(call.arguments),
        "replyTo": route.reply_to,
        "tenant": tenant,
        "conversationId": conversation_uuid,
        "toolCallId": call.call_id,
        "deadline": deadline.isoformat(),
    }
    return NewOutboxMessage(
        correlation_id=correlation_id,
        call_id=call.call_id,
        skill_name=route.skill_name,
        topic=route.topic,
        reply_to=route.reply_to,
        payload=payload,
        deadline=deadline,
    )


def record_execution(
    batch: TurnBatch,
    returns: list[ModelRequestPart],
    execution: Execution,
    audit: dict[str, Any],
) -> None:
    """Add one execution's tool message, outcome, timeline event and model result."""
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
                **audit,
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


def answers_reply(questions: Sequence[tuple[str, str]], answers: Mapping[str, str]) -> str:
    """The AskUserQuestion result the model sees once the user answered.

    Text, each question with its answer, as Claude Code's AskUserQuestion
    returns them: a model given the answers as a JSON object tends to repeat
    that object as its reply instead of going on with the task.

    Args:
        questions: ``(question id, question text)`` of one call's questions.
        answers: the answers by question id.
    """
    pairs = ", ".join(
        f"{json.dumps(text, ensure_ascii=False)}={json.dumps(answers[qid], ensure_ascii=False)}"
        for qid, text in questions
    )
    return (
        f"User has answered your questions: {pairs}. "
        "You can now continue with the user's answers in mind."
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


def answers_words(questions: Sequence[tuple[str, str]], answers: Mapping[str, str]) -> str:
    """The answers as the user would type them: the answer alone to one question.

    Args:
        questions: ``(question id, question text)`` of one call's questions.
        answers: the answers by question id.
    """
    if len(questions) == 1:
        return answers[questions[0][0]]
    return "\n".join(f"{text} {answers[qid]}" for qid, text in questions)


def after_replies(
    messages: list[ModelMessage], replies: Sequence[ToolReply], *, as_text: bool
) -> CallModel:
    """The model call that goes on from replies to pending calls.

    After the user's answers the question tool is not offered: the packaged
    0.5B model, offered it again, asked the same question once more. A model
    that reads tool results best as text (``as_text``) gets the exchange as
    a plain conversation (its questions as its words, the answers as the
    user's) and no tools: given its own question call it wrote the same call
    again as text.

    Args:
        messages: the history to go on from; its last request holds the replies.
        replies: the replies just recorded.
        as_text: the model's profile says tool results go as text.
    """
    if not any(reply.tool_name == ASK_USER for reply in replies):
        return CallModel(messages)
    withhold = frozenset({ASK_USER})
    start = len(messages)
    while start > 0 and _only_results(messages[start - 1]):
        start -= 1
    asked = messages[start - 1] if as_text and 0 < start < len(messages) else None
    if isinstance(asked, ModelResponse):
        calls = [p for p in asked.parts if isinstance(p, ToolCallPart)]
        questions = "\n".join(_question_texts(calls))
        if questions and all(call.tool_name == ASK_USER for call in calls):
            answers = "\n".join(reply.words or reply.content for reply in replies)
            spoken = [
                ModelResponse(parts=[TextPart(questions)]),
                ModelRequest(parts=[UserPromptPart(answers)]),
            ]
            return CallModel([*messages[: start - 1], *spoken], True, withhold)
    return CallModel(messages, withhold=withhold)


def _only_results(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and all(
        isinstance(part, ToolReturnPart) for part in message.parts
    )


def _question_texts(calls: Sequence[ToolCallPart]) -> list[str]:
    """The questions of AskUserQuestion calls, as the model would say them."""
    texts: list[str] = []
    for call in calls:
        args = call.args_as_dict()
        listed = args.get("questions")
        items = cast("list[Any]", listed) if isinstance(listed, list) else [args]
        for item in items:
            question = (
                cast("dict[str, Any]", item).get("question") if isinstance(item, dict) else None
            )
            if question:
                texts.append(str(question))
    return texts
