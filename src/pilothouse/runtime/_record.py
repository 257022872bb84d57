"""How a turn reaches the store and its subscribers: :class:`TurnRecorder`.

Every write of a running turn goes through the recorder: a step's batch
takes the audit events gathered since the last write and the usage not yet
counted, is logged when the audit timeline is off, and is written in one
transaction; an ending (:data:`~pilothouse.runtime._turn.Ending`) becomes
the turn's last batch (status, finish reason, usage) and its
:class:`~pilothouse.runtime.TurnResult`, then subscribers hear of it.
"""

from __future__ import annotations

__all__ = ["TURN_USAGE", "TurnRecorder", "status_event"]

import json
import logging
from dataclasses import replace
from typing import Any

from pydantic_ai.messages import ModelResponse

from pilothouse._cost import cost_text
from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
)
from pilothouse.providers import redact, secret_values
from pilothouse.runtime._convert import ParsedResponse, finish_reason_of
from pilothouse.runtime._events import (
    EventHub,
    Question,
    ReturnedCall,
    StatusChanged,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from pilothouse.runtime._retrieval import answer_sources, cited_sources
from pilothouse.runtime._turn import (
    Answered,
    Blocked,
    Ending,
    Failed,
    Paused,
    Returned,
    Turn,
)
from pilothouse.store import NewEvent, NewMessage, TurnBatch, TurnStore
from pilothouse.store._base import utcnow
from pilothouse.store._text import storable, storable_value

logger = logging.getLogger("pilothouse.audit")

TURN_USAGE = "turn_usage"
"""The key, in the data of a turn's last message, of the turn's usage.

``{"input_tokens", "output_tokens", "cost" (a plain decimal string),
"usage_estimated", "status"}``:
what the turn's :class:`~pilothouse.runtime.TurnResult` reported.
"""


class TurnRecorder:
    """Writes a turn's steps and its ending, and tells subscribers.

    One per process, shared by every tenant's turns.

    Args:
        store: where turns are written.
        hub: where turn events go.
    """

    def __init__(self, store: TurnStore, hub: EventHub) -> None:
        self.store = store
        self.hub = hub

    async def step(self, turn: Turn, batch: TurnBatch) -> None:
        """Write a step of the running turn with the events and usage gathered so far."""
        batch.events[:0] = turn.take_pending()
        batch.usage = turn.take_usage()
        await self.write(turn, batch)

    def taken(self, turn: Turn, events: list[NewEvent]) -> None:
        """Note ``events``, written with the statement that took the conversation."""
        self._log_events(turn, events)

    async def write(self, turn: Turn, batch: TurnBatch) -> None:
        """Write ``batch`` with the turn's budget settles not yet written."""
        if turn.started is not None:
            # The conversation's own statement is still in flight: after it.
            await turn.started()
        self._log_events(turn, batch.events)
        if turn.settles:
            # The settles ride on this write: no transaction of their own.
            settles, turn.settles = turn.settles, []
            after, turn.after_write = turn.after_write, []
            batch.ledger = [*batch.ledger, *settles]
            try:
                await self.store.write(turn.handle, batch)
            except BaseException:
                # Not written: they go with the next write, or the turn's last.
                turn.settles[:0] = settles
                turn.after_write[:0] = after
                raise
            for announce in after:
                await announce()
            return
        await self.store.write(turn.handle, batch)

    async def invalid_output(
        self, turn: Turn, response: ModelResponse, parsed: ParsedResponse, errors: list[str]
    ) -> None:
        """Record an answer that broke the output schema (kept out of chat memory)."""
        content = parsed.text
        if parsed.output_call is not None:
            content = json.dumps(parsed.output_call.args_as_dict(), ensure_ascii=False)
        message = NewMessage(
            MessageRole.ASSISTANT,
            content,
            token_count=response.usage.output_tokens,
            data={"invalid_output": True, "errors": errors},
        )
        await self.step(
            turn,
            TurnBatch(
                messages=[message],
                events=[NewEvent(TimelineKind.ERROR, {"output_errors": errors})],
            ),
        )

    def marker(self, turn: Turn, response: ModelResponse) -> dict[str, Any]:
        """The AI-generated marker of a response."""
        spec = turn.compiled.model
        return {
            "aiGenerated": True,
            "runId": turn.run_id,
            "provider": spec.provider.code,
            "model": response.model_name or spec.model_name,
            "responseId": response.provider_response_id,
            "generatedAt": utcnow().isoformat(),
        }

    async def end(self, turn: Turn, ending: Ending) -> TurnResult:
        """Write the turn's ending and return its result."""
        match ending:
            case Answered():
                return await self._answered(turn, ending)
            case Paused(response_model=model, batch=batch, questions=questions):
                batch.response_model = model
                output = {"questions": [q.to_dict() for q in questions]}
                return await self._close(
                    turn,
                    batch,
                    ProcessStatus.WAITING,
                    finish_reason=FinishReason.TOOL_CALLS,
                    output=output,
                    questions=questions,
                )
            case Returned(response_model=model, batch=batch, calls=calls, waiting=waiting):
                batch.finish_reason = FinishReason.TOOL_CALLS
                batch.response_model = model
                return await self._close(
                    turn,
                    batch,
                    ProcessStatus.WAITING if waiting else ProcessStatus.COMPLETED,
                    finish_reason=FinishReason.TOOL_CALLS,
                    tool_calls=calls,
                )
            case Failed(detail=detail):
                detail = redact(detail, secret_values(turn.compiled.model))
                batch = TurnBatch(
                    events=[NewEvent(TimelineKind.ERROR, {"detail": detail})],
                    error_detail=detail,
                )
                return await self._close(turn, batch, ProcessStatus.FAILED, error=detail)
            case Blocked(blocked=blocked):
                batch = TurnBatch(
                    events=[
                        NewEvent(
                            TimelineKind.ERROR,
                            {"content_filter": blocked.where, "rule": blocked.rule},
                        )
                    ],
                    finish_reason=FinishReason.CONTENT_FILTER,
                )
                return await self._close(
                    turn,
                    batch,
                    ProcessStatus.COMPLETED,
                    finish_reason=FinishReason.CONTENT_FILTER,
                    error=str(blocked),
                )

    async def _answered(self, turn: Turn, ending: Answered) -> TurnResult:
        # Tool calls never reach here: the loop runs, returns or pauses on them.
        response, parsed = ending.response, ending.parsed
        finish = finish_reason_of(response, parsed)
        marker = self.marker(turn, response)
        output = ending.output
        if turn.compiled.output_schema is None:
            # A NUL or a lone surrogate cannot be stored: the answer is
            # escaped once, here, so the caller gets what the record holds.
            content, escaped = storable(parsed.text)
            if escaped and isinstance(output, str):
                output = content
        else:
            # The parsed value itself is escaped (not only its text): the
            # caller's JSON answer and the stored one cannot hold a lone
            # surrogate, which no UTF-8 encoder accepts.
            output, escaped = storable_value(ending.output)
            content = json.dumps(output, ensure_ascii=False)
        data: dict[str, Any] = {"ai": marker}
        if escaped:
            data["text_escaped"] = True
        if parsed.thinking:
            data["thinking"] = parsed.thinking
        events: list[NewEvent] = []
        if turn.sources:
            # Which of the numbered sources the answer used, for the audit.
            cited = cited_sources(content, turn.sources)
            data["citations"] = cited
            events.append(
                NewEvent(
                    TimelineKind.RETRIEVAL,
                    {"status": "citations", "citations": cited, "sources": len(turn.sources)},
                )
            )
        message = NewMessage(
            MessageRole.ASSISTANT, content, token_count=response.usage.output_tokens, data=data
        )
        batch = TurnBatch(
            messages=[message],
            events=events,
            finish_reason=finish,
            response_model=response.model_name,
        )
        return await self._close(
            turn,
            batch,
            ProcessStatus.COMPLETED,
            finish_reason=finish,
            output=output,
            text=content,
            ai_meta=marker,
        )

    async def cancelled(self, turn: Turn, requested_by: str | None = None) -> TurnResult:
        """Record a cancelled turn (``TE``) with the text streamed so far.

        Args:
            turn: the cancelled turn.
            requested_by: who asked, when not a caller of this process (another
                worker's cancel, the shutdown).
        """
        partial = "".join(turn.partial)
        data: dict[str, Any] = {"partial_chars": len(partial)}
        if requested_by is not None:
            data["requested_by"] = requested_by
        # The model that was answering when the turn stopped, as it named itself.
        batch = TurnBatch(
            events=[NewEvent(TimelineKind.CANCEL, data)], response_model=turn.answered_by
        )
        step, turn.interrupted = turn.interrupted, None
        if step is not None:
            # Stopped while tools ran: the answer that called them, with its
            # calls and their outcomes. Its text is that answer's, already
            # in its message: no interrupted text is written again.
            batch.messages = step.messages
            batch.tool_calls = step.tool_calls
            batch.outcomes = step.outcomes
            batch.events[:0] = step.events
        elif partial:
            marker = self.marker(turn, ModelResponse(parts=[], model_name=turn.answered_by))
            batch.messages.append(
                NewMessage(
                    MessageRole.ASSISTANT,
                    partial,
                    token_count=turn.partial_tokens,
                    data={"interrupted": True, "ai": marker},
                )
            )
        return await self._close(
            turn, batch, ProcessStatus.TERMINATED, output=partial or None, text=partial
        )

    async def _close(
        self,
        turn: Turn,
        batch: TurnBatch,
        status: ProcessStatus,
        *,
        finish_reason: FinishReason | None = None,
        output: Any = None,
        text: str = "",
        ai_meta: dict[str, Any] | None = None,
        error: str | None = None,
        tool_calls: tuple[ReturnedCall, ...] = (),
        questions: tuple[Question, ...] = (),
    ) -> TurnResult:
        """Write the turn's last step (pending events, status, usage) and report it."""
        if turn.started is not None:
            await turn.started()
        handle = turn.handle
        batch.events = [
            *turn.take_pending(),
            *batch.events,
            status_event(ProcessStatus.RUNNING, status),
        ]
        batch.status = status
        batch.finished_at = utcnow()
        batch.usage = turn.take_usage()
        if batch.messages:
            # The conversation row keeps running totals only: the turn's own
            # tokens and cost ride on its last message, so a transcript read
            # later shows each turn exactly as its result reported it.
            last = batch.messages[-1]
            batch.messages[-1] = replace(
                last,
                data={
                    **(last.data or {}),
                    TURN_USAGE: {
                        "input_tokens": turn.turn_input,
                        "output_tokens": turn.turn_output,
                        "cost": cost_text(turn.turn_cost),
                        "usage_estimated": turn.usage_estimated,
                        "status": status.value,
                    },
                },
            )
        result = TurnResult(
            conversation_uuid=handle.uuid,
            status=status,
            finish_reason=finish_reason,
            output=output,
            text=text,
            input_tokens=turn.turn_input,
            output_tokens=turn.turn_output,
            cost=turn.turn_cost,
            ai_meta=ai_meta,
            error=error,
            tool_calls=tool_calls,
            questions=questions,
            call_records=tuple(turn.records),
            usage_estimated=turn.usage_estimated,
            sources=answer_sources(text, turn.sources),
            model=turn.compiled.model.code,
            requested_model=turn.requested_model,
        )
        await self.write(turn, batch)
        if turn.pending:
            # Budget alerts the last settle raised (rare): written after the end.
            await self.write(turn, TurnBatch(events=turn.take_pending()))
        await self.emit(turn, StatusChanged(handle.uuid, ProcessStatus.RUNNING, status))
        await self.emit(turn, TurnFinished(handle.uuid, result))
        return result

    def _log_events(self, turn: Turn, events: list[NewEvent]) -> None:
        # With the audit timeline off the events still reach the log, so an
        # operator keeps a trace even where the store keeps none.
        if turn.handle.audit or not logger.isEnabledFor(logging.INFO):
            return
        for item in events:
            logger.info(
                "conversation %s %s %s",
                turn.handle.uuid,
                item.kind.value,
                json.dumps(dict(item.data), default=str),
            )

    async def emit(self, turn: Turn, event: TurnEvent) -> None:
        """Deliver a turn event to the turn's listener and the hub's subscribers."""
        if turn.listener is None and not self.hub.active:
            return
        await self.hub.emit(event, turn.listener, turn.handle.tenant)


def status_event(old: ProcessStatus, new: ProcessStatus) -> NewEvent:
    """The timeline event of a status change."""
    return NewEvent(TimelineKind.STATUS_CHANGE, {"from": old.value, "to": new.value})
