"""What one process shares across tenants: :class:`Runtime`.

The heavy collaborators of the run loop (the model factory with its HTTP
pools, the action compiler with its cache and Redis pool, the tool source
with its MCP sessions, the telemetry, the event hub, the store and the
registry of running turns) are built once per process. A tenant is a view:
:meth:`Runtime.runner` returns a :class:`~pilothouse.runtime.Runner` for
one tenant, a few attributes over the shared parts, cheap to build and to
throw away.
"""

from __future__ import annotations

__all__ = ["RunningTurns", "Runtime"]

from collections.abc import Awaitable, Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, TypeVar

import anyio
from pydantic_ai.models import Model

from pilothouse.errors import InvalidStateError
from pilothouse.providers import ModelFactory
from pilothouse.runtime._budgetalerts import AlertBus, AlertNotifier, AlertWebhook
from pilothouse.runtime._budgetredis import RedisLedger
from pilothouse.runtime._budgets import BudgetGate
from pilothouse.runtime._compile import ActionCompiler, CompiledAction
from pilothouse.runtime._events import EventHub
from pilothouse.runtime._loop import TurnLoop
from pilothouse.runtime._record import TurnRecorder
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.runtime._toolexec import Authorizer
from pilothouse.runtime._toolset import ToolSource
from pilothouse.store import Database, TurnStore
from pilothouse.store._base import utcnow
from pilothouse.store._leases import Leases, OwnerIdentity

SKILL_OFFER_ABOVE = 12
"""An action with more skills has ``use_skill`` offer only those matching the request."""
SKILL_OFFER_TOP = 8
"""How many skills ``use_skill`` offers then (clients degrade past ~20-40 tools)."""

if TYPE_CHECKING:
    from pilothouse._coordination import Coordination
    from pilothouse.knowledge import DescriptionMatcher, Knowledge
    from pilothouse.memory import MemoryExtractor, ScopedMemory
    from pilothouse.providers import ModelSpec
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.runtime._runner import Runner
    from pilothouse.runtime._toolset import SkillInfo

_KNOWN_LIMIT = 10_000
"""Conversations a runtime keeps something of in memory (codes, prompt, ad-hoc action)."""


_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(store: dict[_K, _V], key: _K, value: _V) -> None:
    """Set ``store[key]``, dropping the oldest entry when a new key would pass the limit."""
    if key not in store and len(store) >= _KNOWN_LIMIT:
        # Oldest first: dicts keep insertion order.
        del store[next(iter(store))]
    store[key] = value


