"""What every tenant view of one :class:`~pilothouse.api.Pilothouse` shares.

Kept apart from :mod:`pilothouse.api` so that the facade's module stays a
readable door; nothing here is public. Everything is built on first use: a
facade that only reads the catalog never loads the run loop.
"""

from __future__ import annotations

__all__ = ["Shared"]

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pilothouse._collector import collector_paused, leave_heap_at_exit
from pilothouse.settings import Settings
from pilothouse.store import Database

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from pilothouse._coordination import Coordination
    from pilothouse.knowledge import Knowledge
    from pilothouse.memory import ScopedMemory
    from pilothouse.providers import DeploymentSecrets, LocalModelServers
    from pilothouse.runtime import EventHub, Runner, Runtime
    from pilothouse.tools import ToolRegistry
    from pilothouse.tools._code import CodePolicy
    from pilothouse.tools._gateway import GatewayProxy
    from pilothouse.tools._limits import ScriptLimits
    from pilothouse.types import Authorizer, Meter, PromptContributor


class Shared:
    """What every tenant view of one :class:`Pilothouse` shares.

    The database, and, built on the first turn, the run loop's
    :class:`~pilothouse.runtime.Runtime`: the model factory with its HTTP
    pools, the local model servers, the action compiler with its cache and
    Redis pool, the tool source with its MCP sessions, the event hub and the
    running turns. A tenant's :class:`~pilothouse.runtime.Runner` is a view of
    it, made in :meth:`runner`.
    """

    def __init__(
        self,
        settings: Settings,
        database: Database | None,
        model: Model | None,
        local_servers: LocalModelServers | None,
        authorizer: Authorizer | str | None,
        tools: ToolRegistry | None,
        contributors: Sequence[PromptContributor] | None,
        meter: Meter | None = None,
        catalog_egress: bool = False,
    ) -> None:
        self.settings = settings
        self.meter = meter
        self.catalog_egress = catalog_egress
        if settings.fast_exit:
            leave_heap_at_exit()
        self.owns_database = database is None
        self._database = database
        self._model = model
        self._owns_servers = local_servers is None
        self._servers = local_servers
        self._authorizer = authorizer
        self._tools = tools
        self._contributors = contributors
        self._hub: EventHub | None = None
        self._coordination: Coordination | None = None
        self._runtime: Runtime | None = None
        self._scoped: ScopedMemory | None = None
        self._knowledge: Knowledge | None = None
        self._gateways: GatewayProxy | None = None
        self._secrets: DeploymentSecrets | None = None
        self._code_policy: CodePolicy | None = None
        self._script_limits: ScriptLimits | None = None
        from pilothouse.providers._egress import EgressPolicy

        # Checked once here; Settings validated every entry already.
        self.egress = EgressPolicy.parse(settings.egress_allow, settings.egress_tenants)

    def code_policy(self) -> CodePolicy:
        """What the catalog's code references may name in this process.

        Where tenants write the catalog (``catalog_egress``: the HTTP service,
        ``pilothouse events`` and ``worker``), only what the operator granted
        in ``Settings.catalog_code``, at write and at resolve time; in the
        operator's own process, any importable name.
        """
        if self._code_policy is None:
            from pilothouse.tools._code import CodePolicy

            self._code_policy = (
                CodePolicy.granted(self.settings.catalog_code)
                if self.catalog_egress
                else CodePolicy.open()
            )
        return self._code_policy

    def script_limits(self) -> ScriptLimits:
        """The deployment's ceilings on script tools (``Settings.script_max_*``)."""
        if self._script_limits is None:
            from pilothouse.tools._limits import ScriptLimits

            self._script_limits = ScriptLimits.ceilings(self.settings)
        return self._script_limits

    @property
    def database(self) -> Database:
        """The database: the one given, or one opened from the settings on first use."""
        if self._database is None:
            self._database = self.settings.open_database()
            if self.meter is not None:
                meter = self.meter

                def waited(seconds: float) -> None:
                    meter.queue_wait(queue="database_transaction", seconds=seconds)

                self._database.on_wait = waited
        return self._database

    def secrets(self) -> DeploymentSecrets:
        """Resolves ``@secrets(NAME)`` in each tenant's own scope (docs/security.md#secrets)."""
        if self._secrets is None:
            from pilothouse.providers import DeploymentSecrets

            settings = self.settings
            self._secrets = DeploymentSecrets(
                os.environ,
                settings.secrets_file,
                settings.secrets_env,
                default_tenant=settings.tenant,
            )
        return self._secrets

    def gateways(self) -> GatewayProxy:
        """The OpenAPI gateways' proxy of the process (MCP server and turns), made on first use.

        Each proxied call is audited as a ``gateway_call`` row of the database.
        """
        if self._gateways is None:
            from pilothouse.store import NewGatewayCall, record_gateway_call
            from pilothouse.tools._gateway import GatewayProxy

            async def audit(call: NewGatewayCall) -> None:
                await record_gateway_call(self.database, call)

            self._gateways = GatewayProxy(
                self.secrets(), self.egress, audit, code=self.code_policy()
            )
        return self._gateways

    def coordination(self) -> Coordination | None:
        """The deployment's shared Redis (``settings.redis_url``), connected on first use."""
        if self._coordination is None and self.settings.redis_url is not None:
            from pilothouse._coordination import Coordination

            self._coordination = Coordination(self.settings.redis_url, self.settings.redis_prefix)
        return self._coordination

    @property
    def hub(self) -> EventHub:
        """Where every tenant's turn events go (subscribers keep to one tenant)."""
        if self._hub is None:
            from pilothouse.runtime import EventHub

            self._hub = EventHub()
        return self._hub

    def runtime(self) -> Runtime:
        """The run loop's shared parts, built on first use."""
        if self._runtime is None:
            with collector_paused():
                from pilothouse.providers import LocalModelServers, ModelFactory
                from pilothouse.runtime import ActionCompiler, Runtime, Telemetry
                from pilothouse.runtime._toolset import CatalogToolSource

            settings = self.settings
            # Local llama.cpp servers start only when a local model is first used.
            if self._servers is None:
                self._servers = LocalModelServers()
            secrets = self.secrets()
            # Catalog URLs are checked at each call only where tenants write
            # the catalog (the HTTP service); see docs/invoke.md.
            egress = self.egress if self.catalog_egress else None
            self._runtime = Runtime(
                database=self.database,
                models=ModelFactory(
                    self._servers,
                    timeout=settings.provider_timeout,
                    connect_timeout=settings.provider_connect_timeout,
                    max_connections=settings.provider_max_connections,
                    egress=egress,
                ),
                compiler=ActionCompiler(
                    self.database, secrets, self._contributors, code_policy=self.code_policy()
                ),
                hub=self.hub,
                telemetry=Telemetry(meter=self.meter),
                model_override=self._model,
                tool_source=CatalogToolSource(
                    secrets,
                    registry=self._tools,
                    script_tools=settings.script_tools,
                    script_limits=self.script_limits(),
                    gateways=self.gateways,
                    egress=egress,
                    code_policy=self.code_policy(),
                ),
                scoped_memory=self._scoped,
                knowledge=self.knowledge,
                lease_seconds=settings.lease_seconds,
                budget_alert_webhook=settings.budget_alert_webhook,
                budget_alert_bus=settings.budget_alert_bus,
                budget_alert_topic=settings.budget_alert_topic,
                freeze_heap=settings.freeze_heap,
                lazy_start=settings.database_lazy_start,
                memory_index=settings.memory_index,
                coordination=self.coordination(),
                egress=egress,
            )
        return self._runtime

    def scoped_memory(self) -> ScopedMemory:
        """Scoped long-term memory: the run loop's once it exists, so one embedder loads."""
        if self._runtime is not None:
            return self._runtime.scoped_memory
        if self._scoped is None:
            from pilothouse.memory import ScopedMemory

            self._scoped = ScopedMemory(self.database, index=self.settings.memory_index)
        return self._scoped

    def knowledge(self) -> Knowledge:
        """The knowledge service of every tenant and the retrieval advisor, made on first use."""
        if self._knowledge is None:
            from pilothouse.knowledge import Knowledge

            runtime = self.runtime()
            self._knowledge = Knowledge(
                self.database,
                secrets=runtime.compiler.secrets,
                models=runtime.models,
                egress=self.egress if self.catalog_egress else None,
                model_override=runtime.loop.model_override,
                leases=runtime.leases,
            )
        return self._knowledge

    def runner(self, tenant: str) -> Runner:
        """The tenant's runner: a view of the shared runtime, a few attributes."""
        runtime = self.runtime()
        if isinstance(self._authorizer, str):
            from pilothouse.runtime._authorize import CatalogToolAuthorizer

            # A catalog tool decides: its code was given instead of a callable.
            authorizer = CatalogToolAuthorizer(
                self.database, tenant, self._authorizer, runtime.tool_source
            )
            return runtime.runner(tenant, authorizer=authorizer)
        return runtime.runner(tenant, authorizer=self._authorizer)

    async def aclose(self) -> None:
        if self._knowledge is not None:
            await self._knowledge.aclose()
        if self._runtime is not None:
            if self._runtime.leases.registered:
                # A clean stop: this process's owner row goes (its turns have ended).
                await self._runtime.leases.unregister()
            await self._runtime.aclose()
            await self._runtime.models.aclose()
        if self._gateways is not None:
            await self._gateways.aclose()
        if self._owns_servers and self._servers is not None:
            await self._servers.aclose()
        if self._coordination is not None:
            await self._coordination.aclose()
        if self.owns_database and self._database is not None:
            await self._database.dispose()
