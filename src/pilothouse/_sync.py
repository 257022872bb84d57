"""A thin synchronous wrapper around the async :class:`~pilothouse.api.Pilothouse`.

The async facade runs in an event loop on a background thread (an anyio
blocking portal); every call from synchronous code is handed to that loop
and waited for. Each half of the sync facade names the async methods it
offers, one line each: a coroutine method becomes a blocking call with the
same parameters and result type, an async generator method a plain
iterator. The types follow from the async methods, so the two facades
cannot drift apart (a test checks that every method is offered).
"""

from __future__ import annotations

__all__ = [
    "SyncCatalogApi",
    "SyncCommandApi",
    "SyncEventApi",
    "SyncHistoryApi",
    "SyncEvaluationApi",
    "SyncKeyApi",
    "SyncKnowledgeApi",
    "SyncMemoryApi",
    "SyncPilothouse",
    "SyncQueryApi",
]

import functools
import inspect
import queue
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from types import TracebackType
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Self,
    TypeVar,
    overload,
)

import anyio

from pilothouse._facade.catalog import CatalogApi
from pilothouse._facade.command import CommandApi
from pilothouse._facade.evaluation import EvaluationApi
from pilothouse._facade.events import EventApi
from pilothouse._facade.facet import Facet
from pilothouse._facade.history import HistoryApi
from pilothouse._facade.keys import KeyApi
from pilothouse._facade.knowledge import KnowledgeApi
from pilothouse._facade.memory import MemoryApi
from pilothouse._facade.query import QueryApi
from pilothouse.settings import Settings
from pilothouse.store import Database

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal
    from pydantic_ai.models import Model

    from pilothouse._coordination import Coordination
    from pilothouse._facade.mcpserver import CallerOf, McpService
    from pilothouse.api import Pilothouse
    from pilothouse.providers import LocalModelServers
    from pilothouse.runtime._events import Listener
    from pilothouse.tools import ToolRegistry
    from pilothouse.types import (
        Authorizer,
        Caller,
        CatalogEntity,
        CatalogEntry,
        ExtractionOutcome,
        KindForm,
        Meter,
        PromptContributor,
        SchemaRevision,
        StuckConversation,
    )

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class _SyncHalf:
    """A half of the sync facade: the async half it wraps and the portal to its loop."""

    def __init__(self, target: Facet, portal: BlockingPortal) -> None:
        self._target = target
        self._portal = portal

    @property
    def tenant(self) -> str:
        """The tenant every call acts for."""
        return self._target.tenant


def _without_self(method: Callable[..., Any], returns: str | None = None) -> inspect.Signature:
    signature = inspect.signature(method)
    parameters = list(signature.parameters.values())[1:]
    annotation = signature.return_annotation if returns is None else returns
    return signature.replace(parameters=parameters, return_annotation=annotation)


def sync_iterator_annotation(annotation: str) -> str:
    """The sync facade's return annotation for an async method's ``AsyncIterator[X]``.

    ``AsyncGenerator[X]`` (a stream the caller may close early) maps the same way.
    """
    inner = annotation.removeprefix("AsyncIterator[").removeprefix("AsyncGenerator[")
    inner = inner.removesuffix("]")
    return f"Generator[{inner}, None, None]"


class _Offered(Generic[P, R]):
    """A method of an async half, offered on the sync half with a signature of its own.

    A descriptor: read on a sync half, it returns the method bound to that
    half's async target, made synchronous by :meth:`_sync`.
    """

    def __init__(self, method: Callable[..., Any], signature: inspect.Signature) -> None:
        self.method = method
        self.__doc__ = method.__doc__
        self._signature = signature

    def _sync(self, bound: Callable[..., Any], portal: BlockingPortal) -> Callable[P, R]:
        raise NotImplementedError

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...

    @overload
    def __get__(self, instance: _SyncHalf, owner: type[Any]) -> Callable[P, R]: ...

    def __get__(self, instance: _SyncHalf | None, owner: type[Any]) -> Self | Callable[P, R]:
        if instance is None:
            return self
        bound = getattr(instance._target, self.method.__name__)  # pyright: ignore[reportPrivateUsage]
        call = self._sync(bound, instance._portal)  # pyright: ignore[reportPrivateUsage]
        call.__name__ = self.method.__name__
        call.__doc__ = self.method.__doc__
        call.__signature__ = self._signature
        return call