class RunningTurns:
    """The turns running in this process, by tenant and conversation, for cancel."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[str, str], anyio.CancelScope] = {}
        # When each turn began, so a cancel request recorded for an earlier
        # turn of the same conversation cannot cancel this one.
        self._started: dict[tuple[str, str], datetime] = {}
        self._why: dict[tuple[str, str], str] = {}
        self._ended: dict[tuple[str, str], anyio.Event] = {}

    def register(self, tenant: str, conversation_uuid: str) -> anyio.CancelScope:
        """Note a turn about to start; returns the scope it runs under.

        Raises:
            InvalidStateError: the conversation runs a turn here already.
        """
        key = (tenant, conversation_uuid)
        if key in self._scopes:
            raise InvalidStateError(
                f"conversation '{conversation_uuid}' is running a turn; "
                "wait for it to finish or cancel it"
            )
        scope = self._scopes[key] = anyio.CancelScope()
        self._started[key] = utcnow()
        self._ended[key] = anyio.Event()
        return scope

    @contextmanager
    def arriving(self, tenant: str, conversation_uuid: str) -> Generator[anyio.CancelScope]:
        """Register a turn as its request arrives, so a cancel while it is prepared stops it.

        A scope cancelled before it is entered cancels at its first
        checkpoint, and the turn records ``TE``. Registered at the take only,
        such a cancel found nothing running and terminated the idle
        conversation, which the turn then took and ran. A turn that fails
        before it starts is forgotten again.

        Raises:
            InvalidStateError: the conversation runs a turn here already.
        """
        scope = self.register(tenant, conversation_uuid)
        try:
            yield scope
        except BaseException:
            self.unregister(tenant, conversation_uuid)
            raise

    def unregister(self, tenant: str, conversation_uuid: str) -> None:
        """Forget a turn that ended."""
        self._scopes.pop((tenant, conversation_uuid), None)
        self._started.pop((tenant, conversation_uuid), None)
        self._why.pop((tenant, conversation_uuid), None)
        ended = self._ended.pop((tenant, conversation_uuid), None)
        if ended is not None:
            ended.set()

    async def wait_ended(self, tenant: str, conversation_uuid: str, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the conversation's turn here to be recorded."""
        ended = self._ended.get((tenant, conversation_uuid))
        if ended is not None:
            with anyio.move_on_after(timeout):
                await ended.wait()

    def why(self, tenant: str, conversation_uuid: str) -> str | None:
        """Who asked for the running turn's cancel, when it was not a caller of this process."""
        return self._why.get((tenant, conversation_uuid))

    def cancel(
        self,
        tenant: str,
        conversation_uuid: str,
        *,
        requested_at: datetime | None = None,
        why: str | None = None,
    ) -> bool:
        """Cancel the conversation's running turn; False when none runs here.

        Args:
            tenant: the conversation's tenant.
            conversation_uuid: the conversation.
            requested_at: when the cancel was asked (a request another process
                recorded); a turn that began later is not the one it meant.
            why: who asked, recorded with the cancel in the timeline.
        """
        key = (tenant, conversation_uuid)
        scope = self._scopes.get(key)
        if scope is None:
            return False
        if requested_at is not None and self._started[key] > requested_at:
            return False
        if why is not None:
            self._why[key] = why
        scope.cancel()
        return True

    def __len__(self) -> int:
        return len(self._scopes)

    def keys(self) -> list[tuple[str, str]]:
        """The (tenant, conversation uuid) of every turn running here."""
        return list(self._scopes)

    async def stop_all(self, grace: float, *, why: str, wait: float = 5.0) -> int:
        """Wait up to ``grace`` seconds for the turns running here, then cancel the rest.

        Each cancelled turn records ``TE`` (with ``why``) before this returns,
        or ``wait`` seconds have passed.

        Returns:
            How many turns were cancelled.
        """
        with anyio.move_on_after(grace):
            while self._scopes:
                await anyio.sleep(0.05)
        stopped = 0
        for tenant, uuid in self.keys():
            if self.cancel(tenant, uuid, why=why):
                stopped += 1
        with anyio.move_on_after(wait):
            while self._scopes:
                await anyio.sleep(0.02)
        return stopped


