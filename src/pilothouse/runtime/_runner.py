"""The run loop: one turn of a conversation, end to end.

A turn validates its input before it touches the store, takes the
conversation (``RU``), records the user message, calls the model through
pydantic-ai's model layer with retries (streaming deltas to subscribers when
anyone listens), validates structured output and feeds errors back to the
model, and records the outcome: assistant message with the AI-generated
marker, tool calls, usage, cost, finish reason and status. Failures end in
``FA`` with the error detail, cancellation in ``TE``; nothing recorded
before is lost.
"""

from __future__ import annotations

__all__ = ["Runner"]

import json
import logging
import time
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import anyio
from pydantic_ai.direct import model_request, model_request_stream
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
)
from pydantic_ai.models import Model, ModelRequestParameters
from sqlalchemy import select

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ModelCapability,
    ProcessStatus,
    ProviderKind,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import InvalidStateError, NotFoundError, PilothouseError, ProviderError
from pilothouse.memory import MemoryMessage, counter_for, select_history
from pilothouse.providers import ModelFactory, redact, to_model_settings, translate_error
from pilothouse.runtime._compile import ActionCompiler, CompiledAction
from pilothouse.runtime._config import RuntimeConfig
from pilothouse.runtime._convert import (
    ParsedResponse,
    build_messages,
    estimate_usage,
    finish_reason_of,
    parse_json_output,
    parse_response,
)
from pilothouse.runtime._events import (
    EventHub,
    StatusChanged,
    TextDelta,
    ThinkingDelta,
    ToolCallRequested,
    TurnEvent,
    TurnFinished,
    TurnResult,
    TurnRetry,
)
from pilothouse.runtime._request import delta_text, feedback, grammar_output, request_parameters
from pilothouse.runtime._retry import RetryPolicy
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.store import Conversation, Database, Message
from pilothouse.store._base import utcnow
from pilothouse.store._writer import (
    ConversationWriter,
    NewAttachment,
    NewEvent,
    NewMessage,
    NewToolCall,
    ToolCallOutcome,
    TurnBatch,
    TurnHandle,
)

logger = logging.getLogger("pilothouse.audit")

Listener = Callable[[TurnEvent], Awaitable[None] | None]
_MILLION = Decimal(1_000_000)


@dataclass
class _Turn:
    """Mutable state of one running turn."""

    handle: TurnHandle
    compiled: CompiledAction
    config: RuntimeConfig
    listener: Listener | None
    run_id: str = field(default_factory=lambda: str(uuid_module.uuid4()))
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = Decimal(0)
    partial: list[str] = field(default_factory=lambda: [])
    pending: list[NewEvent] = field(default_factory=lambda: [])


