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

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import anyio
from pydantic_ai.models import Model

from pilothouse.errors import InvalidStateError
from pilothouse.providers import ModelFactory
from pilothouse.runtime._compile import ActionCompiler
from pilothouse.runtime._events import EventHub
from pilothouse.runtime._loop import TurnLoop
from pilothouse.runtime._record import TurnRecorder
from pilothouse.runtime._telemetry import Telemetry
from pilothouse.runtime._toolexec import Authorizer
from pilothouse.runtime._toolset import ToolSource
from pilothouse.store import Database, TurnStore

SKILL_OFFER_ABOVE = 12
"""An action with more skills has ``use_skill`` offer only those matching the request."""
SKILL_OFFER_TOP = 8
"""How many skills ``use_skill`` offers then (clients degrade past ~20-40 tools)."""

if TYPE_CHECKING:
    from pilothouse.knowledge import DescriptionMatcher, Knowledge
    from pilothouse.runtime._runner import Runner
    from pilothouse.runtime._toolset import SkillInfo

_KNOWN_LIMIT = 10_000
"""Conversations whose action and agent codes a runtime keeps in memory."""


class RunningTurns:
    """The turns running in this process, by tenant and conversation, for cancel."""

    def __init__(self) -> None:
        self._scopes: dict[tuple[str, str], anyio.CancelScope] = {}

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
        return scope

    def unregister(self, tenant: str, conversation_uuid: str) -> None:
        """Forget a turn that ended."""
        self._scopes.pop((tenant, conversation_uuid), None)

    def cancel(self, tenant: str, conversation_uuid: str) -> bool:
        """Cancel the conversation's running turn; False when none runs here."""
        scope = self._scopes.get((tenant, conversation_uuid))
        if scope is None:
            return False
        scope.cancel()
        return True


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
        knowledge: Callable[[], Knowledge] | None = None,
    ) -> None:
        from pilothouse.store import SqlTurnStore

        self.database = database
        self.models = models
        self.compiler = compiler
        self.store: TurnStore = store if store is not None else SqlTurnStore(database)
        self.hub = hub or EventHub()
        self.telemetry = telemetry or Telemetry()
        self.authorizer = authorizer
        self.running = RunningTurns()
        self._tool_source = tool_source
        self._knowledge_of = knowledge
        self._knowledge: Knowledge | None = None
        self._matcher: DescriptionMatcher | None = None
        self._known: dict[tuple[str, str], tuple[str, str | None]] = {}
        self.recorder = TurnRecorder(self.store, self.hub)
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
        )

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
                self.database, secrets=self.compiler.secrets, models=self.models
            )
        return self._knowledge

    async def skill_offer(self, skills: Sequence[SkillInfo], text: str) -> tuple[str, ...]:
        """The codes of the skills whose descriptions best match ``text``, best first.

        Seed 002's ``description_embedding``: descriptions are embedded with the
        packaged MiniLM once (cached by text), the request on every turn.
        """
        if self._matcher is None:
            from pilothouse.knowledge import DescriptionMatcher

            self._matcher = DescriptionMatcher(self.knowledge().local_model())
        descriptions = {s.code: f"{s.name}: {s.description}" for s in skills}
        # No threshold: the offer is never empty, only ordered and cut.
        matches = await self._matcher.match(
            text, descriptions, top_k=SKILL_OFFER_TOP, threshold=-1.0
        )
        return tuple(m.key for m in matches)

    def remember(
        self, tenant: str, conversation_uuid: str, action_code: str, agent_code: str | None
    ) -> None:
        """Note a conversation's action and agent, which never change once started."""
        if len(self._known) >= _KNOWN_LIMIT:
            # Oldest first: dicts keep insertion order.
            del self._known[next(iter(self._known))]
        self._known[tenant, conversation_uuid] = (action_code, agent_code)

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
