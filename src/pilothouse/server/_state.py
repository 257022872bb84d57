"""What one running HTTP service shares across requests: the facade, metrics, limits.

:class:`ServerState` is created once per app (by :func:`create_app` or a
test) and reached from a request through ``request.app.state.pilothouse``
(see :func:`pilothouse.server._deps.get_state`). It holds:

- one :class:`~pilothouse.api.Pilothouse` for the process: the database,
  the model clients and their HTTP pools, the compile cache, tools and MCP
  sessions; a request's tenant is a view of it (:meth:`ServerState.facade`,
  ``ph.for_tenant``), never a stack of its own;
- the :class:`~pilothouse.server._metrics.Metrics`, the per-key
  :class:`~pilothouse.server._limits.RateLimiter` and the
  :class:`~pilothouse.server._keys.KeyCache` of recently verified keys;
- the set of turns running in this process, so shutdown can cancel what did
  not finish within the grace period and have it recorded ``TE``.
"""

from __future__ import annotations

__all__ = ["ServerSettings", "ServerState"]

import asyncio
import ipaddress
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pilothouse.api import Caller, Pilothouse
from pilothouse.server._keys import KeyCache
from pilothouse.server._limits import RateLimiter, SharedRateLimiter
from pilothouse.server._metrics import Metrics
from pilothouse.server._rpc_router import RpcRouter
from pilothouse.settings import Settings, refuse_misspelt_prefix, refuse_misspelt_variables
from pilothouse.types import ProcessStatus, StatusChanged, TurnEvent, TurnFinished

if TYPE_CHECKING:
    from pydantic_ai.models import Model

logger = logging.getLogger(__name__)

MIB = 1024 * 1024