class _Blocking(_Offered[P, R]):
    """A coroutine method of an async half, offered as a blocking call."""

    def __init__(self, method: Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]) -> None:
        super().__init__(method, _without_self(method))

    def _sync(self, bound: Callable[..., Any], portal: BlockingPortal) -> Callable[P, R]:
        def call(*args: P.args, **kwargs: P.kwargs) -> R:
            result: R = portal.call(functools.partial(bound, *args, **kwargs))
            return result

        return call


class _Iterating(_Offered[P, Generator[T, None, None]], Generic[P, T]):
    """An async generator method of an async half, offered as a generator (``close()`` stops it)."""

    def __init__(self, method: Callable[Concatenate[Any, P], AsyncIterator[T]]) -> None:
        returns = str(inspect.signature(method).return_annotation)
        super().__init__(method, _without_self(method, sync_iterator_annotation(returns)))

    def _sync(
        self, bound: Callable[..., Any], portal: BlockingPortal
    ) -> Callable[P, Generator[T, None, None]]:
        def iterate(*args: P.args, **kwargs: P.kwargs) -> Generator[T, None, None]:
            return _drain(portal, lambda: bound(*args, **kwargs))

        return iterate


def _drain(
    portal: BlockingPortal, start: Callable[[], AsyncIterator[T]]
) -> Generator[T, None, None]:
    """Iterate an async iterator from sync code, the whole iteration in one task of the loop.

    One task, because an async generator may hold a task group or a cancel
    scope across its yields (a streamed turn does), and those must be left
    in the task that entered them. Items are handed over through a queue;
    stopping early cancels the task, and waits until it has cleaned up.
    """
    handed: queue.SimpleQueue[tuple[Literal["item", "end", "error"], Any]] = queue.SimpleQueue()

    async def pump() -> None:
        try:
            iterator = start()
            try:
                async for item in iterator:
                    handed.put(("item", item))
            finally:
                close = getattr(iterator, "aclose", None)
                if close is not None:
                    await close()
        except anyio.get_cancelled_exc_class():
            handed.put(("end", None))
            raise
        except Exception as exc:
            # Handed to the caller, who sees it raised from the iterator.
            handed.put(("error", exc))
        else:
            handed.put(("end", None))

    future = portal.start_task_soon(pump)
    finished = False
    try:
        while True:
            kind, value = handed.get()
            if kind == "item":
                yield value
            elif kind == "end":
                finished = True
                return
            else:
                finished = True
                raise value
    finally:
        if not finished:
            # The caller stopped early: cancel the iteration and wait for its cleanup.
            future.cancel()
            while handed.get()[0] == "item":
                pass


class SyncQueryApi(_SyncHalf):
    """:class:`~pilothouse.api.QueryApi` as blocking calls."""

    get_all_actions = _Blocking(QueryApi.get_all_actions)
    find_action_by_code = _Blocking(QueryApi.find_action_by_code)
    find_agent_by_code = _Blocking(QueryApi.find_agent_by_code)
    find_tool_by_code = _Blocking(QueryApi.find_tool_by_code)
    find_mcp_client_by_name = _Blocking(QueryApi.find_mcp_client_by_name)
    list_gateway_calls = _Blocking(QueryApi.list_gateway_calls)
    budget_status = _Blocking(QueryApi.budget_status)
    usage = _Blocking(QueryApi.usage)
    find_conversation = _Blocking(QueryApi.find_conversation)
    get_conversation = _Blocking(QueryApi.get_conversation)
    get_conversation_messages = _Blocking(QueryApi.get_conversation_messages)
    get_pending_questions = _Blocking(QueryApi.get_pending_questions)
    list_conversations = _Blocking(QueryApi.list_conversations)
    get_transcript = _Blocking(QueryApi.get_transcript)
    get_memory_messages = _Blocking(QueryApi.get_memory_messages)
    find_target = _Blocking(QueryApi.find_target)
    list_targets = _Blocking(QueryApi.list_targets)


