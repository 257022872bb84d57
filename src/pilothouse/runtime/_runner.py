"""The run loop: one turn of a conversation, end to end.

A turn validates its input before it touches the store, takes the
conversation (``RU``) with its first step (the user's message), then runs as
a state machine (:mod:`pilothouse.runtime._turn`): :class:`Prompt` or
:class:`Resume` assemble the request, :class:`CallModel` and
:class:`RunTools` alternate (:class:`~pilothouse.runtime._loop.TurnLoop`),
and an ending is recorded by the
:class:`~pilothouse.runtime._record.TurnRecorder`: assistant message with
the AI-generated marker, tool calls, usage, cost, finish reason and status.
Failures end in ``FA`` with the error detail, cancellation in ``TE``;
nothing recorded before is lost.

One turn, from the facade to the store::

    CommandApi.send_message
      -> Runner.send_message      check the input (compile, config, prompt)
      -> Runner._drive            take the conversation (TurnStore.begin_turn)
      -> Runner._steps            Prompt -> CallModel <-> RunTools -> ending
      -> TurnRecorder.end         TurnStore.write, then the events
"""

from __future__ import annotations

__all__ = ["Runner"]

import logging
import time
import uuid as uuid_module
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import anyio

from pilothouse._caller import Caller
from pilothouse._collector import freeze_once
from pilothouse._logs import bind_conversation
from pilothouse.catalog._enums import (
    ProcessStatus,
    TimelineKind,
)
from pilothouse.catalog._reserved import RESERVED_ACTION_CODES
from pilothouse.errors import (
    BudgetExceededError,
    InvalidStateError,
    PilothouseError,
    ServiceUnavailableError,
)
from pilothouse.memory import counter_for
from pilothouse.runtime._compile import ActionCompiler, CompiledAction
from pilothouse.runtime._config import RuntimeConfig
from pilothouse.runtime._events import (
    EventHub,
    Listener,
    ReturnedCall,
    StatusChanged,
    TurnResult,
)
from pilothouse.runtime._leasing import ask_owner
from pilothouse.runtime._opening import StartAhead, StartNotWritten, start_ahead, take
from pilothouse.runtime._prompted import prompted_call
from pilothouse.runtime._record import status_event
from pilothouse.runtime._replaytape import current_tape
from pilothouse.runtime._resumed import resumed_call
from pilothouse.runtime._toolexec import Authorizer
from pilothouse.runtime._toolset import ToolSource
from pilothouse.runtime._turn import (
    CallModel,
    Failed,
    NewConversation,
    NewTurn,
    Opening,
    Prompt,
    Resume,
    Returned,
    RunTools,
    Step,
    TakeConversation,
    ToolReply,
    Turn,
    mark_lazy_start,
)
from pilothouse.store import (
    STARTABLE,
    NewAttachment,
    NewEvent,
    NewProcessed,
    TurnBatch,
    TurnHandle,
    TurnStore,
)
from pilothouse.store._base import utcnow
from pilothouse.store._tables import MEMORY_ID_LENGTH
from pilothouse.store._text import check_input, check_json, check_length, check_uuid

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pilothouse.runtime._shared import Runtime


SHUTDOWN = "shutdown"
"""Why a turn is cancelled when its process stops (``Pilothouse.stop_running_turns``)."""

ELSEWHERE = "another process"
"""Who cancelled a turn when a caller of another process asked (as ``_leasing`` says it)."""