class ServerSettings(BaseSettings):
    """Settings of the HTTP service, read from ``PILOTHOUSE_SERVER_*`` variables.

    Attributes:
        host: the address ``pilothouse serve`` binds; also decides whether
            ``/metrics`` is open without a key (only on loopback binds).
        port: the port ``pilothouse serve`` binds.
        max_body_bytes: the largest request body accepted (413 above it);
            0 disables the limit.
        max_upload_bytes: the largest body of a document upload
            (``POST /v1/knowledge/collections/{code}/documents``): files
            are read up to 50 MiB each, plus the form's own bytes; 0
            disables the limit there.
        rate_limit_per_minute: requests a minute per API key (429 above it,
            with ``Retry-After``); 0 disables the limit. Counted per process,
            or across every process sharing ``PILOTHOUSE_REDIS_URL``.
            Each call of a JSON-RPC batch counts as one request.
        auth_failures_per_minute: requests with a missing, unknown or revoked
            key a minute per client address before they get 429 instead of
            401 (slows key guessing); 0 disables the limit. Per process, or
            shared through Redis like the key's rate.
        jsonrpc_max_batch: the most calls one JSON-RPC batch may hold.
        jsonrpc_actions: JSON-RPC methods routed to catalog targets, e.g.
            ``{"erp-1/llm/summarize/1.0.0": "action:SUMBRAND"}`` (see
            :class:`~pilothouse.server.RpcRouter`).
        cors_origins: origins allowed by CORS; empty (the default) leaves
            CORS off, so browsers refuse cross-origin calls.
        metrics_anonymous: whether ``/metrics`` needs no token; None (the
            default) allows it only when ``host`` is a loopback address.
        metrics_token: the operator's scraper token. Where ``/metrics`` is
            not anonymous it answers ``Authorization: Bearer <token>`` only:
            its series name every tenant, so no tenant's API key reads it.
        shutdown_grace_seconds: how long a shutdown waits for running turns
            before cancelling them (recorded ``TE``).
        last_used_interval_seconds: write a key's ``last_used_at`` at most
            this often, so authentication does not write on every request.
        key_cache_seconds: trust a verified API key this long without
            reading it again; without Redis, a key revoked by another
            process (the CLI) keeps working here for at most this long
            (with Redis the revocation is heard at once). 0 reads every time.
        question_sweep_seconds: how often the service ends conversations
            whose questions waited past their action's ``question_timeout``
            (300 s by default, seed 000's five minutes); 0 turns it off.
        openai_user_memory: the OpenAI-compatible face's ``user`` field is
            also the turn's scoped-memory user (``runtime_config.user_id``),
            as mem0's proxy maps it. Off by default: any key may name any
            ``user``, so turn it on only where each key's caller vouches for
            the user ids it sends (an application's own backend).
        mcp_max_tools: the MCP server lists each action as a tool while a
            tenant has at most this many; past it, it lists the disclosure
            tools (``pilothouse_find_actions``, ``pilothouse_run_action``).
        mcp_list_changed_seconds: how often the MCP server looks for catalog
            changes to announce (``notifications/tools/list_changed``).
        mcp_session_idle_seconds: how long an MCP session (``Mcp-Session-Id``)
            with no request in flight lives before it is closed.
        mcp_max_sessions_per_key: the most MCP sessions one API key may hold
            open at once; opening another is refused (429) until one is
            closed or expires.
        mcp_servers: refused when set: virtual MCP servers are entries of
            each tenant's catalog (``virtual_servers``), checked when written.
        oauth_issuer: the OAuth 2.1 authorization server whose access tokens
            the MCP endpoint accepts beside API keys (its ``iss``); with
            ``oauth_jwks_url`` and ``oauth_audience``, or none of the three.
        oauth_jwks_url: where that server publishes its signing keys.
        oauth_audience: this MCP endpoint's resource identifier (tokens'
            ``aud`` must hold it), e.g. ``https://pilothouse.example/mcp``.
        heartbeat_seconds: how often each worker renews its lease on the
            turns it runs (``PILOTHOUSE_LEASE_SECONDS`` must stay well above).
        cancel_poll_seconds: how often a worker running turns reads the
            cancels other processes recorded for them in the database; with
            Redis they also arrive published, at once, and this is the
            fallback for a lost message.
        memory_worker_seconds: how often the service looks for pending
            memory extraction jobs (and runs them); 0 runs no worker here
            (``pilothouse memory run-jobs`` elsewhere then).
        memory_expiry_seconds: how often session memory past its TTL is
            deleted (while the worker runs).
        ui_session_seconds: how long a browser UI login lasts (its session
            expires then; logging out ends it before).
        ui_origins: origins the browser UI is also reached under, such as
            ``https://pilothouse.example.com`` behind a proxy that ends TLS
            or changes the Host header (the service reads no
            ``X-Forwarded-*`` header). The
            UI's state-changing requests must come from the request's own
            origin or one of these (403 otherwise).
    """

    model_config = SettingsConfigDict(env_prefix="PILOTHOUSE_SERVER_", extra="ignore")

    @model_validator(mode="after")
    def _no_misspelt_variables(self) -> ServerSettings:
        # LOG_FORMAT is `pilothouse serve --log-format`'s own variable.
        known = [*type(self).model_fields, "log_format"]
        prefix = str(type(self).model_config.get("env_prefix", ""))
        refuse_misspelt_variables(os.environ, prefix, known)
        # PILOTHOUSE_SEVER_PORT: the prefix itself misspelt.
        refuse_misspelt_prefix(
            os.environ,
            prefix,
            known,
            within=str(Settings.model_config.get("env_prefix", "")),
            neighbours=Settings.model_fields,
        )
        return self

    host: str = "127.0.0.1"
    port: int = 8000
    max_body_bytes: int = MIB
    max_upload_bytes: int = 51 * MIB
    rate_limit_per_minute: int = 600
    auth_failures_per_minute: int = 60
    jsonrpc_max_batch: int = Field(default=50, ge=1)
    jsonrpc_actions: dict[str, str] = Field(default_factory=dict[str, str])
    cors_origins: list[str] = Field(default_factory=list)
    metrics_anonymous: bool | None = None
    metrics_token: SecretStr | None = None
    shutdown_grace_seconds: float = 30.0
    last_used_interval_seconds: float = 60.0
    key_cache_seconds: float = 5.0
    question_sweep_seconds: float = Field(default=30.0, ge=0)
    mcp_max_tools: int = Field(default=30, ge=1)
    openai_user_memory: bool = False
    mcp_list_changed_seconds: float = Field(default=2.0, gt=0)
    mcp_session_idle_seconds: float = Field(default=1800.0, gt=0, le=7 * 24 * 3600)
    mcp_max_sessions_per_key: int = Field(default=100, ge=1)
    mcp_servers: dict[str, list[str]] = Field(default_factory=dict[str, list[str]])
    oauth_issuer: str | None = None
    oauth_jwks_url: str | None = None
    oauth_audience: str | None = None

    @field_validator("mcp_servers")
    @classmethod
    def _servers_in_the_catalog(cls, servers: dict[str, list[str]]) -> dict[str, list[str]]:
        if servers:
            example = next(iter(servers))
            raise ValueError(
                "virtual MCP servers are written in each tenant's catalog, where their "
                "members are checked: unset PILOTHOUSE_SERVER_MCP_SERVERS and write each bundle "
                f"as a virtual_servers entry (code: {example.upper()[:12]}, actions: [...], "
                "agents: [...], tools: [...], operations: [...]), served at /mcp/<code>; "
                "see docs/mcp.md#virtual-servers"
            )
        return servers

    @model_validator(mode="after")
    def _oauth_together(self) -> ServerSettings:
        given = {
            "oauth_issuer": self.oauth_issuer,
            "oauth_jwks_url": self.oauth_jwks_url,
            "oauth_audience": self.oauth_audience,
        }
        missing = [name for name, value in given.items() if not value]
        if 0 < len(missing) < len(given):
            raise ValueError(
                f"{', '.join(missing)}: set too, or unset the other OAuth settings "
                "(the MCP endpoint checks tokens against all three)"
            )
        return self

    heartbeat_seconds: float = Field(default=5.0, gt=0)
    cancel_poll_seconds: float = Field(default=0.5, gt=0)
    memory_worker_seconds: float = Field(default=5.0, ge=0)
    memory_expiry_seconds: float = Field(default=60.0, gt=0)
    ui_session_seconds: float = Field(default=12 * 3600.0, gt=0)
    ui_origins: list[str] = Field(default_factory=list)

    @field_validator("ui_origins")
    @classmethod
    def _origins_are_origins(cls, origins: list[str]) -> list[str]:
        normal: list[str] = []
        for origin in origins:
            parts = urlsplit(origin)
            if (
                parts.scheme not in ("http", "https")
                or not parts.hostname
                or (parts.path not in ("", "/") or parts.query or parts.fragment)
            ):
                raise ValueError(
                    f"{origin!r} is not an origin; write scheme://host[:port], "
                    "such as https://pilothouse.example.com"
                )
            normal.append(f"{parts.scheme}://{parts.netloc}".lower())
        return normal

    @property
    def is_loopback(self) -> bool:
        """Whether ``host`` only accepts connections from this machine."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def anonymous_metrics(self) -> bool:
        """Whether ``/metrics`` answers without an API key."""
        if self.metrics_anonymous is not None:
            return self.metrics_anonymous
        return self.is_loopback


class ServerState:
    """The shared state of one HTTP service.

    Args:
        settings: deployment settings (database URL, secrets file, ...).
        model: a pydantic-ai model every turn uses instead of the catalog's
            (tests pass a :class:`~pilothouse.testing.ScriptedModel`).
        server: HTTP service settings; read from the environment when omitted.
        rpc: the application's own JSON-RPC methods; the catalog targets of
            ``server.jsonrpc_actions`` are added to it.

    Attributes:
        settings: the deployment settings.
        server: the HTTP service settings.
        pilothouse: the process's facade (of the default tenant); every
            tenant's facade is a view of it.
        metrics: the Prometheus collectors.
        limiter: the per-key rate limiter.
        keys: verifies API keys, remembering valid ones for
            ``server.key_cache_seconds``.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        model: Model | None = None,
        server: ServerSettings | None = None,
        rpc: RpcRouter | None = None,
    ) -> None:
        self.settings = settings
        self.server = server if server is not None else ServerSettings()
        self.rpc = rpc if rpc is not None else RpcRouter()
        for method, target in self.server.jsonrpc_actions.items():
            self.rpc.add_action(method, target)
        self.metrics = Metrics()
        # Tenants write this service's catalog: its URLs pass their egress
        # policy when written and at every call (docs/invoke.md).
        self.pilothouse = Pilothouse(settings, model=model, meter=self.metrics, catalog_egress=True)
        # With PILOTHOUSE_REDIS_URL the limits and key revocations hold
        # across workers and replicas; without it, per process.
        coordination = self.pilothouse.coordination()
        self.limiter = SharedRateLimiter(
            RateLimiter(self.server.rate_limit_per_minute), coordination, "key"
        )
        self.auth_failures = SharedRateLimiter(
            RateLimiter(self.server.auth_failures_per_minute), coordination, "auth-failures"
        )
        self.keys = KeyCache(self.pilothouse.keys, self.server.key_cache_seconds)
        if coordination is not None:
            coordination.on_revoked(self.keys.forget)
        self._watched: set[str] = set()
        self._running: set[tuple[str, str]] = set()
        # Per key prefix: when its last_used_at was last written (monotonic).
        self.key_last_touched: dict[str, float] = {}
        self._closed = False

    async def open(self) -> None:
        """Bring the database schema to the newest migration."""
        await self.pilothouse.ensure_schema()

    def facade(self, tenant: str, caller: Caller | None = None) -> Pilothouse:
        """Return the tenant's facade: a cheap view of the process's one facade.

        Args:
            tenant: the API key's tenant.
            caller: the face and API key, recorded on what the view starts.
        """
        facade = self.pilothouse.for_tenant(tenant, caller=caller)
        if tenant not in self._watched:
            self._watched.add(tenant)
            # Neither needs text deltas; asking for them would stream every call.
            facade.subscribe(self.metrics.listener(tenant), deltas=False)
            facade.subscribe(self._tracker(tenant), deltas=False)
        return facade

    def _tracker(self, tenant: str) -> Callable[[TurnEvent], None]:
        def track(event: TurnEvent) -> None:
            if isinstance(event, StatusChanged) and event.new is ProcessStatus.RUNNING:
                self._running.add((tenant, event.conversation_uuid))
            elif isinstance(event, TurnFinished):
                self._running.discard((tenant, event.conversation_uuid))

        return track

    @property
    def running_turns(self) -> list[tuple[str, str]]:
        """The (tenant, conversation uuid) of every turn running in this process."""
        return sorted(self._running)

    async def expire_questions_forever(self) -> None:
        """End expired questions every ``question_sweep_seconds`` until cancelled."""
        while True:
            await anyio.sleep(self.server.question_sweep_seconds)
            try:
                expired = await self.pilothouse.expire_questions()
            except Exception:
                # A failed sweep (database away) must not stop the next ones.
                logger.exception("question expiry sweep failed")
                continue
            if expired:
                logger.info("question expiry: %d conversation(s) ended TE", expired)

    async def drain(self, grace: float | None = None) -> None:
        """Wait up to ``grace`` seconds for running turns, then stop the rest.

        A stopped turn is recorded ``TE`` by the runner and its request is
        answered 503 with ``Retry-After`` (a final ``error`` event on a
        stream), while its connection is still open.
        """
        wait = self.server.shutdown_grace_seconds if grace is None else grace
        stopped = await self.pilothouse.stop_running_turns(grace=wait)
        if stopped:
            logger.info("shutdown: %d running turn(s) stopped and recorded TE", stopped)

    async def drain_on_signal(self) -> None:
        """Drain as soon as SIGTERM or SIGINT arrives, before uvicorn closes connections.

        uvicorn answers a signal by waiting for open requests (its graceful
        timeout, set above the grace) and only then runs the app's shutdown;
        draining at the signal lets the turns still running be stopped,
        recorded ``TE`` and answered while their clients are connected.
        Chained to uvicorn's own handler, which still runs.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        stopping = anyio.Event()
        replaced: dict[int, Any] = {}
        for number in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(number)
            if not callable(previous):
                continue

            def chained(signum: int, frame: FrameType | None, previous: Any = previous) -> None:
                loop.call_soon_threadsafe(stopping.set)
                previous(signum, frame)

            replaced[number] = previous
            signal.signal(number, chained)
        try:
            await stopping.wait()
            await self.drain()
        finally:
            # The loop may close after this: its handlers must not outlive it.
            for number, previous in replaced.items():
                signal.signal(number, previous)

    async def aclose(self) -> None:
        """Close the facade: model clients, tool sessions, local model servers, database."""
        if self._closed:
            return
        self._closed = True
        await self.pilothouse.aclose()