class SyncCommandApi(_SyncHalf):
    """:class:`~pilothouse.api.CommandApi` as blocking calls; streams as iterators."""

    send_message = _Blocking(CommandApi.send_message)
    send_message_with_attachments = _Blocking(CommandApi.send_message_with_attachments)
    stream_message = _Iterating(CommandApi.stream_message)
    start_and_send = _Blocking(CommandApi.start_and_send)
    start_and_stream = _Iterating(CommandApi.start_and_stream)
    check_message = _Blocking(CommandApi.check_message)
    submit_answers = _Blocking(CommandApi.submit_answers)
    stream_answers = _Iterating(CommandApi.stream_answers)
    submit_tool_result = _Blocking(CommandApi.submit_tool_result)
    expire_waiting = _Blocking(CommandApi.expire_waiting)
    cancel = _Blocking(CommandApi.cancel)
    recover = _Blocking(CommandApi.recover)
    clear_memory = _Blocking(CommandApi.clear_memory)
    start_conversation = _Blocking(CommandApi.start_conversation)
    run_adhoc = _Blocking(CommandApi.run_adhoc)
    callable_tools = _Blocking(CommandApi.callable_tools)
    call_tool = _Blocking(CommandApi.call_tool)
    stream_adhoc = _Iterating(CommandApi.stream_adhoc)


class SyncCatalogApi(_SyncHalf):
    """:class:`~pilothouse.api.CatalogApi` as blocking calls."""

    validate = _Blocking(CatalogApi.validate)
    import_files = _Blocking(CatalogApi.import_files)
    import_documents = _Blocking(CatalogApi.import_documents)
    import_text = _Blocking(CatalogApi.import_text)
    export = _Blocking(CatalogApi.export)
    export_document = _Blocking(CatalogApi.export_document)
    list_entries = _Blocking(CatalogApi.list_entries)
    get = _Blocking(CatalogApi.get)
    create = _Blocking(CatalogApi.create)
    update = _Blocking(CatalogApi.update)
    delete = _Blocking(CatalogApi.delete)

    def __init__(self, target: CatalogApi, portal: BlockingPortal) -> None:
        super().__init__(target, portal)
        self._catalog = target

    def entry(self, entity: CatalogEntity) -> CatalogEntry:
        """:meth:`~pilothouse.api.CatalogApi.entry` (it does not wait)."""
        return self._catalog.entry(entity)

    def form(self, kind: str) -> KindForm:
        """:meth:`~pilothouse.api.CatalogApi.form` (it does not wait)."""
        return self._catalog.form(kind)

    def document_from_form(
        self, kind: str, values: Mapping[str, str | Sequence[str]]
    ) -> dict[str, Any]:
        """:meth:`~pilothouse.api.CatalogApi.document_from_form` (it does not wait)."""
        return self._catalog.document_from_form(kind, values)


class SyncHistoryApi(_SyncHalf):
    """:class:`~pilothouse.api.HistoryApi` as blocking calls."""

    list_conversations = _Blocking(HistoryApi.list_conversations)
    get = _Blocking(HistoryApi.get)
    rename = _Blocking(HistoryApi.rename)
    name_if_untitled = _Blocking(HistoryApi.name_if_untitled)
    hide = _Blocking(HistoryApi.hide)
    fork = _Blocking(HistoryApi.fork)
    export = _Blocking(HistoryApi.export)
    import_conversation = _Blocking(HistoryApi.import_conversation)
    system_prompt = _Blocking(HistoryApi.system_prompt)


