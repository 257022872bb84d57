"""The public Python facade of pilothouse.

One :class:`Pilothouse` per application (or per tenant) opens the database
and exposes two halves:

- ``ph.query`` (:class:`QueryApi`) reads the catalog and recorded
  conversations;
- ``ph.command`` (:class:`CommandApi`) changes state: starts conversations,
  and later sends messages, answers questions and cancels.

Naming rule of every read: ``find_*`` returns None when nothing matches;
``get_*`` raises :class:`~pilothouse.errors.NotFoundError`. Everything is
scoped to the facade's tenant: another tenant's rows are never visible.

Example:
    ```python
    async with Pilothouse(Settings(database_url="sqlite+aiosqlite:///ph.db")) as ph:
        conversation = await ph.command.start_conversation("ANALYST", "SUMMARIZE")
        print(await ph.query.find_conversation(conversation.uuid))
    ```

:class:`~pilothouse._sync.SyncPilothouse` offers the same methods to
synchronous code.
"""

from __future__ import annotations

__all__ = [
    "AttachmentInput",
    "CommandApi",
    "Pilothouse",
    "QueryApi",
    "SyncPilothouse",
]

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from sqlalchemy import select

from pilothouse._sync import SyncPilothouse
from pilothouse.catalog._enums import ProcessStatus
from pilothouse.catalog._models import Action, Agent, CatalogEntity, McpClient, Tool
from pilothouse.errors import NotFoundError
from pilothouse.settings import Settings
from pilothouse.store import (
    Conversation,
    ConversationQueries,
    ConversationView,
    Database,
    Message,
    Page,
)
from pilothouse.store import NewAttachment as AttachmentInput

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from pilothouse.providers import ModelFactory
    from pilothouse.providers._local import LocalModelServers
    from pilothouse.runtime import EventHub, Runner, Runtime, TurnEvent, TurnResult
    from pilothouse.runtime._toolexec import Authorizer
    from pilothouse.tools import ToolRegistry

E = TypeVar("E", bound=CatalogEntity)


class _Facet:
    """What both halves of the API share: the database, the tenant, the settings."""

    def __init__(self, database: Database, tenant: str, settings: Settings) -> None:
        self.database = database
        self.tenant = tenant
        self.settings = settings

    async def _ready(self) -> Database:
        # A no-op after the first call; makes a fresh database usable with
        # no setup step.
        await self.database.ensure_schema()
        return self.database

    async def _find(self, entity: type[E], key: str) -> E | None:
        """Return the tenant's catalog row with this business key, active or not."""
        db = await self._ready()
        column = getattr(entity, entity.key_field)
        async with db.sessions() as session:
            result = await session.scalars(
                select(entity).where(entity.tenant == self.tenant, column == key)
            )
            return result.unique().one_or_none()