class Runtime:
    """The run loop's shared parts, for every tenant of one process.

    Tenants are views, not stacks: build one runtime per process and call
    :meth:`runner` for each tenant (per call if need be); every runner shares
    this runtime's model clients, compile cache, tool and MCP sessions, event
    hub and running turns.

    Args:
        database: the store's database (also the catalog's).
        models: builds and caches the pydantic-ai models.
        compiler: compiles actions once per catalog revision.
        store: where turns are written; the driver-level
            :class:`~pilothouse.store.SqlTurnStore` by default.
        hub: where turn events go.
        telemetry: OpenTelemetry spans (no-op when not configured).
        sleep: how retries wait (replaceable in tests).
        model_override: a model used for every call instead of the catalog's
            (tests inject the scripted model here).
        tool_source: resolves catalog tools and MCP clients to executable
            tools; one over the compiler's secrets is made on first need.
        authorizer: the default authorizer of every runner.
        tool_timeout: default seconds a tool call may take.
        tool_concurrency: how many calls of one response run at once.
        max_tool_steps: tool rounds one turn may take before it fails.
        knowledge: the knowledge service the retrieval advisor searches with
            (asked for only when an action has document collections); one
            over the database and the compiler's secrets otherwise.
        lease_seconds: how old another host's heartbeat may be before the
            turns its process owns are presumed orphaned.
        freeze_heap: freeze the process's heap once its first turn has
            ended (``Settings.freeze_heap``).
        coordination: the deployment's shared Redis: cancels for turns of
            another process are published to it as well (see
            :mod:`pilothouse._coordination`).
        egress: the deployment's egress policy when catalog URLs are checked
            at call time (the HTTP service): each runner runs its turns under
            its tenant's policy (``current_egress``), which the pinned
            transports of the model factory and tool source apply.
        budget_alert_webhook: where budget alerts are also POSTed (None: nowhere).
        budget_alert_bus: the bus budget alerts are also published on (None: none).
        budget_alert_topic: their topic there.
        lazy_start: whether an unseen turn's first write may commit without
            waiting for the log's flush (``Settings.database_lazy_start``).
    """

    def __init__(
        self,
        *,
        database: Database,
        models: ModelFactory,
        compiler: ActionCompiler,
        store: TurnStore | None = None,
        hub: EventHub | None = None,
        telemetry: Telemetry | None = None,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
        model_override: Model | None = None,
        tool_source: ToolSource | None = None,
        authorizer: Authorizer | None = None,
        tool_timeout: float = 30.0,
        tool_concurrency: int = 4,
        max_tool_steps: int = 10,
        scoped_memory: ScopedMemory | None = None,
        knowledge: Callable[[], Knowledge] | None = None,
        lease_seconds: float = 30.0,
        budget_alert_webhook: str | None = None,
        budget_alert_bus: str | None = None,
        budget_alert_topic: str = "pilothouse.budget-alerts",
        freeze_heap: bool = False,
        memory_index: str = "auto",
        coordination: Coordination | None = None,
        egress: EgressPolicy | None = None,
        lazy_start: bool = False,
    ) -> None:
        from pilothouse.store import SqlTurnStore

        self.egress = egress
        self.lazy_start = lazy_start
        self.freeze_pending = freeze_heap
        """True until a turn has ended in a runtime asked to freeze the heap."""
        self._scoped_memory = scoped_memory
        self._memory_index = memory_index
        self._extractor: MemoryExtractor | None = None
        self.coordination = coordination
        self.leases = Leases(database, OwnerIdentity.of_this_process(), lease_seconds=lease_seconds)
        self.database = database
        self.models = models
        self.compiler = compiler
        self.store: TurnStore = (
            store if store is not None else SqlTurnStore(database, owner=self.leases.owner)
        )
        if self.store.owner is None:
            self.store.owner = self.leases.owner
        self.hub = hub or EventHub()
        self.telemetry = telemetry or Telemetry()
        self.authorizer = authorizer
        self.tool_timeout = tool_timeout
        """Default seconds a tool call may take (a tool's own setting wins)."""
        self.running = RunningTurns()
        self._tool_source = tool_source
        self._knowledge_of = knowledge
        self._knowledge: Knowledge | None = None
        self._matcher: DescriptionMatcher | None = None
        self._known: dict[tuple[str, str], tuple[str, str | None]] = {}
        self._prompts: dict[tuple[str, str], int] = {}
        self._adhoc: dict[tuple[str, str], CompiledAction] = {}
        self.recorder = TurnRecorder(self.store, self.hub)
        self._alert_notifiers: list[AlertNotifier] = []
        if budget_alert_webhook is not None:
            self._alert_notifiers.append(AlertWebhook(budget_alert_webhook, egress))
        if budget_alert_bus is not None:
            self._alert_notifiers.append(AlertBus(budget_alert_bus, budget_alert_topic))
        self.budgets = BudgetGate(
            database,
            meter=lambda: self.telemetry.meter,
            notifiers=self._alert_notifiers,
            redis=None
            if coordination is None
            else RedisLedger(coordination.client, coordination.prefix),
        )
        """Holds each model call's worst case on the tenant's budgets."""
        self.loop = TurnLoop(
            models=models,
            recorder=self.recorder,
            telemetry=self.telemetry,
            sleep=sleep,
            tool_source=lambda: self.tool_source,
            model_override=model_override,
            tool_timeout=tool_timeout,
            tool_concurrency=tool_concurrency,
            max_tool_steps=max_tool_steps,
            budgets=self.budgets,
            catalog_model=self.catalog_model,
        )

    async def catalog_model(self, tenant: str, code: str) -> ModelSpec:
        """A tenant's catalog model by code, as a spec with its secrets resolved.

        Raises:
            NotFoundError: no active model of the tenant has the code.
        """
        from sqlalchemy import select

        from pilothouse.catalog._models import Model as CatalogModel
        from pilothouse.errors import NotFoundError

        async with self.database.sessions() as session:
            row = await session.scalar(
                select(CatalogModel).where(CatalogModel.tenant == tenant, CatalogModel.code == code)
            )
        if row is None or not row.active:
            raise NotFoundError(f"model '{code}' is not an active model of tenant {tenant}")
        return self.compiler.model_spec(row)

    @property
    def scoped_memory(self) -> ScopedMemory:
        """Scoped long-term memory, made on the first ``SCOPED`` turn (the embedder loads then)."""
        if self._scoped_memory is None:
            from pilothouse.memory import ScopedMemory

            self._scoped_memory = ScopedMemory(self.database, index=self._memory_index)
        return self._scoped_memory

    @property
    def extractor(self) -> MemoryExtractor:
        """Queues and runs extraction jobs with the jobs' models."""
        if self._extractor is None:
            from pilothouse.memory import MemoryExtractor
            from pilothouse.runtime._memory import ModelCompletion

            self._extractor = MemoryExtractor(
                self.scoped_memory, ModelCompletion(self), leases=self.leases
            )
        return self._extractor

    def runner(self, tenant: str, *, authorizer: Authorizer | None = None) -> Runner:
        """The tenant's view: runs that tenant's turns over this runtime.

        Args:
            tenant: whose conversations the runner drives.
            authorizer: asked before every tool execution of this tenant's
                turns; the runtime's default when None.
        """
        from pilothouse.runtime._runner import Runner

        return Runner(self, tenant, authorizer=authorizer or self.authorizer)

    @property
    def tool_source(self) -> ToolSource:
        """Where catalog tools and MCP clients become executable tools."""
        if self._tool_source is None:
            from pilothouse.runtime._toolset import CatalogToolSource

            self._tool_source = CatalogToolSource(self.compiler.secrets)
        return self._tool_source

    def knowledge(self) -> Knowledge:
        """The knowledge service, made on first use (an action with collections)."""
        if self._knowledge_of is not None:
            return self._knowledge_of()
        if self._knowledge is None:
            from pilothouse.knowledge import Knowledge

            self._knowledge = Knowledge(
                self.database,
                secrets=self.compiler.secrets,
                models=self.models,
                model_override=self.loop.model_override,
                leases=self.leases,
            )
        return self._knowledge

    async def skill_offer(self, skills: Sequence[SkillInfo], text: str) -> tuple[str, ...]:
        """The codes of the skills whose descriptions best match ``text``, best first.

        Seed 002's ``description_embedding``: descriptions are embedded with the
        packaged MiniLM once (cached by text), the request on every turn.
        """
        descriptions = {s.code: f"{s.name}: {s.description}" for s in skills}
        return await self.rank_descriptions(text, descriptions, top_k=SKILL_OFFER_TOP)

    async def rank_descriptions(
        self, text: str, descriptions: Mapping[str, str], *, top_k: int
    ) -> tuple[str, ...]:
        """The keys of the ``top_k`` descriptions closest in meaning to ``text``, best first.

        The packaged MiniLM embeds each description once (cached by text)
        and the request each time; no threshold, so the result is never
        empty while there are descriptions (``use_skill``'s offer, the MCP
        server's ``pilothouse_find_actions``).
        """
        if self._matcher is None:
            from pilothouse.knowledge import DescriptionMatcher

            self._matcher = DescriptionMatcher(self.knowledge().local_model())
        matches = await self._matcher.match(text, descriptions, top_k=top_k, threshold=-1.0)
        return tuple(m.key for m in matches)

    def remember(
        self, tenant: str, conversation_uuid: str, action_code: str, agent_code: str | None
    ) -> None:
        """Note a conversation's action and agent, which never change once started."""
        _keep(self._known, (tenant, conversation_uuid), (action_code, agent_code))

    def prompt_to_record(self, tenant: str, conversation_uuid: str, system_prompt: str) -> bool:
        """Tell whether a turn must record its system prompt as an ``SY`` message.

        The audit must show what the model was told (seed 000's ``SY``
        role), but a turn must not pay a statement for it: the prompt is
        recorded with the first turn and again only when it differs from
        the one this process last recorded for the conversation (a catalog
        change, templated input). After a restart it is recorded once more.
        """
        key = (tenant, conversation_uuid)
        digest = hash(system_prompt)
        if self._prompts.get(key) == digest:
            return False
        _keep(self._prompts, key, digest)
        return True

    @contextmanager
    def tenant_egress(self, tenant: str) -> Generator[None]:
        """Run what follows under ``tenant``'s egress policy, when catalog URLs are checked.

        The pinned transports of the model factory and the tool source read
        the policy from the context: a turn, a direct tool call and a
        worker's call each check the addresses against their own tenant's
        allow-list, never another tenant's. Without a policy (the operator's
        own process) nothing changes.
        """
        if self.egress is None:
            yield
            return
        with self.egress.for_tenant(tenant).applied():
            yield

    def remember_adhoc(self, tenant: str, conversation_uuid: str, compiled: CompiledAction) -> None:
        """Keep the compiled ad-hoc action a conversation runs, for its later resumes.

        An ad-hoc run (``run_adhoc``, ``/v1/invoke``) has no catalog action to
        compile again when its questions are answered or its returned calls
        get their results; its endpoint key is never stored, so the compiled
        action lives in the process that ran it (the most recent 10,000).
        """
        key = (tenant, conversation_uuid)
        self._adhoc.pop(key, None)  # the newest run of a conversation is kept longest
        _keep(self._adhoc, key, compiled)

    def adhoc(self, tenant: str, conversation_uuid: str) -> CompiledAction | None:
        """The compiled ad-hoc action :meth:`remember_adhoc` kept, if this process has it."""
        return self._adhoc.get((tenant, conversation_uuid))

    def forget_prompt(self, tenant: str, conversation_uuid: str) -> None:
        """Forget the prompt noted for a turn that failed before it wrote anything."""
        self._prompts.pop((tenant, conversation_uuid), None)

    async def codes(self, tenant: str, conversation_uuid: str) -> tuple[str, str | None]:
        """The conversation's action and agent codes, from memory when known.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        known = self._known.get((tenant, conversation_uuid))
        if known is not None:
            return known
        action_code, agent_code = await self.store.codes(tenant, conversation_uuid)
        self.remember(tenant, conversation_uuid, action_code, agent_code)
        return action_code, agent_code

    async def aclose(self) -> None:
        """Close what the runtime opened: tool clients, MCP sessions, advisor pools."""
        close = getattr(self._tool_source, "aclose", None)
        if close is not None:
            await close()
        await self.compiler.aclose()
        if self._knowledge is not None:
            await self._knowledge.aclose()
            self._knowledge = None
        for notifier in self._alert_notifiers:
            await notifier.aclose()