class SyncEvaluationApi(_SyncHalf):
    """:class:`~pilothouse.api.EvaluationApi` as blocking calls."""

    create_dataset = _Blocking(EvaluationApi.create_dataset)
    list_datasets = _Blocking(EvaluationApi.list_datasets)
    get_dataset = _Blocking(EvaluationApi.get_dataset)
    cases = _Blocking(EvaluationApi.cases)
    add_cases = _Blocking(EvaluationApi.add_cases)
    export_dataset = _Blocking(EvaluationApi.export_dataset)
    import_dataset = _Blocking(EvaluationApi.import_dataset)
    delete_dataset = _Blocking(EvaluationApi.delete_dataset)
    replay = _Blocking(EvaluationApi.replay)
    get_run = _Blocking(EvaluationApi.get_run)
    list_runs = _Blocking(EvaluationApi.list_runs)
    evaluate = _Blocking(EvaluationApi.evaluate)


class SyncKeyApi(_SyncHalf):
    """:class:`~pilothouse.api.KeyApi` as blocking calls."""

    create = _Blocking(KeyApi.create)
    list_keys = _Blocking(KeyApi.list_keys)
    revoke = _Blocking(KeyApi.revoke)
    verify = _Blocking(KeyApi.verify)
    touch = _Blocking(KeyApi.touch)
    open_session = _Blocking(KeyApi.open_session)
    session_key = _Blocking(KeyApi.session_key)
    end_session = _Blocking(KeyApi.end_session)


class SyncKnowledgeApi(_SyncHalf):
    """:class:`~pilothouse.api.KnowledgeApi` as blocking calls."""

    ingest = _Blocking(KnowledgeApi.ingest)
    reingest = _Blocking(KnowledgeApi.reingest)
    start_ingest = _Blocking(KnowledgeApi.start_ingest)
    ingest_job = _Blocking(KnowledgeApi.ingest_job)
    search = _Blocking(KnowledgeApi.search)
    doctor = _Blocking(KnowledgeApi.doctor)
    documents = _Blocking(KnowledgeApi.documents)
    chunks = _Blocking(KnowledgeApi.chunks)
    delete_document = _Blocking(KnowledgeApi.delete_document)
    embed = _Blocking(KnowledgeApi.embed)


class SyncEventApi(_SyncHalf):
    """:class:`~pilothouse.api.EventApi` as blocking calls."""

    register_reply = _Blocking(EventApi.register_reply)
    release_reply = _Blocking(EventApi.release_reply)
    replies_sent = _Blocking(EventApi.replies_sent)
    finished_replies = _Blocking(EventApi.finished_replies)
    conversation_of = _Blocking(EventApi.conversation_of)
    unpublished = _Blocking(EventApi.unpublished)
    mark_published = _Blocking(EventApi.mark_published)
    complete = _Blocking(EventApi.complete)
    expire = _Blocking(EventApi.expire)
    recover = _Blocking(EventApi.recover)
    recover_actions = _Blocking(EventApi.recover_actions)
    counts = _Blocking(EventApi.counts)
    run_tool = _Blocking(EventApi.run_tool)

    def __init__(self, target: EventApi, portal: BlockingPortal) -> None:
        super().__init__(target, portal)
        self._events = target

    def register_tools(self, reference: str | Callable[..., Any]) -> list[str]:
        """:meth:`~pilothouse.api.EventApi.register_tools` (it does not wait)."""
        return self._events.register_tools(reference)


