"""How a turn ends up in the store: answers, failures, cancellations, events.

The closing steps of every turn (pending events, status change, usage, one
write, then the events to subscribers) live here, shared by the runner's
success, failure, content-filter and cancellation paths.
"""

from __future__ import annotations

__all__ = ["TurnRecording", "status_event"]

import json
import logging
from typing import Any

from pydantic_ai.messages import ModelResponse

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
)
from pilothouse.providers import redact
from pilothouse.runtime._advisors import ContentBlocked
from pilothouse.runtime._convert import ParsedResponse, finish_reason_of
from pilothouse.runtime._events import (
    EventHub,
    StatusChanged,
    TurnEvent,
    TurnFinished,
    TurnResult,
)
from pilothouse.runtime._modelcall import TurnState, secret_values
from pilothouse.store._base import utcnow
from pilothouse.store._writer import (
    ConversationWriter,
    NewEvent,
    NewMessage,
    TurnBatch,
)

logger = logging.getLogger("pilothouse.audit")


class TurnRecording:
    """Recording half of the runner; expects ``_writer`` and ``hub``."""

    _writer: ConversationWriter
    hub: EventHub

    async def _record_invalid_output(
        self, turn: TurnState, response: ModelResponse, parsed: ParsedResponse, errors: list[str]
    ) -> None:
        content = parsed.text
        if parsed.output_call is not None:
            content = json.dumps(parsed.output_call.args_as_dict(), ensure_ascii=False)
        batch = TurnBatch(
            messages=[
                NewMessage(
                    MessageRole.ASSISTANT,
                    content,
                    token_count=response.usage.output_tokens,
                    data={"invalid_output": True, "errors": errors},
                )
            ],
            events=[*turn.pending, NewEvent(TimelineKind.ERROR, {"output_errors": errors})],
            usage=turn.usage_increments(),
        )
        turn.pending = []
        self._log_events(turn, batch.events)
        await self._writer.write(turn.handle, batch)

    async def _record_answer(
        self, turn: TurnState, response: ModelResponse, parsed: ParsedResponse, output: Any
    ) -> TurnResult:
        # Tool calls never reach here: the loop runs, returns or pauses on them.
        finish = finish_reason_of(response, parsed)
        marker = self._marker(turn, response)
        content = parsed.text if turn.compiled.output_schema is None else _json_text(output)
        data: dict[str, Any] = {"ai": marker}
        if parsed.thinking:
            data["thinking"] = parsed.thinking
        batch = TurnBatch(
            messages=[
                NewMessage(
                    MessageRole.ASSISTANT,
                    content,
                    token_count=response.usage.output_tokens,
                    data=data,
                )
            ],
            changes={"finish_reason": finish, "response_model": response.model_name},
        )
        return await self._end_turn(
            turn,
            batch,
            ProcessStatus.COMPLETED,
            finish_reason=finish,
            output=output,
            text=content,
            ai_meta=marker,
        )

    def _marker(self, turn: TurnState, response: ModelResponse) -> dict[str, Any]:
        spec = turn.compiled.model
        return {
            "aiGenerated": True,
            "runId": turn.run_id,
            "provider": spec.provider.code,
            "model": response.model_name or spec.model_name,
            "responseId": response.provider_response_id,
            "generatedAt": utcnow().isoformat(),
        }

    async def _record_blocked(self, turn: TurnState, blocked: ContentBlocked) -> TurnResult:
        """A content filter refused the input or the answer: finish reason CF."""
        batch = TurnBatch(
            events=[
                NewEvent(
                    TimelineKind.ERROR, {"content_filter": blocked.where, "rule": blocked.rule}
                )
            ],
            changes={"finish_reason": FinishReason.CONTENT_FILTER},
        )
        return await self._end_turn(
            turn,
            batch,
            ProcessStatus.COMPLETED,
            finish_reason=FinishReason.CONTENT_FILTER,
            error=str(blocked),
        )

    async def _record_failed(self, turn: TurnState, detail: str) -> TurnResult:
        detail = redact(detail, secret_values(turn.compiled.model))
        batch = TurnBatch(
            events=[NewEvent(TimelineKind.ERROR, {"detail": detail})],
            changes={"error_detail": detail},
        )
        return await self._end_turn(turn, batch, ProcessStatus.FAILED, error=detail)

    async def _record_cancelled(self, turn: TurnState) -> TurnResult:
        partial = "".join(turn.partial)
        batch = TurnBatch(events=[NewEvent(TimelineKind.CANCEL, {"partial_chars": len(partial)})])
        if partial:
            marker = self._marker(turn, ModelResponse(parts=[]))
            batch.messages.append(
                NewMessage(MessageRole.ASSISTANT, partial, data={"interrupted": True, "ai": marker})
            )
        return await self._end_turn(
            turn, batch, ProcessStatus.TERMINATED, output=partial or None, text=partial
        )

    async def _end_turn(
        self,
        turn: TurnState,
        batch: TurnBatch,
        status: ProcessStatus,
        *,
        finish_reason: FinishReason | None = None,
        output: Any = None,
        text: str = "",
        ai_meta: dict[str, Any] | None = None,
        error: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> TurnResult:
        """Write the turn's last step (pending events, status, usage) and report it."""
        handle = turn.handle
        batch.events = [*turn.pending, *batch.events, status_event(ProcessStatus.RUNNING, status)]
        batch.changes = {**batch.changes, "status": status, "finished_at": utcnow()}
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
            tool_calls=tool_calls or [],
        )
        batch.usage = turn.usage_increments()
        turn.pending = []
        self._log_events(turn, batch.events)
        await self._writer.write(handle, batch)
        await self._emit(turn, StatusChanged(handle.uuid, ProcessStatus.RUNNING, status))
        await self._emit(turn, TurnFinished(handle.uuid, result))
        return result

    def _log_events(self, turn: TurnState, events: list[NewEvent]) -> None:
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

    async def _emit(self, turn: TurnState, event: TurnEvent) -> None:
        if turn.listener is None and not self.hub.active:
            return
        await self.hub.emit(event, turn.listener)


def status_event(old: ProcessStatus, new: ProcessStatus) -> NewEvent:
    return NewEvent(TimelineKind.STATUS_CHANGE, {"from": old.value, "to": new.value})


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