class Runner:
    """Runs the turns of one tenant's conversations: a view over a shared runtime.

    A runner holds its tenant and authorizer and nothing heavy: the model
    clients, compile cache, tools, event hub, store and running turns belong
    to the :class:`~pilothouse.runtime.Runtime` it was made by
    (``runtime.runner(tenant)``), shared by every tenant of the process. Make
    one per tenant, or one per call; both cost a few attributes.

    Args:
        runtime: the process's shared parts.
        tenant: the tenant whose conversations this runner drives.
        authorizer: asked before every tool execution; ``authorized`` tools
            never run without its yes.
    """

    def __init__(
        self, runtime: Runtime, tenant: str, *, authorizer: Authorizer | None = None
    ) -> None:
        self._runtime = runtime
        self.tenant = tenant
        self.authorizer = authorizer

    @property
    def runtime(self) -> Runtime:
        """The shared parts this view runs on."""
        return self._runtime

    @property
    def hub(self) -> EventHub:
        """Where turn events go (the runtime's, shared by every tenant)."""
        return self._runtime.hub

    @property
    def store(self) -> TurnStore:
        """Where turns are written."""
        return self._runtime.store

    @property
    def compiler(self) -> ActionCompiler:
        """The action compiler this runner uses."""
        return self._runtime.compiler

    @property
    def tool_source(self) -> ToolSource:
        """Where catalog tools and MCP clients become executable tools."""
        return self._runtime.tool_source

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
        caller: Caller | None = None,
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
            caller: who sent the message (face and API key), kept on it.

        Returns:
            The turn's result; a failed turn returns status ``FA`` with the
            error detail rather than raising.

        Raises:
            NotFoundError: unknown conversation, action or agent.
            InvalidStateError: the conversation is running, waiting or finished.
            RuntimeConfigError: the runtime config is invalid.
            TemplateError: the input data does not fill the prompt.
        """
        # A cancel another process records from now on is this turn's: it
        # finds nothing running while the turn is prepared here.
        arrived = time.monotonic()
        with self._runtime.running.arriving(self.tenant, conversation_uuid) as scope:
            if compiled is None:
                action_code, agent_code = await self._runtime.codes(self.tenant, conversation_uuid)
            else:
                action_code, agent_code = compiled.action_code, compiled.agent_code
                # Its resumes (answers, tool results) run the same action again.
                self._runtime.remember_adhoc(self.tenant, conversation_uuid, compiled)
            new = await self._new_turn(
                action_code,
                agent_code,
                text,
                attachments,
                input_data,
                runtime_config,
                compiled,
                caller,
            )
            # The user's message and the read of the memory ride in the
            # transaction that takes the conversation: one commit, not three.
            # An ad-hoc run (compiled given) records its own system message.
            record = compiled is None and self._runtime.prompt_to_record(
                self.tenant, conversation_uuid, new.system_prompt
            )
            opening = TakeConversation(
                conversation_uuid,
                STARTABLE,
                first=new.first(record_prompt=record),
                read_memory=True,
                arrived=arrived,
            )
        try:
            return await self._drive(
                opening,
                new.compiled,
                new.config,
                on_event,
                Prompt(new, checked=compiled is not None),
                scope,
            )
        except BaseException:
            # Not taken (running, waiting, gone): the prompt was not written either.
            if record:
                self._runtime.forget_prompt(self.tenant, conversation_uuid)
            raise

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
        caller: Caller | None = None,
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
                a fresh one by default. It must be new (a uuid in use fails
                the insert and nothing is written) and written as
                ``str(uuid.uuid4())`` writes one.
            caller: who started it (face and API key), kept on the row.

        Returns:
            The turn's result (its ``conversation_uuid`` names the new
            conversation); a failed turn returns status ``FA``.

        Raises:
            NotFoundError: unknown action or agent (nothing is written).
            InvalidStateError: inactive action or agent (nothing is written).
            RuntimeConfigError: the runtime config is invalid.
            TemplateError: the input data does not fill the prompt.
        """
        check_input(memory_id, "memory_id")
        check_length(memory_id, "memory_id", MEMORY_ID_LENGTH)
        if conversation_uuid is None:
            conversation_uuid = str(uuid_module.uuid4())
        else:
            check_uuid(conversation_uuid, "conversation_uuid")
        # A uuid the caller named may be cancelled while the turn is prepared.
        with self._runtime.running.arriving(self.tenant, conversation_uuid) as scope:
            new = await self._new_turn(
                action_code,
                agent_code,
                text,
                attachments,
                input_data,
                runtime_config,
                caller=caller,
            )
            self.remember(conversation_uuid, action_code, agent_code)
            record = self._runtime.prompt_to_record(
                self.tenant, conversation_uuid, new.system_prompt
            )
            opening = NewConversation(
                conversation_uuid,
                action_code,
                agent_code,
                new.first(record_prompt=record),
                memory_id,
                audit,
                default_audit,
                caller,
            )
        try:
            return await self._drive(
                opening, new.compiled, new.config, on_event, Prompt(new, checked=False), scope
            )
        except BaseException:
            self._runtime.forget_prompt(self.tenant, conversation_uuid)
            raise

    async def resume(
        self,
        conversation_uuid: str,
        replies: Sequence[ToolReply],
        *,
        allowed: frozenset[ProcessStatus],
        event: NewEvent,
        on_event: Listener | None = None,
        still_pending: Sequence[ReturnedCall] = (),
        waiting: bool = False,
        processed: Sequence[NewProcessed] = (),
        caller: Caller | None = None,
    ) -> TurnResult:
        """Record answers to pending calls and let the model go on.

        Args:
            conversation_uuid: the conversation.
            replies: the answer to each answered call.
            allowed: statuses the conversation may be in.
            event: the audit event of the answer (human answer, tool result).
            on_event: called with every event of this turn.
            still_pending: calls of the caller's still without a result; when
                there are any, the replies are recorded and the model waits.
            waiting: some of ``still_pending`` wait on the event bus (``WA``).
            processed: event completions these replies apply.
            caller: who gave the replies (face and API key), when known: the
                model calls that follow are charged to its key's budgets.
        """
        compiled = await self.compiled_of(conversation_uuid)
        step = Resume(
            tuple(replies), event, tuple(still_pending), waiting, tuple(processed), caller
        )
        # The replies (and the completions they apply) are written by the
        # statement that takes the conversation: written after it, a process
        # killed in between left the conversation RU with the answer lost and
        # no completion marked applied, so neither a redelivery (busy) nor the
        # recover sweep (nothing applied) ever went on with it.
        opening = TakeConversation(conversation_uuid, allowed, first=step.batch())
        return await self._drive(opening, compiled, RuntimeConfig(), on_event, step)

    async def compiled_of(self, conversation_uuid: str) -> CompiledAction:
        """The action a conversation runs: an ad-hoc run's own, else its catalog action's.

        Raises:
            NotFoundError: unknown conversation, action or agent.
            InvalidStateError: an ad-hoc run's conversation that this process
                did not run (or no longer holds: the most recent 10,000 are
                kept); its definition and endpoint key are never stored.
        """
        adhoc = self._runtime.adhoc(self.tenant, conversation_uuid)
        if adhoc is not None:
            return adhoc
        action_code, agent_code = await self._runtime.codes(self.tenant, conversation_uuid)
        if action_code in RESERVED_ACTION_CODES:
            raise InvalidStateError(
                f"conversation '{conversation_uuid}' is an ad-hoc run this process does not "
                "hold: its definition and endpoint key live only in the process that ran it "
                "(never in the store); continue it there, or start a new run"
            )
        return await self.compiler.compile(self.tenant, action_code, agent_code)

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
        # Text no database can keep is refused here, before anything is written.
        check_input(text, "text")
        check_input(input_data, "input_data")
        check_json(input_data, "input_data")
        check_input(runtime_config, "runtime_config")
        for index, attachment in enumerate(attachments):
            check_input(
                [attachment.name, attachment.url, attachment.media_type],
                f"attachments[{index}]",
            )
        config = RuntimeConfig.parse(runtime_config)
        if compiled is None:
            compiled = await self.compiler.compile(self.tenant, action_code, agent_code)
        tape = current_tape()
        if tape is not None and (tape.model is not None or tape.configuration is not None):
            compiled = await self.compiler.retarget(
                self.tenant, compiled, tape.model, tape.configuration
            )
        compiled = config.shape(compiled)
        # A local model named for a file its provider does not serve would
        # be recorded as a model that never ran: refused before any write
        # (a model given for every call, as tests do, is what runs instead).
        if self._runtime.loop.model_override is None:
            self._runtime.models.check_local_model(compiled.model)
        if config.retrieval.collections:
            # This turn searches the collections it names, not the action's own.
            sources = await self.compiler.active_collections(
                self.tenant, config.retrieval.collections
            )
            compiled = replace(compiled, retrieval=sources)
        data = {"input": text, **(input_data or {})}
        system_prompt = compiled.system_prompt(config.instruction, config.instruction_mode, data)
        for attachment in attachments:
            if attachment.url is None and attachment.content is None:
                raise PilothouseError("an attachment needs a url or content")
        return compiled, config, system_prompt

    async def cancel(self, conversation_uuid: str, *, wait: float = 10.0) -> bool:
        """Abort the conversation's running turn, or terminate it when idle.

        A turn that another live process runs (another worker or replica) is
        asked to stop through the database: that process cancels it and its
        own recorder writes ``TE`` with the usage so far, as a local cancel
        would. Either way this call waits up to ``wait`` seconds for ``TE``
        to be recorded, so the caller reads the ended conversation.

        Returns:
            True when a running turn was aborted (here or in another process).
        """
        runtime = self._runtime
        for attempt in range(2):
            if runtime.running.cancel(self.tenant, conversation_uuid):
                # The caller reads the conversation next: let the turn record TE.
                await runtime.running.wait_ended(self.tenant, conversation_uuid, wait)
                return True
            running, owner = await runtime.leases.running_owner(self.tenant, conversation_uuid)
            if await ask_owner(runtime, self.tenant, conversation_uuid, running, owner, wait):
                return True
            try:
                # A turn another process may still be preparing (nothing of
                # it is written yet) ends TE when it takes the conversation.
                # RU is ended here only when the check saw it (its process is
                # gone): a turn that took the conversation since is its live
                # process's, asked to stop on the next round.
                await self.terminate(
                    conversation_uuid, "cancelled", cancelled=True, left_running=running
                )
            except InvalidStateError:
                if running or attempt:
                    raise
                continue
            return False
        raise AssertionError("the second round returns or raises")

    async def recover(
        self, conversation_uuid: str, *, retry: bool, on_event: Listener | None = None
    ) -> TurnResult | None:
        """End a stuck turn (``ST``): run it again, or record it failed.

        Args:
            conversation_uuid: the conversation in ``ST``.
            retry: call the model again on the stored history (the user's
                message is kept); otherwise end the conversation ``FA``.
            on_event: called with every event of a retried turn.

        Returns:
            The retried turn's result, or None when it was failed.

        Raises:
            NotFoundError: no such conversation.
            InvalidStateError: it is not stuck.
        """
        stuck = frozenset({ProcessStatus.STUCK})
        if retry:
            return await self.resume(
                conversation_uuid,
                (),
                allowed=stuck,
                event=NewEvent(TimelineKind.RECOVER, {"how": "retry"}),
                on_event=on_event,
            )
        handle = await self.store.begin_turn(self.tenant, conversation_uuid, allowed=stuck)
        await self.store.write(
            handle,
            TurnBatch(
                events=[
                    NewEvent(TimelineKind.RECOVER, {"how": "fail"}),
                    status_event(ProcessStatus.RUNNING, ProcessStatus.FAILED),
                ],
                status=ProcessStatus.FAILED,
                error_detail="the turn stopped without an ending (ST); recovered as failed",
                finished_at=utcnow(),
            ),
        )
        return None

    async def terminate(
        self,
        conversation_uuid: str,
        reason: str,
        *,
        cancelled: bool = False,
        left_running: bool = True,
    ) -> None:
        """End a conversation that no turn is running here: status ``TE``.

        Also ends a conversation left ``RU`` by a process that died.

        Args:
            conversation_uuid: the conversation.
            reason: why, recorded with the cancel event.
            cancelled: a caller cancelled it: a turn whose message arrived
                before (still being prepared, in any process) ends ``TE``
                when it takes the conversation, rather than run. A
                conversation already ``TE`` (it takes new messages) is then
                recorded cancelled again, as an idle one is, and keeps the
                time it ended.
            left_running: end it from ``RU`` too (a process that died left
                it so); False refuses it (``InvalidStateError``).
        """
        handle = await self.store.begin_turn(
            self.tenant,
            conversation_uuid,
            allowed=(
                ProcessStatus.NOT_STARTED,
                ProcessStatus.COMPLETED,
                ProcessStatus.WAITING,
                ProcessStatus.PAUSED,
                ProcessStatus.STUCK,
                # Cancelled before, a conversation still takes new messages:
                # a cancel again records its time, for a turn still prepared.
                *((ProcessStatus.TERMINATED,) if cancelled else ()),
                *((ProcessStatus.RUNNING,) if left_running else ()),
            ),
        )
        await self.store.write(
            handle,
            TurnBatch(
                events=[
                    NewEvent(TimelineKind.CANCEL, {"reason": reason, "running_here": False}),
                    status_event(ProcessStatus.RUNNING, ProcessStatus.TERMINATED),
                ],
                status=ProcessStatus.TERMINATED,
                # Cancelled again, it ended at the first cancel: that end stays.
                finished_at=(
                    handle.previous_finished_at
                    if handle.previous_status is ProcessStatus.TERMINATED
                    else None
                )
                or utcnow(),
                cancelled=cancelled,
            ),
        )

    def remember(self, conversation_uuid: str, action_code: str, agent_code: str | None) -> None:
        """Note a conversation's action and agent, which never change once started."""
        self._runtime.remember(self.tenant, conversation_uuid, action_code, agent_code)

    async def _new_turn(
        self,
        action_code: str,
        agent_code: str | None,
        text: str,
        attachments: Sequence[NewAttachment],
        input_data: Mapping[str, Any] | None,
        runtime_config: Mapping[str, Any] | None,
        compiled: CompiledAction | None = None,
        caller: Caller | None = None,
    ) -> NewTurn:
        """Check a new turn's input, with the cached compilation when there is one."""
        if compiled is None:
            # A cached compilation saves a statement; the statement that
            # starts the turn reads the catalog revision to check it.
            compiled = self.compiler.cached(self.tenant, action_code, agent_code)
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
            caller=caller,
        )

    async def _drive(
        self,
        opening: Opening,
        compiled: CompiledAction,
        config: RuntimeConfig,
        listener: Listener | None,
        first: Prompt | Resume,
        scope: anyio.CancelScope | None = None,
    ) -> TurnResult:
        """Take the conversation, run the turn's steps under a cancel scope, record its end.

        ``scope`` is the turn's, registered as its request arrived; None: one now.
        """
        # Every URL the turn calls (model, tools, MCP) is checked against
        # this tenant's policy, never another tenant's.
        with self._runtime.tenant_egress(self.tenant):
            return await self._drive_turn(opening, compiled, config, listener, first, scope)

    async def _drive_turn(
        self,
        opening: Opening,
        compiled: CompiledAction,
        config: RuntimeConfig,
        listener: Listener | None,
        first: Prompt | Resume,
        scope: anyio.CancelScope | None,
    ) -> TurnResult:
        runtime, uuid = self._runtime, opening.uuid
        if scope is None:
            # Registered before the conversation is taken, so a cancel that
            # arrives while the turn starts still reaches it.
            scope = runtime.running.register(self.tenant, uuid)
        try:
            ahead, handle = await self._take(opening, compiled, listener, first)
        except BaseException:
            runtime.running.unregister(self.tenant, uuid)
            raise
        if config.audit is not None:
            handle.audit = config.audit
        turn = Turn(handle=handle, compiled=compiled, config=config, listener=listener)
        if ahead:
            ahead.attach(turn, config.audit)
        recorder = runtime.recorder
        started = time.perf_counter()
        try:
            with runtime.telemetry.turn(uuid, compiled.action_code, compiled.agent_code):
                with scope:
                    await recorder.emit(
                        turn, StatusChanged(uuid, handle.previous_status, ProcessStatus.RUNNING)
                    )
                    if scope.cancel_called:
                        # Cancelled before it began (while it was prepared):
                        # it ends here, with no model request recorded.
                        await anyio.lowlevel.checkpoint()
                    ran = (
                        self._steps(turn, first)
                        if ahead is None
                        else ahead.steps(self._steps, turn, first)
                    )
                    return self._measured(turn, started, await ran)
                why = runtime.running.why(self.tenant, uuid)
                result = self._measured(turn, started, await recorder.cancelled(turn, why))
                if why == SHUTDOWN:
                    # Recorded TE; the caller is told to come back, not given a
                    # half answer as if the turn had ended on its own.
                    raise ServiceUnavailableError(
                        "the service is shutting down: the turn was stopped and recorded TE; "
                        "send the message again",
                        retry_after=5,
                    )
                return result
        except ServiceUnavailableError:
            raise
        except BudgetExceededError as refused:
            # Recorded as a failed turn (the refusal is part of the record),
            # then raised so each face answers it in its own way.
            with anyio.CancelScope(shield=True):
                self._measured(turn, started, await recorder.end(turn, Failed(str(refused))))
            raise
        except BaseException as exc:
            if ahead and await ahead.failure():
                # The conversation was never written: nothing to record.
                raise exc.cause if isinstance(exc, StartNotWritten) else exc from None
            with anyio.CancelScope(shield=True):
                if isinstance(exc, anyio.get_cancelled_exc_class()):
                    ended = await recorder.cancelled(turn, runtime.running.why(self.tenant, uuid))
                else:
                    ended = await recorder.end(
                        turn, Failed(f"internal error: {type(exc).__name__}")
                    )
                self._measured(turn, started, ended)
            raise
        finally:
            runtime.running.unregister(self.tenant, uuid)
            if runtime.freeze_pending:
                # After the first turn: by then the process has built what
                # it keeps (models, mappings, price table, compiled actions).
                runtime.freeze_pending = False
                freeze_once()
            if turn.settles:
                # A settle no write took (the turn's end could not be
                # written): the hold must not outlive the turn.
                with anyio.CancelScope(shield=True):
                    await recorder.write(turn, TurnBatch())

    async def _take(
        self,
        opening: Opening,
        compiled: CompiledAction,
        listener: Listener | None,
        first: Prompt | Resume,
    ) -> tuple[StartAhead | None, TurnHandle]:
        """Take the conversation, or send its start ahead; the handle the turn runs on."""
        runtime, uuid = self._runtime, opening.uuid
        if not runtime.leases.registered:
            # Once per process: the owner row the turn's conversation names.
            await runtime.leases.register()
        # Every log line of the turn names its conversation.
        bind_conversation(uuid)
        # Whether anyone sees the turn running before its record exists.
        watched = listener is not None or self.hub.wants_deltas(uuid, self.tenant)
        if runtime.lazy_start and opening.first is not None:
            mark_lazy_start(opening.first, first, compiled, watched)
        ahead = await start_ahead(runtime, opening, first, compiled, watched, self.tenant)
        handle = ahead.provisional if ahead else await take(self.store, self.tenant, opening)
        if handle.cancelled:
            # Cancelled by a caller of another process after the message
            # arrived, while the turn was prepared here: that process found
            # nothing running and terminated the idle conversation. Taken all
            # the same, so the turn records its message and its cancel (TE)
            # as a cancel this process took would, and calls no model.
            runtime.running.cancel(self.tenant, uuid, why=ELSEWHERE)
        return ahead, handle

    def _measured(self, turn: Turn, started: float, result: TurnResult) -> TurnResult:
        """Give the turn's measurements to the meter, if any; return ``result``."""
        meter = self._runtime.telemetry.meter
        if meter is not None:
            spec = turn.compiled.model
            meter.turn(
                provider=spec.provider.code,
                model=spec.model_name,
                action=turn.compiled.action_code,
                status=result.status.value,
                seconds=time.perf_counter() - started,
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                cost=float(result.cost),
            )
        return result

    async def _steps(self, turn: Turn, step: Step) -> TurnResult:
        """The turn's state machine: each step returns the next, until an ending."""
        loop = self._runtime.loop
        while True:
            match step:
                case Prompt():
                    step = await prompted_call(self._runtime, self.tenant, turn, step, self.prepare)
                case Resume():
                    step = await self._resume(turn, step)
                case CallModel():
                    step = await loop.call_model(turn, step, self.authorizer)
                case RunTools():
                    step = await loop.run_tools(turn, step)
                case _:
                    result = await self._runtime.recorder.end(turn, step)
                    if turn.compiled.memory.scoped is not None:
                        from pilothouse.runtime._memory import remember

                        runtime = self._runtime
                        await remember(runtime, turn, turn.memory_text, result, runtime.extractor)
                    return result

    async def _resume(self, turn: Turn, step: Resume) -> CallModel | Returned | Failed:
        """Go on from the stored history (the take wrote the replies), unless calls still wait."""
        if step.caller is not None:
            # The key that resumes the turn spends on it, as the record names
            # it (a new message's turn is charged to its own key the same way).
            turn.key_prefix = step.caller.key_prefix
        return await resumed_call(self._runtime, self.tenant, turn, step)