class SyncMemoryApi(_SyncHalf):
    """:class:`~pilothouse.api.MemoryApi` as blocking calls."""

    list = _Blocking(MemoryApi.list)
    get = _Blocking(MemoryApi.get)
    search = _Blocking(MemoryApi.search)
    add = _Blocking(MemoryApi.add)
    edit = _Blocking(MemoryApi.edit)
    forget = _Blocking(MemoryApi.forget)
    versions = _Blocking(MemoryApi.versions)
    erase_user = _Blocking(MemoryApi.erase_user)
    export_user = _Blocking(MemoryApi.export_user)
    erasures = _Blocking(MemoryApi.erasures)
    run_jobs = _Blocking(MemoryApi.run_jobs)
    jobs = _Blocking(MemoryApi.jobs)
    expire = _Blocking(MemoryApi.expire)
    index = _Blocking(MemoryApi.index)


async def _open(
    settings: Settings | None,
    tenant: str | None,
    database: Database | None,
    model: Model | None,
    local_servers: LocalModelServers | None,
    authorizer: Authorizer | str | None,
    tools: ToolRegistry | None,
    contributors: Sequence[PromptContributor] | None,
    meter: Meter | None,
    catalog_egress: bool,
) -> Pilothouse:
    from pilothouse.api import Pilothouse

    # Created on the portal's loop so the engine's connections belong to it.
    return await Pilothouse(
        settings,
        tenant=tenant,
        database=database,
        model=model,
        local_servers=local_servers,
        authorizer=authorizer,
        tools=tools,
        contributors=contributors,
        meter=meter,
        catalog_egress=catalog_egress,
    ).__aenter__()