class Runner:
    """Runs turns of conversations for one tenant.

    Args:
        database: the store.
        tenant: the tenant whose conversations this runner drives.
        models: builds and caches the pydantic-ai models.
        compiler: compiles actions once per catalog revision.
        hub: where turn events go.
        telemetry: OpenTelemetry spans (no-op when not configured).
        sleep: how retries wait (replaceable in tests).
        model_override: a model used for every call instead of the catalog's
            (tests inject the scripted model here).
    """

    def __init__(
        self,
        *,
        database: Database,
        tenant: str,
        models: ModelFactory,
        compiler: ActionCompiler,
        hub: EventHub | None = None,
        telemetry: Telemetry | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        model_override: Model | None = None,
    ) -> None:
        self._db = database
        self._tenant = tenant
        self._models = models
        self._compiler = compiler
        self.hub = hub or EventHub()
        self._telemetry = telemetry or Telemetry()
        self._sleep = sleep
        self._model_override = model_override
        self._writer = ConversationWriter(database, tenant)
        self._running: dict[str, anyio.CancelScope] = {}

    async def send_message(
        self,
        conversation_uuid: str,
        text: str,
        *,
        attachments: Sequence[NewAttachment] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        on_event: Listener | None = None,
        compiled: CompiledAction | None = None,
    ) -> TurnResult:
        """Run one turn: record ``text``, call the model, record the answer.

        Args:
            conversation_uuid: the conversation (``NS`` or ``CO``).
            text: the user's message.
            attachments: files sent with it.
            input_data: values for the action prompt's ``{placeholders}``.
            runtime_config: per-call options and switches.
            on_event: called with every event of this turn.
            compiled: run this compiled action instead of the conversation's
                catalog action (ad-hoc actions, e.g. the one-call connector).

        Returns:
            The turn's result; a failed turn returns status ``FA`` with the
            error detail rather than raising.

        Raises:
            NotFoundError: unknown conversation, action or agent.
            InvalidStateError: the conversation is running, waiting or finished.
            RuntimeConfigError: the runtime config is invalid.
            TemplateError: the input data does not fill the prompt.
        """
        if compiled is None:
            action_code, agent_code = await self._codes(conversation_uuid)
        else:
            action_code, agent_code = compiled.action_code, compiled.agent_code
        compiled, config, system_prompt = await self.prepare(
            action_code, agent_code, text, input_data, runtime_config, attachments, compiled
        )
        if conversation_uuid in self._running:
            raise InvalidStateError(
                f"conversation '{conversation_uuid}' is running a turn; "
                "wait for it to finish or cancel it"
            )
        # Registered before the conversation is taken, so a cancel that
        # arrives while the turn starts still reaches it: a scope cancelled
        # before it is entered cancels at its first checkpoint.
        scope = anyio.CancelScope()
        self._running[conversation_uuid] = scope
        try:
            handle = await self._writer.begin_turn(conversation_uuid)
        except BaseException:
            self._running.pop(conversation_uuid, None)
            raise
        if config.audit is not None:
            handle.audit = config.audit
        turn = _Turn(handle=handle, compiled=compiled, config=config, listener=on_event)
        try:
            with self._telemetry.turn(conversation_uuid, compiled.action_code, agent_code):
                with scope:
                    await self._emit(
                        turn,
                        StatusChanged(
                            conversation_uuid, ProcessStatus.NOT_STARTED, ProcessStatus.RUNNING
                        ),
                    )
                    return await self._run(turn, system_prompt, text, attachments)
                return await self._record_cancelled(turn)
        except BaseException as exc:
            with anyio.CancelScope(shield=True):
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    await self._record_cancelled(turn)
                else:
                    await self._record_failed(turn, f"internal error: {type(exc).__name__}")
            raise
        finally:
            self._running.pop(conversation_uuid, None)

    async def prepare(
        self,
        action_code: str,
        agent_code: str | None,
        text: str,
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        attachments: Sequence[NewAttachment] = (),
        compiled: CompiledAction | None = None,
    ) -> tuple[CompiledAction, RuntimeConfig, str]:
        """Check a turn's input without running it or writing anything.

        A caller can use this before it starts a conversation, so bad input
        leaves no conversation behind.

        Returns:
            The compiled action, the parsed runtime config and the system prompt.

        Raises:
            NotFoundError: unknown action or agent.
            InvalidStateError: inactive action or agent.
            RuntimeConfigError: invalid runtime config.
            TemplateError: the input data does not fill the prompt.
        """
        config = RuntimeConfig.parse(runtime_config)
        if compiled is None:
            compiled = await self._compiler.compile(self._tenant, action_code, agent_code)
        data = {"input": text, **(input_data or {})}
        system_prompt = compiled.system_prompt(config.instruction, config.instruction_mode, data)
        for attachment in attachments:
            if attachment.url is None and attachment.content is None:
                raise PilothouseError("an attachment needs a url or content")
        return compiled, config, system_prompt

    async def cancel(self, conversation_uuid: str) -> bool:
        """Abort the conversation's running turn, or terminate it when idle.

        Returns:
            True when a turn running in this process was aborted.
        """
        scope = self._running.get(conversation_uuid)
        if scope is not None:
            scope.cancel()
            return True
        handle = await self._writer.begin_turn(
            conversation_uuid,
            allowed=(
                ProcessStatus.NOT_STARTED,
                ProcessStatus.COMPLETED,
                ProcessStatus.WAITING,
                ProcessStatus.PAUSED,
                ProcessStatus.STUCK,
                ProcessStatus.RUNNING,
            ),
        )
        await self._writer.write(
            handle,
            TurnBatch(
                events=[
                    NewEvent(TimelineKind.CANCEL, {"running_here": False}),
                    _status_event(ProcessStatus.RUNNING, ProcessStatus.TERMINATED),
                ],
                changes={"status": ProcessStatus.TERMINATED, "finished_at": utcnow()},
            ),
        )
        return False

    async def _codes(self, conversation_uuid: str) -> tuple[str, str | None]:
        async with self._db.sessions() as session:
            row = (
                await session.execute(
                    select(Conversation.action_code, Conversation.agent_code).where(
                        Conversation.uuid == conversation_uuid,
                        Conversation.tenant == self._tenant,
                    )
                )
            ).first()
        if row is None:
            raise NotFoundError(f"conversation '{conversation_uuid}' not found")
        return row[0], row[1]

    async def _history(self, handle: TurnHandle) -> list[MemoryMessage]:
        async with self._db.sessions() as session:
            rows = await session.scalars(
                select(Message)
                .join(Conversation, Conversation.id == Message.conversation_id)
                .where(
                    Conversation.tenant == self._tenant,
                    Conversation.memory_id == handle.memory_id,
                    Message.role != MessageRole.SYSTEM,
                )
                .order_by(Message.created_at, Message.conversation_id, Message.sequence)
            )
            return [
                MemoryMessage(
                    role=row.role,
                    content=row.content,
                    tool_call_id=row.tool_call_id,
                    data=row.data,
                    token_count=row.token_count,
                )
                for row in rows
                if not (row.data or {}).get("invalid_output")
            ]

    async def _run(
        self,
        turn: _Turn,
        system_prompt: str,
        text: str,
        attachments: Sequence[NewAttachment],
    ) -> TurnResult:
        compiled = turn.compiled
        spec = compiled.model
        history = await self._history(turn.handle)
        counter = counter_for(spec.provider.kind, spec.model_name)
        user = MemoryMessage(role=MessageRole.USER, content=text)
        kept = select_history(
            [*history, user], compiled.memory, system_prompt=system_prompt, counter=counter
        )
        messages = build_messages(system_prompt, kept[:-1], text, attachments)
        await self._writer.write(
            turn.handle,
            TurnBatch(
                messages=[
                    NewMessage(
                        MessageRole.USER,
                        text,
                        token_count=counter.count(text),
                        attachments=tuple(attachments),
                    )
                ]
            ),
        )
        options = compiled.options.merged(turn.config.options)
        settings = to_model_settings(spec, options)
        model = self._model_override or await self._models.model(spec, options)
        params, wrapped_list = request_parameters(compiled)
        if compiled.output_schema is not None and spec.provider.kind is ProviderKind.LOCAL:
            settings, wrapped_list = grammar_output(settings, compiled), compiled.is_list_output
        attempts_left = compiled.retry_count
        while True:
            try:
                response = await self._call(turn, model, messages, settings, params, options)
            except ProviderError as error:
                return await self._record_failed(turn, f"{type(error).__name__}: {error}")
            parsed = parse_response(response)
            if compiled.output_schema is None:
                return await self._record_answer(turn, response, parsed, parsed.text)
            value, problem = parse_json_output(parsed, wrapped_list)
            errors = [problem] if problem else compiled.validation_errors(value)
            if not errors:
                return await self._record_answer(turn, response, parsed, value)
            await self._record_invalid_output(turn, response, parsed, errors)
            if attempts_left <= 0:
                detail = "output does not match the schema: " + "; ".join(errors)
                return await self._record_failed(turn, detail)
            attempts_left -= 1
            attempt = compiled.retry_count - attempts_left
            messages = [*messages, response, feedback(errors, parsed, attempt)]

    async def _call(
        self,
        turn: _Turn,
        model: Model,
        messages: list[ModelMessage],
        settings: Any,
        params: ModelRequestParameters,
        options: Any,
    ) -> ModelResponse:
        spec = turn.compiled.model
        policy = RetryPolicy(turn.compiled.retry_count, turn.compiled.retry_delay)
        stream = self._wants_stream(turn)
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            turn.pending.append(
                NewEvent(
                    TimelineKind.REQUEST,
                    {
                        "attempt": attempt,
                        "provider": spec.provider.code,
                        "model": spec.model_name,
                        "messages": len(messages),
                        "stream": stream,
                        "options": _options_for_audit(options),
                    },
                )
            )
            try:
                with self._telemetry.model_call(
                    spec.provider.kind, spec.model_name, _options_for_audit(options)
                ) as span:
                    if stream:
                        response = await self._stream(turn, model, messages, settings, params)
                    else:
                        response = await model_request(
                            model,
                            messages,
                            model_settings=settings,
                            model_request_parameters=params,
                        )
                    span.record_response(
                        response.model_name,
                        response.provider_response_id,
                        [response.finish_reason] if response.finish_reason else [],
                        response.usage.input_tokens,
                        response.usage.output_tokens,
                    )
            except Exception as exc:
                error = translate_error(exc)
                if error is None:
                    raise
                elapsed = round((time.perf_counter() - started) * 1000, 1)
                turn.pending.append(
                    NewEvent(
                        TimelineKind.ERROR,
                        {
                            "attempt": attempt,
                            "error": type(error).__name__,
                            "detail": redact(str(error)),
                            "ms": elapsed,
                        },
                    )
                )
                if not policy.should_retry(error, attempt):
                    raise error from exc
                delay = policy.delay_for(error, attempt)
                turn.pending.append(
                    NewEvent(TimelineKind.RETRY, {"attempt": attempt + 1, "delay": delay})
                )
                turn.partial.clear()
                await self._emit(
                    turn, TurnRetry(turn.handle.uuid, attempt + 1, delay, type(error).__name__)
                )
                await self._sleep(delay)
                continue
            estimated = response.usage.input_tokens == 0 and response.usage.output_tokens == 0
            if estimated:
                # Some servers (llama.cpp among them) report no usage for a
                # streamed call; count it ourselves and say so in the audit.
                response.usage = estimate_usage(
                    messages, response, counter_for(spec.provider.kind, spec.model_name)
                )
            self._add_usage(turn, response)
            turn.pending.append(
                NewEvent(
                    TimelineKind.RESPONSE,
                    {
                        "attempt": attempt,
                        "usage_estimated": estimated,
                        "model": response.model_name,
                        "response_id": response.provider_response_id,
                        "finish_reason": response.finish_reason,
                        "input_tokens": response.usage.input_tokens,
                        "output_tokens": response.usage.output_tokens,
                        "ms": round((time.perf_counter() - started) * 1000, 1),
                    },
                )
            )
            return response

    def _wants_stream(self, turn: _Turn) -> bool:
        spec = turn.compiled.model
        if spec.provider.kind is ProviderKind.LOCAL and turn.compiled.tools:
            # llama-cpp-python 0.3.36 cannot stream when the model may pick a
            # tool ("Automatic streaming tool choice is not supported").
            return False
        if turn.config.stream is not None:
            return turn.config.stream
        if ModelCapability.STREAMING not in spec.capabilities:
            return False
        return turn.listener is not None or self.hub.active

    async def _stream(
        self,
        turn: _Turn,
        model: Model,
        messages: list[ModelMessage],
        settings: Any,
        params: ModelRequestParameters,
    ) -> ModelResponse:
        uuid = turn.handle.uuid
        async with model_request_stream(
            model, messages, model_settings=settings, model_request_parameters=params
        ) as stream:
            async for event in stream:
                text, thinking = delta_text(event)
                if text:
                    turn.partial.append(text)
                    await self._emit(turn, TextDelta(uuid, text))
                elif thinking:
                    await self._emit(turn, ThinkingDelta(uuid, thinking))
            return stream.get()

    def _add_usage(self, turn: _Turn, response: ModelResponse) -> None:
        usage = response.usage
        spec = turn.compiled.model
        turn.input_tokens += usage.input_tokens
        turn.output_tokens += usage.output_tokens
        turn.cached_tokens += usage.cache_read_tokens
        turn.reasoning_tokens += int(usage.details.get("reasoning_tokens", 0))
        if spec.input_price is not None:
            turn.cost += Decimal(usage.input_tokens) * spec.input_price / _MILLION
        if spec.output_price is not None:
            turn.cost += Decimal(usage.output_tokens) * spec.output_price / _MILLION

    def _usage_increments(self, turn: _Turn) -> dict[str, int | Decimal]:
        increments: dict[str, int | Decimal] = {
            "input_tokens": turn.input_tokens,
            "output_tokens": turn.output_tokens,
            "cached_tokens": turn.cached_tokens,
            "reasoning_tokens": turn.reasoning_tokens,
            "estimated_cost": turn.cost,
        }
        # Usage is counted once: whatever a batch wrote is not written again.
        turn.input_tokens = turn.output_tokens = turn.cached_tokens = turn.reasoning_tokens = 0
        turn.cost = Decimal(0)
        return increments

    async def _record_invalid_output(
        self, turn: _Turn, response: ModelResponse, parsed: ParsedResponse, errors: list[str]
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
            usage=self._usage_increments(turn),
        )
        turn.pending = []
        self._log_events(turn, batch.events)
        await self._writer.write(turn.handle, batch)

    async def _record_answer(
        self, turn: _Turn, response: ModelResponse, parsed: ParsedResponse, output: Any
    ) -> TurnResult:
        finish = finish_reason_of(response, parsed)
        calls = [
            NewToolCall(call.tool_call_id, call.tool_name, call.args_as_dict())
            for call in parsed.tool_calls
        ]
        returned: list[dict[str, Any]] = [
            {"id": c.call_id, "name": c.name, "arguments": dict(c.arguments)} for c in calls
        ]
        if returned:
            # Without executors for these tools the calls go back to the
            # caller unexecuted; the conversation ends with finish reason TC.
            finish = FinishReason.TOOL_CALLS
        marker = self._marker(turn, response)
        content = parsed.text if turn.compiled.output_schema is None else _json_text(output)
        data: dict[str, Any] = {"ai": marker}
        if returned:
            data["tool_calls"] = returned
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
            tool_calls=calls,
            outcomes=[
                ToolCallOutcome(c.call_id, ToolCallStatus.RETURNED, "returned to the caller")
                for c in calls
            ],
            changes={"finish_reason": finish, "response_model": response.model_name},
        )
        for call in calls:
            await self._emit(
                turn,
                ToolCallRequested(turn.handle.uuid, call.call_id, call.name, dict(call.arguments)),
            )
        return await self._end_turn(
            turn,
            batch,
            ProcessStatus.COMPLETED,
            finish_reason=finish,
            output=output,
            text=content,
            ai_meta=marker,
            tool_calls=returned,
        )

    def _marker(self, turn: _Turn, response: ModelResponse) -> dict[str, Any]:
        spec = turn.compiled.model
        return {
            "aiGenerated": True,
            "runId": turn.run_id,
            "provider": spec.provider.code,
            "model": response.model_name or spec.model_name,
            "responseId": response.provider_response_id,
            "generatedAt": utcnow().isoformat(),
        }

    async def _record_failed(self, turn: _Turn, detail: str) -> TurnResult:
        detail = redact(detail)
        batch = TurnBatch(
            events=[NewEvent(TimelineKind.ERROR, {"detail": detail})],
            changes={"error_detail": detail},
        )
        return await self._end_turn(turn, batch, ProcessStatus.FAILED, error=detail)

    async def _record_cancelled(self, turn: _Turn) -> TurnResult:
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
        turn: _Turn,
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
        batch.events = [*turn.pending, *batch.events, _status_event(ProcessStatus.RUNNING, status)]
        batch.changes = {**batch.changes, "status": status, "finished_at": utcnow()}
        result = TurnResult(
            conversation_uuid=handle.uuid,
            status=status,
            finish_reason=finish_reason,
            output=output,
            text=text,
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            cost=turn.cost,
            ai_meta=ai_meta,
            error=error,
            tool_calls=tool_calls or [],
        )
        batch.usage = self._usage_increments(turn)
        turn.pending = []
        self._log_events(turn, batch.events)
        await self._writer.write(handle, batch)
        await self._emit(turn, StatusChanged(handle.uuid, ProcessStatus.RUNNING, status))
        await self._emit(turn, TurnFinished(handle.uuid, result))
        return result

    def _log_events(self, turn: _Turn, events: list[NewEvent]) -> None:
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

    async def _emit(self, turn: _Turn, event: TurnEvent) -> None:
        if turn.listener is None and not self.hub.active:
            return
        await self.hub.emit(event, turn.listener)


def _status_event(old: ProcessStatus, new: ProcessStatus) -> NewEvent:
    return NewEvent(TimelineKind.STATUS_CHANGE, {"from": old.value, "to": new.value})


def _options_for_audit(options: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return {key: value for key, value in asdict(options).items() if value is not None}


def _json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