class QueryApi(_Facet):
    """Reads the catalog and the recorded conversations of one tenant.

    ``find_*`` returns None when nothing matches; ``get_*`` raises
    :class:`~pilothouse.errors.NotFoundError`. Catalog rows come back with
    their ``active`` flag, inactive ones included, so a caller can tell
    "disabled" from "missing". Returned rows are detached from the database
    session and safe to keep.
    """

    def _conversations(self) -> ConversationQueries:
        return ConversationQueries(self.database, self.tenant)

    async def get_all_actions(self, *, include_inactive: bool = False) -> list[Action]:
        """Return the tenant's actions ordered by code.

        Args:
            include_inactive: also return deactivated actions.
        """
        db = await self._ready()
        statement = select(Action).where(Action.tenant == self.tenant).order_by(Action.code)
        if not include_inactive:
            statement = statement.where(Action.active.is_(True))
        async with db.sessions() as session:
            return list((await session.scalars(statement)).unique())

    async def find_action_by_code(self, code: str) -> Action | None:
        """Return the action with this code, or None."""
        return await self._find(Action, code)

    async def find_agent_by_code(self, code: str) -> Agent | None:
        """Return the agent with this code, or None."""
        return await self._find(Agent, code)

    async def find_tool_by_code(self, code: str) -> Tool | None:
        """Return the tool with this code, or None."""
        return await self._find(Tool, code)

    async def find_mcp_client_by_name(self, name: str) -> McpClient | None:
        """Return the MCP client with this name, or None."""
        return await self._find(McpClient, name)

    async def find_conversation(self, uuid: str) -> Conversation | None:
        """Return the conversation with this uuid, or None."""
        await self._ready()
        try:
            return await self._conversations().get(uuid)
        except NotFoundError:
            return None

    async def get_conversation(self, uuid: str) -> Conversation:
        """Return the conversation with this uuid.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().get(uuid)

    async def get_conversation_messages(self, uuid: str) -> list[Message]:
        """Return the conversation's messages in sequence order.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().messages(uuid)

    async def get_pending_questions(self, uuid: str) -> list[Message]:
        """Return the ``QU`` messages still waiting for answers (empty unless ``WA``).

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().pending_questions(uuid)

    async def list_conversations(
        self,
        *,
        agent: str | None = None,
        action: str | None = None,
        status: ProcessStatus | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[Conversation]:
        """Return one page of conversations, newest first, with the total count.

        Args:
            agent: only this agent's conversations.
            action: only this action's conversations.
            status: only conversations in this status.
            created_from: created at or after this aware time.
            created_to: created before this aware time.
            limit: page size (at least 1).
            offset: matching conversations to skip.
        """
        await self._ready()
        return await self._conversations().list(
            agent=agent,
            action=action,
            status=status,
            created_from=created_from,
            created_to=created_to,
            limit=limit,
            offset=offset,
        )

    async def get_transcript(self, uuid: str) -> ConversationView:
        """Return the whole conversation: fields, messages, tool calls, timeline.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().transcript(uuid)