class SyncPilothouse:
    """The Python API for synchronous code; exactly the arguments of ``Pilothouse``.

    ``query``, ``command``, ``catalog`` and ``keys`` offer every method of the
    async halves as blocking calls with the same arguments, results and
    exceptions; streaming methods return plain iterators::

        with SyncPilothouse(settings) as ph:
            conversation = ph.command.start_conversation(action="SUMMARIZE", agent="ANALYST")

    Call :meth:`close` (or leave the ``with`` block) to stop the background
    event loop and close what the facade opened.

    Attributes:
        facade: the async :class:`~pilothouse.api.Pilothouse` underneath.
        query: blocking reads.
        command: blocking state changes.
        catalog: blocking catalog operations.
        keys: blocking API key management.
        memory: blocking scoped long-term memory.
        events: blocking event-tool outbox, completions, deadlines and
            worker tool runs (docs/events.md).
        evaluation: blocking evaluation datasets.
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
        contributors: Sequence[PromptContributor] | None = None,
        meter: Meter | None = None,
        catalog_egress: bool = False,
    ) -> None:
        from anyio.from_thread import start_blocking_portal

        self._stack = ExitStack()
        portal = self._stack.enter_context(start_blocking_portal())
        try:
            facade = portal.call(
                _open,
                settings,
                tenant,
                database,
                model,
                local_servers,
                authorizer,
                tools,
                contributors,
                meter,
                catalog_egress,
            )
        except BaseException:
            self._stack.close()
            raise
        self._bind(facade, portal, owner=True)

    def coordination(self) -> Coordination | None:
        """The Redis the deployment's processes share, or None (see ``Pilothouse``)."""
        return self.facade.coordination()

    def _bind(self, facade: Pilothouse, portal: BlockingPortal, *, owner: bool) -> None:
        self.facade = facade
        self._portal = portal
        self._owner = owner
        self._closed = False
        self.query = SyncQueryApi(facade.query, portal)
        self.command = SyncCommandApi(facade.command, portal)
        self.catalog = SyncCatalogApi(facade.catalog, portal)
        self.keys = SyncKeyApi(facade.keys, portal)
        self.history = SyncHistoryApi(facade.history, portal)
        self.knowledge = SyncKnowledgeApi(facade.knowledge, portal)
        self.memory = SyncMemoryApi(facade.memory, portal)
        self.events = SyncEventApi(facade.events, portal)
        self.evaluation = SyncEvaluationApi(facade.evaluation, portal)

    @property
    def tenant(self) -> str:
        """The tenant every call acts for."""
        return self.facade.tenant

    def for_tenant(self, tenant: str, *, caller: Caller | None = None) -> SyncPilothouse:
        """Return a facade of ``tenant`` sharing this one's loop and everything else.

        See :meth:`Pilothouse.for_tenant`; closing the view closes nothing.
        """
        view = SyncPilothouse.__new__(SyncPilothouse)
        view._bind(self.facade.for_tenant(tenant, caller=caller), self._portal, owner=False)
        return view

    def mcp_service(
        self, caller_of: CallerOf, *, max_tools: int = 30, list_changed_seconds: float = 2.0
    ) -> McpService:
        """See :meth:`Pilothouse.mcp_service`.

        An MCP server is served by the SDK's async transports: the service
        returned is the async one, over this facade's shared parts.
        """
        return self.facade.mcp_service(
            caller_of, max_tools=max_tools, list_changed_seconds=list_changed_seconds
        )

    def subscribe(
        self, listener: Listener, *, conversation_uuid: str | None = None, deltas: bool = True
    ) -> None:
        """See :meth:`Pilothouse.subscribe`; the listener runs on the facade's loop thread."""
        self.facade.subscribe(listener, conversation_uuid=conversation_uuid, deltas=deltas)

    def unsubscribe(self, listener: Listener, *, conversation_uuid: str | None = None) -> None:
        """Stop calling ``listener``."""
        self.facade.unsubscribe(listener, conversation_uuid=conversation_uuid)

    def ensure_schema(self) -> None:
        """Create or upgrade the database schema; one read when it is current."""
        self._portal.call(self.facade.ensure_schema)

    def expire_questions(self) -> int:
        """End every conversation of every tenant whose questions waited too long."""
        return self._portal.call(self.facade.expire_questions)

    def run_memory_jobs(self, limit: int = 100) -> list[ExtractionOutcome]:
        """Run up to ``limit`` pending memory extraction jobs of every tenant."""
        return self._portal.call(functools.partial(self.facade.run_memory_jobs, limit))

    def expire_memory(self) -> int:
        """Delete every tenant's session memory past its TTL; return how many records."""
        return self._portal.call(self.facade.expire_memory)

    def upgrade_schema(self) -> tuple[str | None, str]:
        """Run every pending migration; return the revision before and after."""
        return self._portal.call(self.facade.upgrade_schema)

    def schema_revision(self) -> SchemaRevision:
        """Return where the schema stands, changing nothing."""
        return self._portal.call(self.facade.schema_revision)

    def stop_running_turns(self, *, grace: float) -> int:
        """Let running turns finish for ``grace`` seconds, then stop the rest (``TE``)."""
        return self._portal.call(functools.partial(self.facade.stop_running_turns, grace=grace))

    def script_tools_status(self) -> tuple[bool, str]:
        """Whether catalog script tools can run in this process, and why (see ``Pilothouse``)."""
        return self.facade.script_tools_status()

    def sweep_orphans(self, *, force: bool = False) -> list[StuckConversation]:
        """Mark ``ST`` every running conversation that no live process owns."""
        return self._portal.call(functools.partial(self.facade.sweep_orphans, force=force))

    @contextmanager
    def lease(
        self, *, heartbeat_seconds: float = 5.0, poll_seconds: float = 0.5
    ) -> Generator[list[StuckConversation]]:
        """Hold this process's lease while the block runs (see ``Pilothouse.lease``)."""
        held = self.facade.lease(heartbeat_seconds=heartbeat_seconds, poll_seconds=poll_seconds)
        with self._portal.wrap_async_context_manager(held) as swept:
            yield swept

    def close(self) -> None:
        """Close what the facade opened and stop the background loop (a view: nothing)."""
        if self._closed or not self._owner:
            return
        self._closed = True
        try:
            self._portal.call(self.facade.aclose)
        finally:
            self._stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
