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

import logging
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import anyio
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
)
from pydantic_ai.models import Model
from sqlalchemy import select

from pilothouse.catalog._enums import (
    FinishReason,
    InstructionMode,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import InvalidStateError, NotFoundError, PilothouseError, ProviderError
from pilothouse.memory import MemoryMessage, TokenCounter, counter_for, select_history
from pilothouse.providers import ModelFactory, to_model_settings
from pilothouse.runtime._advisors import ContentBlocked
from pilothouse.runtime._compile import ActionCompiler, CompiledAction
from pilothouse.runtime._config import RuntimeConfig
from pilothouse.runtime._convert import (
    build_messages,
    history_messages,
    parse_json_output,
    parse_response,
)
from pilothouse.runtime._events import (
    EventHub,
    Listener,
    StatusChanged,
    ToolCallRequested,
    TurnResult,
)
from pilothouse.runtime._modelcall import ModelCaller, TurnState
from pilothouse.runtime._newturn import NewTurn, activated_skills, memory_messages
from pilothouse.runtime._record import TurnRecording, status_event
from pilothouse.runtime._repair import CallProblem, RepairedCall, repair_calls
from pilothouse.runtime._request import feedback, grammar_output, request_parameters
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.runtime._toolexec import Authorizer, ToolExecutor
from pilothouse.runtime._toolset import ToolSet, ToolSource, offered_tools
from pilothouse.runtime._toolstep import (
    StepOutcome,
    normalized_response,
    results_as_text,
    run_tool_step,
)
from pilothouse.store import Conversation, Database
from pilothouse.store._base import utcnow
from pilothouse.store._writer import (
    ConversationWriter,
    NewAttachment,
    NewEvent,
    NewMessage,
    ToolCallOutcome,
    TurnBatch,
    TurnHandle,
)
from pilothouse.tools._base import ToolError

logger = logging.getLogger("pilothouse.audit")

_KNOWN_LIMIT = 10_000
"""Conversations whose action and agent codes a runner keeps in memory."""
_MILLION = Decimal(1_000_000)


class Runner(TurnRecording):
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
        tool_source: resolves catalog tools and MCP clients to executable tools.
        authorizer: asked before every tool execution; ``authorized`` tools
            never run without its yes.
        tool_timeout: default seconds a tool call may take.
        tool_concurrency: how many calls of one response run at once.
        max_tool_steps: tool rounds one turn may take before it fails.
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
        tool_source: ToolSource | None = None,
        authorizer: Authorizer | None = None,
        tool_timeout: float = 30.0,
        tool_concurrency: int = 4,
        max_tool_steps: int = 10,
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
        self._known: dict[str, tuple[str, str | None]] = {}
        self._caller = ModelCaller(
            telemetry=self._telemetry,
            sleep=sleep,
            emit=self._emit,
            hub_wants_deltas=self.hub.wants_deltas,
        )
        self._tool_source = tool_source
        self._authorizer = authorizer
        self._tool_timeout = tool_timeout
        self._tool_concurrency = tool_concurrency
        self._max_tool_steps = max_tool_steps

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
        checked = compiled is not None
        if compiled is None:
            action_code, agent_code = await self._codes(conversation_uuid)
        else:
            action_code, agent_code = compiled.action_code, compiled.agent_code
        turn = await self._turn_input(
            action_code, agent_code, text, attachments, input_data, runtime_config, compiled
        )
        return await self._drive(
            conversation_uuid,
            turn.compiled,
            turn.config,
            on_event,
            # The user's message and the read of the memory ride in the
            # transaction that takes the conversation: one commit, not three.
            begin=lambda: self._writer.begin_turn(
                conversation_uuid, first=turn.first(), read_memory=True
            ),
            body=self._new_turn_body(turn, checked=checked),
        )

    async def start_and_send(
        self,
        action_code: str,
        agent_code: str | None,
        text: str,
        *,
        memory_id: str | None = None,
        audit: bool | None = None,
        default_audit: bool = True,
        attachments: Sequence[NewAttachment] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        on_event: Listener | None = None,
        conversation_uuid: str | None = None,
    ) -> TurnResult:
        """Start a conversation and run its first turn: one transaction before the model call.

        The same records as ``create`` then :meth:`send_message`; the
        conversation is written already taken (``RU``) with the user's
        message, so nobody can see it in ``NS`` between the two.

        Args:
            action_code: the action the conversation runs.
            agent_code: the agent running it, if any.
            text: the user's message.
            memory_id: share chat memory with earlier conversations.
            audit: record the audit timeline; None follows the action, then
                ``default_audit``.
            default_audit: the deployment's setting.
            attachments: files sent with the message.
            input_data: values for the action prompt's ``{placeholders}``.
            runtime_config: per-call options and switches.
            on_event: called with every event of this turn.
            conversation_uuid: the new conversation's uuid, for a caller that
                must name it before the turn ends (the service's stream ids);
                a fresh one by default. It must be new: a uuid in use fails
                the insert and nothing is written.

        Returns:
            The turn's result (its ``conversation_uuid`` names the new
            conversation); a failed turn returns status ``FA``.

        Raises:
            NotFoundError: unknown action or agent (nothing is written).
            InvalidStateError: inactive action or agent (nothing is written).
            RuntimeConfigError: the runtime config is invalid.
            TemplateError: the input data does not fill the prompt.
        """
        turn = await self._turn_input(
            action_code, agent_code, text, attachments, input_data, runtime_config
        )
        conversation_uuid = conversation_uuid or str(uuid_module.uuid4())
        self.remember(conversation_uuid, action_code, agent_code)
        return await self._drive(
            conversation_uuid,
            turn.compiled,
            turn.config,
            on_event,
            begin=lambda: self._writer.start_turn(
                conversation_uuid,
                action_code=action_code,
                agent_code=agent_code,
                first=turn.first(),
                memory_id=memory_id,
                audit=audit,
                default_audit=default_audit,
                check_catalog=True,
            ),
            body=self._new_turn_body(turn, checked=False),
        )

    async def _turn_input(
        self,
        action_code: str,
        agent_code: str | None,
        text: str,
        attachments: Sequence[NewAttachment],
        input_data: Mapping[str, Any] | None,
        runtime_config: Mapping[str, Any] | None,
        compiled: CompiledAction | None = None,
    ) -> NewTurn:
        """Check a new turn's input, with the cached compilation when there is one."""
        if compiled is None:
            # A cached compilation saves a statement; the statement that
            # starts the turn reads the catalog revision to check it.
            compiled = self._compiler.cached(self._tenant, action_code, agent_code)
        compiled, config, system_prompt = await self.prepare(
            action_code, agent_code, text, input_data, runtime_config, attachments, compiled
        )
        return NewTurn(
            action_code=action_code,
            agent_code=agent_code,
            text=text,
            attachments=attachments,
            input_data=input_data,
            runtime_config=runtime_config,
            compiled=compiled,
            config=config,
            system_prompt=system_prompt,
            counter=counter_for(compiled.model.provider.kind, compiled.model.model_name),
        )

    def _new_turn_body(
        self, new: NewTurn, *, checked: bool
    ) -> Callable[[TurnState], Awaitable[TurnResult]]:
        """A new turn after its start: recompile if the catalog moved, then run it.

        Args:
            new: the turn's checked input.
            checked: the compilation is known current (compiled for this turn,
                or an ad-hoc action); otherwise it is checked against the
                revision read when the turn started.
        """

        async def body(turn: TurnState) -> TurnResult:
            prompt = new.system_prompt
            if not checked and turn.handle.catalog_revision != turn.compiled.revision:
                # The catalog changed since the cached compilation: compile
                # again. Rare, and the input is checked again with it.
                try:
                    turn.compiled, _, prompt = await self.prepare(
                        new.action_code,
                        new.agent_code,
                        new.text,
                        new.input_data,
                        new.runtime_config,
                        new.attachments,
                    )
                except PilothouseError as exc:
                    # Deleted, deactivated, or the input no longer fits.
                    return await self._record_failed(turn, f"the catalog changed: {exc}")
            return await self._run(turn, prompt, new.text, new.attachments, new.counter)

        return body

    async def _drive(
        self,
        conversation_uuid: str,
        compiled: CompiledAction,
        config: RuntimeConfig,
        listener: Listener | None,
        *,
        begin: Callable[[], Awaitable[TurnHandle]],
        body: Callable[[TurnState], Awaitable[TurnResult]],
    ) -> TurnResult:
        """Take the conversation, run ``body`` under a cancel scope, and record its end."""
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
            handle = await begin()
        except BaseException:
            self._running.pop(conversation_uuid, None)
            raise
        if config.audit is not None:
            handle.audit = config.audit
        turn = TurnState(handle=handle, compiled=compiled, config=config, listener=listener)
        try:
            with self._telemetry.turn(conversation_uuid, compiled.action_code, compiled.agent_code):
                with scope:
                    await self._emit(
                        turn,
                        StatusChanged(
                            conversation_uuid, handle.previous_status, ProcessStatus.RUNNING
                        ),
                    )
                    return await body(turn)
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

    async def resume(
        self,
        conversation_uuid: str,
        replies: Sequence[tuple[str, str, str]],
        *,
        allowed: frozenset[ProcessStatus],
        event: NewEvent,
        on_event: Listener | None = None,
        still_pending: Sequence[dict[str, Any]] = (),
    ) -> TurnResult:
        """Record answers to pending calls and let the model go on.

        Args:
            conversation_uuid: the conversation.
            replies: ``(call_id, tool name, content)`` for each answered call.
            allowed: statuses the conversation may be in.
            event: the audit event of the answer (human answer, tool result).
            on_event: called with every event of this turn.
            still_pending: calls of the caller's still without a result; when
                there are any, the replies are recorded and the model waits.
        """
        action_code, agent_code = await self._codes(conversation_uuid)
        compiled = await self._compiler.compile(self._tenant, action_code, agent_code)

        async def body(turn: TurnState) -> TurnResult:
            batch = TurnBatch(events=[event])
            for call_id, name, content in replies:
                batch.messages.append(
                    NewMessage(
                        MessageRole.TOOL, content, tool_call_id=call_id, data={"tool_name": name}
                    )
                )
                batch.outcomes.append(ToolCallOutcome(call_id, ToolCallStatus.SUCCEEDED, content))
            if still_pending:
                batch.changes["finish_reason"] = FinishReason.TOOL_CALLS
                return await self._end_turn(
                    turn,
                    batch,
                    ProcessStatus.COMPLETED,
                    finish_reason=FinishReason.TOOL_CALLS,
                    tool_calls=list(still_pending),
                )
            self._log_events(turn, batch.events)
            await self._writer.write(turn.handle, batch)
            history = await self._history(turn.handle)
            last = next((m for m in reversed(history) if m.role is MessageRole.USER), None)
            stored = dict((last.data or {}).get("input_data") or {}) if last else {}
            data = {"input": last.content if last else "", **stored}
            system_prompt = compiled.system_prompt(None, InstructionMode.APPEND, data)
            counter = counter_for(compiled.model.provider.kind, compiled.model.model_name)
            kept = select_history(
                history, compiled.memory, system_prompt=system_prompt, counter=counter
            )
            turn.active_skills = activated_skills(history)
            return await self._loop(turn, history_messages(system_prompt, kept))

        return await self._drive(
            conversation_uuid,
            compiled,
            RuntimeConfig(),
            on_event,
            begin=lambda: self._writer.begin_turn(conversation_uuid, allowed=allowed),
            body=body,
        )

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

    async def aclose(self) -> None:
        """Close what the runner opened: tool clients, MCP sessions, advisor pools."""
        close = getattr(self._tool_source, "aclose", None)
        if close is not None:
            await close()
        await self._compiler.aclose()

    @property
    def authorizer(self) -> Authorizer | None:
        """Asked before every tool execution."""
        return self._authorizer

    @authorizer.setter
    def authorizer(self, value: Authorizer | None) -> None:
        self._authorizer = value

    @property
    def tool_source(self) -> ToolSource:
        """Where catalog tools and MCP clients become executable tools."""
        return self._tool_source or self._default_tool_source()

    @property
    def compiler(self) -> ActionCompiler:
        """The action compiler this runner uses."""
        return self._compiler

    async def cancel(self, conversation_uuid: str) -> bool:
        """Abort the conversation's running turn, or terminate it when idle.

        Returns:
            True when a turn running in this process was aborted.
        """
        scope = self._running.get(conversation_uuid)
        if scope is not None:
            scope.cancel()
            return True
        await self.terminate(conversation_uuid, "cancelled")
        return False

    async def terminate(self, conversation_uuid: str, reason: str) -> None:
        """End a conversation that no turn is running here: status ``TE``.

        Also ends a conversation left ``RU`` by a process that died.
        """
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
                    NewEvent(TimelineKind.CANCEL, {"reason": reason, "running_here": False}),
                    status_event(ProcessStatus.RUNNING, ProcessStatus.TERMINATED),
                ],
                changes={"status": ProcessStatus.TERMINATED, "finished_at": utcnow()},
            ),
        )

    def remember(self, conversation_uuid: str, action_code: str, agent_code: str | None) -> None:
        """Note a conversation's action and agent, which never change once started."""
        if len(self._known) >= _KNOWN_LIMIT:
            # Oldest first: dicts keep insertion order.
            del self._known[next(iter(self._known))]
        self._known[conversation_uuid] = (action_code, agent_code)

    async def _codes(self, conversation_uuid: str) -> tuple[str, str | None]:
        known = self._known.get(conversation_uuid)
        if known is not None:
            return known
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
        self.remember(conversation_uuid, row[0], row[1])
        return row[0], row[1]

    async def _history(self, handle: TurnHandle) -> list[MemoryMessage]:
        """Every stored message sharing the conversation's memory id, oldest first."""
        return memory_messages(await self._writer.memory(handle.memory_id))

    async def _run(
        self,
        turn: TurnState,
        system_prompt: str,
        text: str,
        attachments: Sequence[NewAttachment],
        counter: TokenCounter,
    ) -> TurnResult:
        # The memory as it was before this turn's user message, read when the
        # turn began.
        history = memory_messages(turn.handle.memory)
        user = MemoryMessage(role=MessageRole.USER, content=text)
        kept = select_history(
            [*history, user], turn.compiled.memory, system_prompt=system_prompt, counter=counter
        )
        messages = build_messages(system_prompt, kept[:-1], text, attachments)
        turn.active_skills = activated_skills(history)
        return await self._loop(turn, messages)

    async def _loop(self, turn: TurnState, messages: list[ModelMessage]) -> TurnResult:
        """Call the model until it answers: tool rounds, repairs, output retries."""
        compiled = turn.compiled
        spec = compiled.model
        options = compiled.options.merged(turn.config.options)
        settings = to_model_settings(spec, options)
        model = self._model_override or await self._models.model(spec, options)
        executor = ToolExecutor(
            authorizer=self._authorizer,
            rules=turn.config.overrides,
            timeout=self._tool_timeout,
            concurrency=self._tool_concurrency,
            telemetry=self._telemetry,
        )
        output_attempts = repair_attempts = compiled.retry_count
        steps = 0
        force_text = False
        while True:
            try:
                toolset = await self._toolset(turn)
            except ToolError as exc:
                # A tool that cannot be built or an MCP server that cannot be
                # reached ends the turn with the reason, nothing lost.
                return await self._record_failed(turn, f"tools unavailable: {exc}")
            # Offering no tools (rather than tool_choice "none", which small
            # local models read as a cue to write calls as text) makes the
            # model answer from the results it has.
            offered = [] if force_text else toolset.definitions()
            params, wrapped_list = request_parameters(compiled, offered)
            call_settings = settings
            if compiled.output_schema is not None and spec.profile.grammar_output:
                call_settings, wrapped_list = (
                    grammar_output(settings, compiled),
                    compiled.is_list_output,
                )
            turn.offers_tools = bool(offered)
            try:
                response = await self._caller.call(
                    turn, model, messages, call_settings, params, options, self._tenant
                )
            except ProviderError as error:
                return await self._record_failed(turn, f"{type(error).__name__}: {error}")
            except ContentBlocked as blocked:
                return await self._record_blocked(turn, blocked)
            parsed = parse_response(response)
            calls, problems = repair_calls(
                parsed.tool_calls,
                parsed.text,
                toolset.validators,
                look_in_text=compiled.output_schema is None and bool(toolset.validators),
            )
            if calls or problems:
                steps += 1
                if steps > self._max_tool_steps:
                    return await self._record_failed(
                        turn,
                        f"the model made more than {self._max_tool_steps} rounds of tool calls",
                    )
                if problems and not calls:
                    repair_attempts -= 1
                    if repair_attempts < 0:
                        detail = "; ".join(p.message for p in problems)
                        return await self._record_failed(
                            turn, f"tool calls could not be repaired: {detail}"
                        )
                outcome = await self._tool_round(
                    turn, response, parsed.text, calls, problems, toolset, executor
                )
                if isinstance(outcome, TurnResult):
                    return outcome
                messages, force_text = [*messages, *outcome[0]], outcome[1]
                continue
            if compiled.output_schema is None:
                return await self._record_answer(turn, response, parsed, parsed.text)
            value, problem = parse_json_output(parsed, wrapped_list)
            errors = [problem] if problem else compiled.validation_errors(value)
            if not errors:
                return await self._record_answer(turn, response, parsed, value)
            await self._record_invalid_output(turn, response, parsed, errors)
            if output_attempts <= 0:
                detail = "output does not match the schema: " + "; ".join(errors)
                return await self._record_failed(turn, detail)
            output_attempts -= 1
            attempt = compiled.retry_count - output_attempts
            messages = [*messages, response, feedback(errors, parsed, attempt)]

    async def _tool_round(
        self,
        turn: TurnState,
        response: ModelResponse,
        text: str,
        calls: list[RepairedCall],
        problems: list[CallProblem],
        toolset: ToolSet,
        executor: ToolExecutor,
    ) -> TurnResult | tuple[list[ModelMessage], bool]:
        """Run one round of tool calls and record it.

        Returns:
            The turn's end (paused for answers, or calls for the caller), or
            the messages to add for the next request and whether that request
            must be answered in text.
        """
        response = normalized_response(response, calls, problems)
        step = await run_tool_step(
            tenant=self._tenant,
            conversation_uuid=turn.handle.uuid,
            response=response,
            text="" if any(c.from_text for c in calls) else text,
            calls=calls,
            problems=problems,
            toolset=toolset,
            executor=executor,
            skills=turn.compiled.skills,
            marker=self._marker(turn, response),
        )
        turn.active_skills.update(step.activated)
        for call in calls:
            await self._emit(
                turn,
                ToolCallRequested(turn.handle.uuid, call.call_id, call.name, call.arguments),
            )
        if step.request is None:
            return await self._pause_or_return(turn, response, step)
        step.batch.events[:0] = turn.pending
        turn.pending = []
        step.batch.usage = turn.usage_increments()
        self._log_events(turn, step.batch.events)
        await self._writer.write(turn.handle, step.batch)
        if turn.compiled.model.profile.tool_results_as_text:
            return [results_as_text(step.request)], True
        # A model asking again for results it already has is stuck: the next
        # request lets it answer only in text.
        return [response, step.request], step.only_repeats

    async def _toolset(self, turn: TurnState) -> ToolSet:
        compiled = turn.compiled
        needs_source = bool(
            compiled.tool_rows or compiled.mcp_clients or any(s.tools for s in compiled.skills)
        )
        source = self._tool_source or (self._default_tool_source() if needs_source else None)
        return await offered_tools(source, compiled, turn.active_skills, self._tool_timeout)

    def _default_tool_source(self) -> ToolSource:
        from pilothouse.runtime._toolset import CatalogToolSource

        self._tool_source = CatalogToolSource(self._compiler.secrets)
        return self._tool_source

    async def _pause_or_return(
        self, turn: TurnState, response: ModelResponse, step: StepOutcome
    ) -> TurnResult:
        """End the turn waiting for answers, or with calls for the caller."""
        batch = step.batch
        if step.questions is not None:
            batch.changes["response_model"] = response.model_name
            questions = [
                {"id": q["id"], "question": q["question"], "choices": q["choices"]}
                for q in step.questions
            ]
            return await self._end_turn(
                turn,
                batch,
                ProcessStatus.WAITING,
                finish_reason=FinishReason.TOOL_CALLS,
                output={"questions": questions},
            )
        returned = step.returned or []
        batch.changes.update(
            {"finish_reason": FinishReason.TOOL_CALLS, "response_model": response.model_name}
        )
        return await self._end_turn(
            turn,
            batch,
            ProcessStatus.COMPLETED,
            finish_reason=FinishReason.TOOL_CALLS,
            tool_calls=returned,
        )
