"""The write half of the facade: conversations and their turns, for one tenant.

Every command checks what it references against the catalog first, so a
bad request fails with a clear error and writes nothing. Turns run on the
tenant's :class:`~pilothouse.runtime.Runner`, which the facade's shared
parts provide (see :class:`pilothouse.api.Pilothouse`).
"""

from __future__ import annotations

__all__ = ["CommandApi"]

import asyncio
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from pilothouse._caller import FACES, Caller
from pilothouse._facade import records
from pilothouse._facade.facet import Facet
from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.providers._egress import EgressPolicy
from pilothouse.store import Database, NewMessage
from pilothouse.store._tables import MEMORY_ID_LENGTH
from pilothouse.store._text import check_input, check_length

if TYPE_CHECKING:
    from pilothouse.runtime import Runner
    from pilothouse.runtime._hitl import Resumption
    from pilothouse.store import Conversation
    from pilothouse.types import (
        AdHocResult,
        AdHocRun,
        AttachmentInput,
        CallableTool,
        DirectToolCall,
        MessageInput,
        TurnEvent,
        TurnResult,
    )


class CommandApi(Facet):
    """Changes the state of conversations of one tenant.

    Every command validates what it references against the catalog first,
    so a bad request fails with a clear error and writes nothing. Actions
    and agents are named by keyword everywhere (``action=``, ``agent=``).

    Attributes:
        caller: who calls through this half (face and API key), from
            ``ph.for_tenant(tenant, caller=...)``; the conversations it
            starts and the messages it sends record it. None records nobody.
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        *,
        default_audit: bool,
        runner: Callable[[], Runner],
        egress: EgressPolicy | None = None,
        tool_classes: tuple[str, ...] = (),
        caller: Caller | None = None,
    ) -> None:
        super().__init__(database, tenant)
        # Who calls through this facade (its face, its API key): every
        # conversation it starts records it.
        self.caller = caller
        self._egress = egress if egress is not None else EgressPolicy()
        # The operator's allow-list of ad-hoc runs' tool classes (Settings.invoke_tool_classes).
        self._tool_classes = tool_classes
        self._default_audit = default_audit
        self._runner_of = runner
        self._resumption_: Resumption | None = None

    @property
    def _runner(self) -> Runner:
        # Built on first use: a facade that only reads never loads the run loop.
        return self._runner_of()

    @property
    def _resumption(self) -> Resumption:
        if self._resumption_ is None:
            from pilothouse.runtime._hitl import Resumption

            runner = self._runner
            self._resumption_ = Resumption(self._database, self.tenant, runner, self.caller)
        return self._resumption_

    async def send_message(
        self,
        uuid: str,
        text: str,
        *,
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
    ) -> TurnResult:
        """Run one turn: record ``text``, call the model, record the answer.

        Args:
            uuid: the conversation (status ``NS`` or ``CO``).
            text: the user's message.
            input_data: values for the action prompt's ``{placeholders}``.
            runtime_config: per-call options (``temperature``, ``max_tokens``,
                ...) and switches (``audit``, ``instruction``,
                ``instructionMode``, ``stream``).

        Returns:
            The turn's result. A provider failure is a result with status
            ``FA`` and the error detail, not an exception.

        Raises:
            NotFoundError: unknown conversation, action or agent.
            InvalidStateError: the conversation is running, waiting or finished.
            RuntimeConfigError: the runtime config is invalid.
        """
        await self._ready()
        return await self._runner.send_message(
            uuid, text, input_data=input_data, runtime_config=runtime_config, caller=self.caller
        )

    async def send_message_with_attachments(
        self,
        uuid: str,
        text: str,
        attachments: Sequence[AttachmentInput],
        *,
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
    ) -> TurnResult:
        """Like :meth:`send_message`, with files (a URL or the bytes each)."""
        await self._ready()
        return await self._runner.send_message(
            uuid,
            text,
            attachments=attachments,
            input_data=input_data,
            runtime_config=runtime_config,
            caller=self.caller,
        )

    async def stream_message(
        self,
        uuid: str,
        text: str,
        *,
        attachments: Sequence[AttachmentInput] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
    ) -> AsyncGenerator[TurnEvent]:
        """Run one turn and yield its events as they happen.

        Text arrives as ``TextDelta`` events; the last event is
        ``TurnFinished`` with the result. Errors that refuse the turn
        (unknown conversation, bad config) are raised before any event.
        """
        await self._ready()
        config = {"stream": True, **(runtime_config or {})}
        runner = self._runner
        async with aclosing(
            _events(
                lambda on_event: runner.send_message(
                    uuid,
                    text,
                    attachments=attachments,
                    input_data=input_data,
                    runtime_config=config,
                    on_event=on_event,
                    caller=self.caller,
                )
            )
        ) as events:
            async for event in events:
                yield event

    async def start_and_send(
        self,
        text: str,
        *,
        action: str,
        agent: str | None = None,
        memory_id: str | None = None,
        audit: bool | None = None,
        attachments: Sequence[AttachmentInput] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        conversation_uuid: str | None = None,
    ) -> TurnResult:
        """Start a conversation and run its first turn, in one call.

        The same records as :meth:`start_conversation` then
        :meth:`send_message`, with one transaction fewer before the model is
        called: the conversation is written already running, with the
        user's message. Use it for one-shot calls; the result's
        ``conversation_uuid`` names the conversation for further turns.

        Args:
            text: the user's message.
            action: the action's code.
            agent: the agent's code, or None for an action run without agent.
            memory_id: share chat memory with earlier conversations.
            audit: record the audit timeline; None follows the action, then
                the deployment setting.
            attachments: files sent with the message.
            input_data: values for the action prompt's ``{placeholders}``.
            runtime_config: per-call options and switches, as for
                :meth:`send_message`.
            conversation_uuid: the new conversation's uuid, for a caller that
                must show it before the turn ends (the OpenAI endpoint's chunk
                ids); a fresh one by default. It must be new (a uuid in use
                writes nothing) and written as ``str(uuid.uuid4())`` writes
                one, lowercase with hyphens (``InvalidFieldError`` otherwise).

        Returns:
            The turn's result. A provider failure is a result with status
            ``FA``, not an exception.

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
            RuntimeConfigError: the runtime config is invalid.

        Nothing is written when it raises.
        """
        await self._ready()
        return await self._runner.start_and_send(
            action,
            agent,
            text,
            memory_id=memory_id,
            audit=audit,
            default_audit=self._default_audit,
            attachments=attachments,
            input_data=input_data,
            runtime_config=runtime_config,
            conversation_uuid=conversation_uuid,
            caller=self.caller,
        )

    async def callable_tools(self) -> list[CallableTool]:
        """The tenant's catalog tools that :meth:`call_tool` runs, with their schemas.

        Active tools of kind python, rest, script and mcp; not ``schema``
        tools (their caller runs them), ``event`` tools (a worker does) or
        OpenAPI gateway rows (each operation is a tool of its own). A tool
        that cannot be built is left out and logged.
        """
        await self._ready()
        from pilothouse.runtime._directcall import callable_tools

        return await callable_tools(self._runner)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        via: str = "python",
        key_prefix: str | None = None,
        approve: Callable[[str, Mapping[str, Any]], Awaitable[bool]] | None = None,
    ) -> DirectToolCall:
        """Run one catalog tool outside a turn, governed and audited like a turn's call.

        The same tool source, policy, authorizer, skill access level
        (``write``/``execute`` links need the authorizer), script sandbox,
        timeout and argument check as a call in a turn. It is recorded as a
        conversation of its own (action code ``TOOLCALL``): the call, its
        tool call row, the tool message and the timeline; ``CO`` when the
        tool succeeded, ``FA`` when it failed or was denied.

        Args:
            name: the tool's name.
            arguments: its arguments (checked against its input schema).
            via: who called, for the record (``mcp``, ``python``, ...).
            key_prefix: the caller's API key prefix, for the record.
            approve: asks the caller's user to approve a call that needs
                approval (an MCP client's elicitation), used only when the
                deployment has no authorizer: a configured authorizer keeps
                the last word, and without either such a call is denied.

        Returns:
            The call's outcome; a failing or denied tool is an outcome, not
            an exception.

        Raises:
            NotFoundError: no active tool has this name.
            InvalidFieldError: the tool does not run on its own, or the
                arguments do not match its schema.
            ToolError: the tool cannot be built.
            ServiceUnavailableError: the service shut down while the tool
                ran; the conversation is recorded ``TE``.

        Nothing is written when it raises, but at the shutdown. A cancel of
        the conversation (:meth:`cancel`) stops the tool: the outcome is then
        ``failed`` with ``tool.exec.cancelled``, the conversation ``TE``.
        """
        await self._ready()
        from pilothouse.runtime._directcall import run_catalog_tool

        runner = self._runner
        if approve is not None and runner.authorizer is None:
            runner = runner.runtime.runner(runner.tenant, authorizer=approve)
        return await run_catalog_tool(
            runner,
            name,
            dict(arguments or {}),
            via=via,
            key_prefix=key_prefix,
            default_audit=self._default_audit,
            started_by=self.caller or Caller(via if via in FACES else "python", key_prefix),
        )

    async def start_and_stream(
        self,
        text: str,
        *,
        action: str,
        agent: str | None = None,
        memory_id: str | None = None,
        audit: bool | None = None,
        attachments: Sequence[AttachmentInput] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        conversation_uuid: str | None = None,
    ) -> AsyncGenerator[TurnEvent]:
        """:meth:`start_and_send`, yielding the turn's events as :meth:`stream_message` does."""
        await self._ready()
        config = {"stream": True, **(runtime_config or {})}
        runner = self._runner
        async with aclosing(
            _events(
                lambda on_event: runner.start_and_send(
                    action,
                    agent,
                    text,
                    memory_id=memory_id,
                    audit=audit,
                    default_audit=self._default_audit,
                    attachments=attachments,
                    input_data=input_data,
                    runtime_config=config,
                    on_event=on_event,
                    conversation_uuid=conversation_uuid,
                    caller=self.caller,
                )
            )
        ) as events:
            async for event in events:
                yield event

    async def check_message(
        self,
        text: str,
        *,
        action: str,
        agent: str | None = None,
        attachments: Sequence[AttachmentInput] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        catalog_revision: int | None = None,
    ) -> None:
        """Check that a message would be accepted, without writing anything.

        Raises the same errors :meth:`send_message` raises for bad input, so a
        caller can refuse a request before it starts a conversation.

        Args:
            text: the user's message.
            action: the action's code.
            agent: the agent's code, or None.
            attachments: files that would be sent with the message.
            input_data: values for the action prompt's ``{placeholders}``.
            runtime_config: per-call options and switches.
            catalog_revision: the tenant's catalog revision the caller read
                the action at (:attr:`~pilothouse.types.Target.revision`): a
                compilation of that revision is used without another read.
        """
        await self._ready()
        runner = self._runner
        compiled = None
        if catalog_revision is not None:
            compiled = runner.compiler.cached(self.tenant, action, agent)
            if compiled is not None and compiled.revision != catalog_revision:
                compiled = None
        await runner.prepare(
            action, agent, text, input_data, runtime_config, attachments, compiled=compiled
        )

    async def submit_answers(self, uuid: str, answers: Mapping[str, str]) -> TurnResult:
        """Answer the questions a waiting conversation asked, and continue it.

        Args:
            uuid: a conversation in status ``WA``.
            answers: ``{question_id: answer}`` for every pending question.

        Raises:
            InvalidStateError: not waiting, or the questions expired.
            AnswerError: unknown, missing or out-of-choice answers.
        """
        check_input(dict(answers), "answers")
        await self._ready()
        return await self._resumption.submit_answers(uuid, answers)

    async def stream_answers(
        self, uuid: str, answers: Mapping[str, str]
    ) -> AsyncGenerator[TurnEvent]:
        """Answer the pending questions, and yield the continued turn's events as they happen.

        As :meth:`submit_answers`, streamed as :meth:`stream_message` is: the
        answer's text as ``TextDelta``, each tool call and its result, and
        ``TurnFinished`` last. Refused answers are raised before any event.
        """
        check_input(dict(answers), "answers")
        await self._ready()
        resumption = self._resumption
        async with aclosing(
            _events(lambda on_event: resumption.submit_answers(uuid, answers, on_event=on_event))
        ) as events:
            async for event in events:
                yield event

    async def submit_tool_result(self, uuid: str, tool_call_id: str, result: Any) -> TurnResult:
        """Give the result of a custom-schema tool call returned to the caller.

        Args:
            uuid: the conversation (``CO`` with finish reason ``TC``).
            tool_call_id: the call's id from the turn result.
            result: text, or JSON-serializable data.
        """
        check_input(result, "result")
        await self._ready()
        return await self._resumption.submit_tool_result(uuid, tool_call_id, result)

    async def expire_waiting(self) -> int:
        """End conversations whose questions waited past their action's limit.

        Returns:
            How many conversations were terminated (``TE``).
        """
        await self._ready()
        return await self._resumption.expire_waiting()

    async def cancel(self, uuid: str) -> bool:
        """Cancel a conversation: abort its running turn, or terminate it when idle.

        A turn that another process of the service runs (another worker or
        replica) is asked to stop through the database; that process records
        it ``TE`` with the usage of its model calls, and this call waits for
        it (up to 10 s).

        Returns:
            True when a running turn was aborted, here or in another process.
        """
        await self._ready()
        return await self._runner.cancel(uuid)

    async def clear_memory(self, memory_id: str) -> bool:
        """Clear a chat memory: later turns of its conversations see no earlier message.

        Seed 000's ``LlmMemoryService``: memories "can be cleared
        explicitly". Nothing is deleted; a system message ``Chat memory
        cleared.`` marks the cut in the transcript. A conversation's own
        memory id is its uuid unless it was started with one.

        Returns:
            True when cleared; False when no conversation has this memory id.

        Raises:
            InvalidStateError: a conversation of the memory is running or waiting.
        """
        database = await self._ready()
        return await records.clear_memory(self._runner.store, database, self.tenant, memory_id)

    async def recover(self, uuid: str, *, retry: bool) -> TurnResult | None:
        """End a stuck conversation (``ST``, its turn's process died): retry or fail it.

        Args:
            uuid: the conversation.
            retry: call the model again on the stored history (the user's
                message is kept); False records it ``FA``.

        Returns:
            The retried turn's result; None when it was recorded failed.

        Raises:
            NotFoundError: no such conversation for this tenant.
            InvalidStateError: the conversation is not stuck.
        """
        await self._ready()
        return await self._runner.recover(uuid, retry=retry)

    async def start_conversation(
        self,
        *,
        action: str,
        agent: str | None = None,
        memory_id: str | None = None,
        audit: bool | None = None,
        history: Sequence[MessageInput] = (),
    ) -> Conversation:
        """Record a new conversation (status ``NS``) of an agent running an action.

        Args:
            action: the action's code.
            agent: the agent's code, or None for an action run without agent.
            memory_id: share chat memory with earlier conversations; defaults
                to the new conversation's own uuid.
            audit: record the audit timeline; None follows the action, then
                the deployment setting.
            history: messages recorded before the first turn, as if earlier
                turns had written them (a chat client's own history), so the
                first turn's chat memory holds them.

        Returns:
            The new conversation.

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
        """
        check_input(memory_id, "memory_id")
        check_length(memory_id, "memory_id", MEMORY_ID_LENGTH)
        for index, message in enumerate(history):
            check_input(message.content, f"history[{index}].content")
        await self._ready()
        runner = self._runner
        conversation = await runner.store.create(
            self.tenant,
            action_code=action,
            agent_code=agent,
            memory_id=memory_id,
            audit=audit,
            default_audit=self._default_audit,
            check_catalog=True,
            caller=self.caller,
        )
        runner.remember(conversation.uuid, action, agent)
        await records.append_messages(
            runner.store, self.tenant, conversation.uuid, history, status=ProcessStatus.NOT_STARTED
        )
        return conversation

    async def run_adhoc(self, run: AdHocRun) -> AdHocResult:
        """Run one turn of an agent described inline (nothing goes to the catalog).

        Everything the run references is checked before anything is written.
        With chat memory, every run with the same memory id continues one
        conversation; before each turn the run's system prompt is recorded
        as a system message carrying ``run.record``.

        Returns:
            The turn's result with the conversation and the memory id; a
            provider failure is a result with status ``FA``, not an exception.

        Raises:
            InvalidFieldError: an unknown or inactive model, tool or
                collection, a tool class the deployment does not allow, or
                an output schema that is no JSON schema.
            InvalidStateError: the run's conversation is running a turn.
            RuntimeConfigError: an invalid option.
        """
        from pilothouse.types import AdHocResult

        uuid, memory_id, result = await self._adhoc_turn(run, None)
        return AdHocResult(result=result, conversation_uuid=uuid, memory_id=memory_id)

    async def stream_adhoc(self, run: AdHocRun) -> AsyncGenerator[TurnEvent]:
        """:meth:`run_adhoc`, yielding the turn's events as :meth:`stream_message` does.

        The same checks and the same records as :meth:`run_adhoc` (the run's
        system message with ``run.record``, then the turn); the model is
        called streaming, so the answer arrives as ``TextDelta`` events and
        the last event is ``TurnFinished`` with the result. Every event
        names the conversation; its memory id is the conversation's
        (``ph.query.get_conversation(uuid).memory_id``).

        Raises:
            InvalidFieldError: as :meth:`run_adhoc`, before any event and
                with nothing written.
            InvalidStateError: the run's conversation is running a turn.
            RuntimeConfigError: an invalid option.
        """

        async def turn(on_event: Callable[[TurnEvent], Awaitable[None] | None]) -> TurnResult:
            _, _, result = await self._adhoc_turn(run, on_event)
            return result

        async with aclosing(_events(turn)) as events:
            async for event in events:
                yield event

    async def _adhoc_turn(
        self,
        run: AdHocRun,
        on_event: Callable[[TurnEvent], Awaitable[None] | None] | None,
    ) -> tuple[str, str, TurnResult]:
        """Check, record and run an ad-hoc turn: its conversation, memory id and result.

        One path for :meth:`run_adhoc` and :meth:`stream_adhoc`, so a
        streamed run is checked and recorded exactly as a plain one.
        """
        from pilothouse._facade import adhoc

        for name in ("name", "message", "description", "instruction"):
            check_input(getattr(run, name), name)
        if run.memory is not None:
            check_input(run.memory.memory_id, "memory.memory_id")
        database = await self._ready()
        runner = self._runner
        await adhoc.check_egress(run, self._egress)
        compiled = await adhoc.compile_run(
            database,
            self.tenant,
            runner.compiler,
            run,
            runner.runtime.knowledge() if run.pgvector is not None else None,
            allowed_tool_classes=self._tool_classes,
        )
        config: dict[str, Any] = {"instruction_mode": run.instruction_mode.value}
        if run.instruction is not None:
            config["instruction"] = run.instruction
        if run.audit is not None:
            config["audit"] = run.audit
        if on_event is not None:
            # Streamed as the governed stream_message asks for it.
            config["stream"] = True
        # Everything is checked before anything is written: a bad run leaves no conversation.
        _, _, system_prompt = await runner.prepare(
            adhoc.ADHOC_ACTION, None, run.message, None, config, compiled=compiled
        )
        found = await adhoc.conversation_for(database, self.tenant, run)
        if found is None:
            created = await runner.store.create(
                self.tenant,
                action_code=adhoc.ADHOC_ACTION,
                agent_code=None,
                memory_id=adhoc.new_memory_id(run),
                audit=run.audit,
                default_audit=self._default_audit,
                check_catalog=False,
                caller=self.caller,
            )
            found = created.uuid, ProcessStatus.NOT_STARTED, created.memory_id
        uuid, status, memory_id = found
        if status is not ProcessStatus.RUNNING:
            recorded = NewMessage(
                MessageRole.SYSTEM, system_prompt, data={adhoc.RECORD_KEY: dict(run.record)}
            )
            await records.append_messages(
                runner.store, self.tenant, uuid, [recorded], status=status
            )
        result = await runner.send_message(
            uuid,
            run.message,
            runtime_config=config,
            compiled=compiled,
            on_event=on_event,
            caller=self.caller,
        )
        return uuid, memory_id, result


async def _events(
    run: Callable[[Callable[[TurnEvent], Awaitable[None] | None]], Awaitable[TurnResult]],
) -> AsyncGenerator[TurnEvent]:
    """Run ``run(on_event)`` as a task and yield the events it emits, as they come.

    An exception of the turn is raised after the events it emitted. A reader
    that stops early (``break``, ``aclose()``, or the generator collected)
    cancels the turn and waits for it to record that.

    The turn is a plain task, not the child of a task group held open across
    the ``yield``: a cancel scope entered in the reader's task and left open
    while the reader runs its own code is what anyio forbids in async
    generators, and leaving such a stream early cancelled the reader's own
    task (the code before did exactly that).
    """
    channel = _Channel()

    async def turn() -> None:
        try:
            await run(channel.put)
        finally:
            channel.close()

    task = asyncio.get_running_loop().create_task(turn())
    try:
        while (event := await channel.get()) is not None:
            yield event
    finally:
        if not task.done():
            task.cancel()
            # Not ``await task``: that would raise the turn's cancellation
            # here; a cancellation of the reader's own task still does.
            await asyncio.wait([task])
    # Closing the channel is the turn's last step, so it is done: this
    # raises what it raised (or its cancellation), as the await would.
    await task


class _Channel:
    """One turn's events, handed from the turn's task to the task that iterates them.

    A streamed turn hands over an event per delta, so the hand-over is lean:
    a deque and one future the reader waits on. anyio's memory stream, used
    before, made each wait two passes of the event loop (its ``receive``
    checkpoints before it looks) and checked both tasks' cancel scopes on
    every item: with 200 streams at once that work delayed every other
    stream's first token (``docs/benchmarks.md``). Waiting
    on a plain future is still cancellable, so a cancellation of the reader's
    task reaches it. When the reader lags :data:`_LIMIT` events behind, the
    turn waits for it, as the bounded stream made it wait.
    """

    _LIMIT = 1024

    def __init__(self) -> None:
        self._items: deque[TurnEvent] = deque()
        self._reader: asyncio.Future[None] | None = None
        self._writer: asyncio.Future[None] | None = None
        self._closed = False

    def put(self, event: TurnEvent) -> Awaitable[None] | None:
        """Queue ``event``; returns something to await only when the reader lags behind."""
        self._items.append(event)
        self._wake_reader()
        if len(self._items) < self._LIMIT:
            return None
        self._writer = asyncio.get_running_loop().create_future()
        return self._writer

    def close(self) -> None:
        """The turn ended: the reader gets what is queued, then the end."""
        self._closed = True
        self._wake_reader()

    async def get(self) -> TurnEvent | None:
        """The next event, or None after the last one."""
        while not self._items:
            if self._closed:
                return None
            self._reader = asyncio.get_running_loop().create_future()
            try:
                await self._reader
            finally:
                self._reader = None
        event = self._items.popleft()
        writer = self._writer
        if writer is not None and len(self._items) < self._LIMIT // 2:
            self._writer = None
            if not writer.done():
                writer.set_result(None)
        return event

    def _wake_reader(self) -> None:
        reader = self._reader
        if reader is not None and not reader.done():
            reader.set_result(None)