class CommandApi(_Facet):
    """Changes the state of conversations of one tenant.

    Every command validates what it references against the catalog first,
    so a bad request fails with a clear error and writes nothing.
    """

    def __init__(self, database: Database, tenant: str, settings: Settings, runner: Runner) -> None:
        super().__init__(database, tenant, settings)
        self._runner = runner
        from pilothouse.runtime._hitl import Resumption

        self._resumption = Resumption(database, tenant, runner, runner.compiler)

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
            uuid, text, input_data=input_data, runtime_config=runtime_config
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
        )

    async def stream_message(
        self,
        uuid: str,
        text: str,
        *,
        attachments: Sequence[AttachmentInput] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[TurnEvent]:
        """Run one turn and yield its events as they happen.

        Text arrives as ``TextDelta`` events; the last event is
        ``TurnFinished`` with the result. Errors that refuse the turn
        (unknown conversation, bad config) are raised before any event.
        """
        await self._ready()
        config = {"stream": True, **(runtime_config or {})}
        async for event in _events(
            lambda on_event: self._runner.send_message(
                uuid,
                text,
                attachments=attachments,
                input_data=input_data,
                runtime_config=config,
                on_event=on_event,
            )
        ):
            yield event

    async def start_and_send(
        self,
        agent: str | None,
        action: str,
        text: str,
        *,
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
            agent: the agent's code, or None for an action run without agent.
            action: the action's code.
            text: the user's message.
            memory_id: share chat memory with earlier conversations.
            audit: record the audit timeline; None follows the action, then
                the deployment setting.
            attachments: files sent with the message.
            input_data: values for the action prompt's ``{placeholders}``.
            runtime_config: per-call options and switches, as for
                :meth:`send_message`.
            conversation_uuid: the new conversation's uuid, for a caller that
                must show it before the turn ends (the OpenAI endpoint's chunk
                ids); a fresh one by default. It must be new: a uuid in use
                writes nothing.

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
            default_audit=self.settings.audit,
            attachments=attachments,
            input_data=input_data,
            runtime_config=runtime_config,
            conversation_uuid=conversation_uuid,
        )

    async def start_and_stream(
        self,
        agent: str | None,
        action: str,
        text: str,
        *,
        memory_id: str | None = None,
        audit: bool | None = None,
        attachments: Sequence[AttachmentInput] = (),
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
        conversation_uuid: str | None = None,
    ) -> AsyncIterator[TurnEvent]:
        """:meth:`start_and_send`, yielding the turn's events as :meth:`stream_message` does."""
        await self._ready()
        config = {"stream": True, **(runtime_config or {})}
        async for event in _events(
            lambda on_event: self._runner.start_and_send(
                action,
                agent,
                text,
                memory_id=memory_id,
                audit=audit,
                default_audit=self.settings.audit,
                attachments=attachments,
                input_data=input_data,
                runtime_config=config,
                on_event=on_event,
                conversation_uuid=conversation_uuid,
            )
        ):
            yield event

    async def check_message(
        self,
        action: str,
        agent: str | None,
        text: str,
        *,
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
    ) -> None:
        """Check that a message would be accepted, without writing anything.

        Raises the same errors :meth:`send_message` raises for bad input, so a
        caller can refuse a request before it starts a conversation.
        """
        await self._ready()
        await self._runner.prepare(action, agent, text, input_data, runtime_config)

    async def submit_answers(self, uuid: str, answers: Mapping[str, str]) -> TurnResult:
        """Answer the questions a waiting conversation asked, and continue it.

        Args:
            uuid: a conversation in status ``WA``.
            answers: ``{question_id: answer}`` for every pending question.

        Raises:
            InvalidStateError: not waiting, or the questions expired.
            AnswerError: unknown, missing or out-of-choice answers.
        """
        await self._ready()
        return await self._resumption.submit_answers(uuid, answers)

    async def submit_tool_result(self, uuid: str, tool_call_id: str, result: Any) -> TurnResult:
        """Give the result of a custom-schema tool call returned to the caller.

        Args:
            uuid: the conversation (``CO`` with finish reason ``TC``).
            tool_call_id: the call's id from the turn result.
            result: text, or JSON-serializable data.
        """
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

        Returns:
            True when a turn running in this process was aborted.
        """
        await self._ready()
        return await self._runner.cancel(uuid)

    async def start_conversation(
        self,
        agent: str | None,
        action: str,
        *,
        memory_id: str | None = None,
        audit: bool | None = None,
    ) -> Conversation:
        """Record a new conversation (status ``NS``) of an agent running an action.

        Args:
            agent: the agent's code, or None for an action run without agent.
            action: the action's code.
            memory_id: share chat memory with earlier conversations; defaults
                to the new conversation's own uuid.
            audit: record the audit timeline; None follows the action, then
                the deployment setting.

        Returns:
            The new conversation.

        Raises:
            NotFoundError: the action or the agent does not exist.
            InvalidStateError: the action or the agent is deactivated.
        """
        await self._ready()
        conversation = await self._runner.store.create(
            self.tenant,
            action_code=action,
            agent_code=agent,
            memory_id=memory_id,
            audit=audit,
            default_audit=self.settings.audit,
            check_catalog=True,
        )
        self._runner.remember(conversation.uuid, action, agent)
        return conversation


async def _events(
    run: Callable[[Callable[[TurnEvent], Awaitable[None] | None]], Awaitable[TurnResult]],
) -> AsyncIterator[TurnEvent]:
    """Run ``run(on_event)`` as a task and yield the events it emits, as they come.

    An exception of the turn is raised after the events it emitted.
    """
    import anyio

    from pilothouse.runtime import TurnEvent as _TurnEvent

    send, receive = anyio.create_memory_object_stream[_TurnEvent](max_buffer_size=1024)
    failure: list[BaseException] = []

    def deliver(event: TurnEvent) -> Awaitable[None] | None:
        # Handed over without a checkpoint (send() yields to the loop first:
        # one more loop pass per delta); only a full buffer waits.
        try:
            send.send_nowait(event)
        except anyio.WouldBlock:
            return send.send(event)
        return None

    async def turn() -> None:
        async with send:
            try:
                await run(deliver)
            except Exception as exc:
                failure.append(exc)

    async with anyio.create_task_group() as group, receive:
        group.start_soon(turn)
        async for event in receive:
            yield event
    if failure:
        raise failure[0]


class Pilothouse:
    """The entry point of the Python API.

    Use it as an async context manager, or call :meth:`aclose` when done::

        async with Pilothouse(settings, tenant="acme") as ph:
            actions = await ph.query.get_all_actions()

    Args:
        settings: deployment settings; read from ``PILOTHOUSE_*`` environment
            variables when omitted.
        tenant: the tenant every call acts for; defaults to ``settings.tenant``.
        database: an open database to share; when given, :meth:`aclose`
            leaves it open for its owner. Otherwise one is opened from
            ``settings.database_url`` and closed by :meth:`aclose`.
        model: a model used for every call instead of the catalog's (tests).
        local_servers: llama.cpp servers to share; started on demand otherwise.
        authorizer: asked before every tool execution; ``authorized`` tools
            never run without its yes. A string is the code of a catalog tool
            that decides (see ``docs/tool-loop.md``).
        tools: a tool registry holding Python tools registered in code.

    Attributes:
        query: reads (catalog and conversations).
        command: state changes (conversations).
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        tenant: str | None = None,
        database: Database | None = None,
        model: Model | None = None,
        local_servers: LocalModelServers | None = None,
        authorizer: Authorizer | str | None = None,
        tools: ToolRegistry | None = None,
    ) -> None:
        from pilothouse.providers import ModelFactory, SecretResolver
        from pilothouse.providers._local import LocalModelServers
        from pilothouse.runtime import ActionCompiler, EventHub, Runtime
        from pilothouse.runtime._authorize import CatalogToolAuthorizer
        from pilothouse.runtime._toolset import CatalogToolSource

        self.settings = settings if settings is not None else Settings()
        self.tenant = tenant or self.settings.tenant
        self._owns_database = database is None
        self.database = database if database is not None else self.settings.open_database()
        # Local llama.cpp servers start only when a local model is first used.
        self._owns_servers = local_servers is None
        self._servers = local_servers if local_servers is not None else LocalModelServers()
        self._models: ModelFactory = ModelFactory(
            self._servers,
            timeout=self.settings.provider_timeout,
            connect_timeout=self.settings.provider_connect_timeout,
            max_connections=self.settings.provider_max_connections,
        )
        secrets = SecretResolver(env=dict(os.environ), secrets_file=self.settings.secrets_file)
        self.events: EventHub = EventHub()
        source = CatalogToolSource(secrets, registry=tools)
        self._runtime: Runtime = Runtime(
            database=self.database,
            models=self._models,
            compiler=ActionCompiler(self.database, secrets),
            hub=self.events,
            model_override=model,
            tool_source=source,
        )
        self.runner: Runner = self._runtime.runner(self.tenant)
        if isinstance(authorizer, str):
            # A catalog tool decides: its code was given instead of a callable.
            self.runner.authorizer = CatalogToolAuthorizer(
                self.database, self.tenant, authorizer, self.runner.tool_source
            )
        else:
            self.runner.authorizer = authorizer
        self.query = QueryApi(self.database, self.tenant, self.settings)
        self.command = CommandApi(self.database, self.tenant, self.settings, self.runner)

    async def __aenter__(self) -> Self:
        await self.database.ensure_schema()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close model clients, the local servers it started, and its own database."""
        await self._runtime.aclose()
        await self._models.aclose()
        if self._owns_servers:
            await self._servers.aclose()
        if self._owns_database:
            await self.database.dispose()
