"""Prometheus metrics of the HTTP service: requests, turns, model calls, tools, queues.

Every :class:`~pilothouse.server._state.ServerState` owns one
:class:`Metrics` with its own registry, so two apps in one process (tests,
workers of one host) never share or double-register collectors.

Requests are counted by a pure ASGI middleware under the matched route's
*template* (``/v1/conversations/{uuid}``), never the raw path: a raw path
would create one time series per conversation and leak identifiers into
the monitoring system. Turns are counted from the events each tenant's
facade emits (``ph.subscribe``), so turns started
by any protocol (REST, OpenAI-compatible, JSON-RPC, connector) are counted
in one place. What no event carries (each model attempt's latency and time
to first token, tool latencies, retries per action, queue waits) comes from
the run loop itself: :class:`Metrics` is the facade's
:class:`~pilothouse.types.Meter`.

Several worker processes (``pilothouse serve --workers N``) are one
service: the Prometheus client's multiprocess mode, which ``serve`` turns
on by giving the workers a ``PROMETHEUS_MULTIPROC_DIR``, has each process
write its samples to files there, and :meth:`Metrics.render` adds up every
process's files, so one scrape sees the whole process group whichever
worker answers it.
"""

from __future__ import annotations

__all__ = ["Metrics", "MetricsMiddleware"]

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from pilothouse.types import (
    ProcessStatus,
    StatusChanged,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallRequested,
    TurnEvent,
    TurnRetry,
)

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Latency buckets from 5 ms (a cached catalog read) to 2 minutes (a long
# local-model turn); the defaults stop at 10 s, too short for model turns.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)

UNMATCHED_ROUTE = "<unmatched>"


class Metrics:
    """The service's collectors, in a registry of their own.

    Attributes:
        registry: the registry :meth:`render` exposes.
        content_type: the media type of :meth:`render`'s output.
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        # The Prometheus client's own variable: read where the client reads it
        # (when it is first imported) it decides whether the collectors keep
        # their values in this process or in files of the directory, so
        # rendering follows the same variable, never a setting of its own.
        self.multiprocess_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "pilothouse_http_requests",
            "HTTP requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "pilothouse_http_request_duration_seconds",
            "HTTP request latency by method and route template (until the body is sent).",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.turns = Counter(
            "pilothouse_turns",
            "Finished turns by tenant and final conversation status.",
            ["tenant", "status"],
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "pilothouse_turn_duration_seconds",
            "Turn latency from RU to the finished event, by tenant.",
            ["tenant"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.model_calls = Counter(
            "pilothouse_model_calls",
            "Model call attempts by tenant and outcome (retry = failed attempt retried).",
            ["tenant", "outcome"],
            registry=self.registry,
        )
        self.tokens = Counter(
            "pilothouse_tokens",
            "Model tokens by tenant and direction (input/output).",
            ["tenant", "direction"],
            registry=self.registry,
        )
        self.cost = Counter(
            "pilothouse_cost",
            "Estimated model cost by tenant, in the catalog's price currency.",
            ["tenant"],
            registry=self.registry,
        )
        # Per provider and model (the turn's answering model, from its AI
        # marker): which models cost, fail and take time, across tenants.
        self.model_turns = Counter(
            "pilothouse_model_turns",
            "Finished turns by provider, model and final conversation status.",
            ["provider", "model", "status"],
            registry=self.registry,
        )
        self.model_turn_seconds = Histogram(
            "pilothouse_model_turn_duration_seconds",
            "Turn latency from RU to the finished event, by provider and model.",
            ["provider", "model"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.model_tokens = Counter(
            "pilothouse_model_tokens",
            "Model tokens by provider, model and direction (input/output).",
            ["provider", "model", "direction"],
            registry=self.registry,
        )
        self.model_cost = Counter(
            "pilothouse_model_cost",
            "Estimated model cost by provider and model, in the catalog's price currency.",
            ["provider", "model"],
            registry=self.registry,
        )
        self.tool_calls = Counter(
            "pilothouse_tool_calls",
            "Tool calls of finished turns by tool name and outcome status.",
            ["tool", "status"],
            registry=self.registry,
        )
        # From the run loop (``Pilothouse(meter=...)``), with the action too.
        # Labels are catalog codes, coded statuses and error class names:
        # never a conversation id.
        self.budget_alerts = Counter(
            "pilothouse_budget_alerts",
            "Budget thresholds crossed (each once per budget, subject and period), by "
            "budget, scope and threshold percentage.",
            ["budget", "scope", "threshold"],
            registry=self.registry,
        )
        self.budget_downgrades = Counter(
            "pilothouse_budget_downgrades",
            "Model calls a downgrade budget at its limit switched to its cheaper model.",
            ["budget", "model"],
            registry=self.registry,
        )
        self.action_turns = Counter(
            "pilothouse_action_turns",
            "Finished turns by provider, model, action and final conversation status.",
            ["provider", "model", "action", "status"],
            registry=self.registry,
        )
        self.action_turn_seconds = Histogram(
            "pilothouse_action_turn_duration_seconds",
            "Turn latency (taking the conversation to the recorded ending) by provider, "
            "model, action and status.",
            ["provider", "model", "action", "status"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.action_tokens = Counter(
            "pilothouse_action_tokens",
            "Model tokens by provider, model, action and direction (input/output).",
            ["provider", "model", "action", "direction"],
            registry=self.registry,
        )
        self.action_cost = Counter(
            "pilothouse_action_cost",
            "Estimated model cost by provider, model and action, in the catalog's currency.",
            ["provider", "model", "action"],
            registry=self.registry,
        )
        self.model_call_seconds = Histogram(
            "pilothouse_model_call_duration_seconds",
            "Model call attempt latency by provider, model, action and status "
            "(ok, or the error class).",
            ["provider", "model", "action", "status"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.first_token_seconds = Histogram(
            "pilothouse_model_time_to_first_token_seconds",
            "Time to the first streamed token of a model call attempt, by provider, model "
            "and action.",
            ["provider", "model", "action"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.retries = Counter(
            "pilothouse_model_retries",
            "Model call attempts retried, by provider, model, action and error class.",
            ["provider", "model", "action", "error"],
            registry=self.registry,
        )
        self.tool_call_seconds = Histogram(
            "pilothouse_tool_call_duration_seconds",
            "Tool execution latency by tool, action and status.",
            ["tool", "action", "status"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.queue_wait_seconds = Histogram(
            "pilothouse_queue_wait_seconds",
            "Time a turn waited for a slot, by queue (database_transaction, tool_slot); "
            "only waits that blocked.",
            ["queue"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self._started: dict[str, float] = {}

    # The run loop's Meter (pilothouse.types.Meter).

    def turn(
        self,
        *,
        provider: str,
        model: str,
        action: str,
        status: str,
        seconds: float,
        input_tokens: int,
        output_tokens: int,
        cost: float,
    ) -> None:
        """Count one finished turn (see :class:`~pilothouse.types.Meter`)."""
        self.action_turns.labels(provider, model, action, status).inc()
        self.action_turn_seconds.labels(provider, model, action, status).observe(seconds)
        self.action_tokens.labels(provider, model, action, "input").inc(input_tokens)
        self.action_tokens.labels(provider, model, action, "output").inc(output_tokens)
        self.action_cost.labels(provider, model, action).inc(cost)

    def model_call(
        self,
        *,
        provider: str,
        model: str,
        action: str,
        status: str,
        seconds: float,
        first_token_seconds: float | None,
    ) -> None:
        """Time one model call attempt (see :class:`~pilothouse.types.Meter`)."""
        self.model_call_seconds.labels(provider, model, action, status).observe(seconds)
        if first_token_seconds is not None:
            self.first_token_seconds.labels(provider, model, action).observe(first_token_seconds)

    def retry(self, *, provider: str, model: str, action: str, error: str) -> None:
        """Count one retried attempt (see :class:`~pilothouse.types.Meter`)."""
        self.retries.labels(provider, model, action, error).inc()

    def tool_call(self, *, tool: str, action: str, status: str, seconds: float) -> None:
        """Time one tool execution (see :class:`~pilothouse.types.Meter`)."""
        self.tool_call_seconds.labels(tool, action, status).observe(seconds)

    def budget_alert(self, *, budget: str, scope: str, threshold: int) -> None:
        """Count one budget threshold crossed (see :class:`~pilothouse.types.Meter`)."""
        self.budget_alerts.labels(budget, scope, str(threshold)).inc()

    def budget_downgrade(self, *, budget: str, model: str) -> None:
        """Count one call switched to a cheaper model (see :class:`~pilothouse.types.Meter`)."""
        self.budget_downgrades.labels(budget, model).inc()

    def queue_wait(self, *, queue: str, seconds: float) -> None:
        """Time one wait for a slot (see :class:`~pilothouse.types.Meter`)."""
        self.queue_wait_seconds.labels(queue).observe(seconds)

    def listener(self, tenant: str) -> Callable[[TurnEvent], None]:
        """Return an :class:`~pilothouse.runtime.EventHub` listener counting ``tenant``'s turns."""

        def on_event(event: TurnEvent) -> None:
            self.observe(tenant, event)

        return on_event

    def observe(self, tenant: str, event: TurnEvent) -> None:
        """Count one turn event (cheap: called for every delta of every turn)."""
        if isinstance(event, TextDelta | ThinkingDelta | ToolCallRequested | ToolCallFinished):
            return
        if isinstance(event, StatusChanged):
            if event.new is ProcessStatus.RUNNING:
                self._started[event.conversation_uuid] = time.perf_counter()
            return
        if isinstance(event, TurnRetry):
            self.model_calls.labels(tenant, "retry").inc()
            return
        result = event.result
        meta = result.ai_meta or {}
        provider, model = str(meta.get("provider", "")), str(meta.get("model", ""))
        started = self._started.pop(event.conversation_uuid, None)
        if started is not None:
            elapsed = time.perf_counter() - started
            self.turn_seconds.labels(tenant).observe(elapsed)
            self.model_turn_seconds.labels(provider, model).observe(elapsed)
        self.turns.labels(tenant, result.status.value).inc()
        self.model_turns.labels(provider, model, result.status.value).inc()
        self.model_tokens.labels(provider, model, "input").inc(result.input_tokens)
        self.model_tokens.labels(provider, model, "output").inc(result.output_tokens)
        self.model_cost.labels(provider, model).inc(float(result.cost))
        for call in result.call_records:
            self.tool_calls.labels(call.name, call.status.value).inc()
        self.model_calls.labels(tenant, "error" if result.error else "ok").inc()
        self.tokens.labels(tenant, "input").inc(result.input_tokens)
        self.tokens.labels(tenant, "output").inc(result.output_tokens)
        self.cost.labels(tenant).inc(float(result.cost))

    def render(self) -> bytes:
        """Return the Prometheus text exposition of every collector.

        In multiprocess mode the samples of every process of the service
        (its files in the directory), added up per series.
        """
        if self.multiprocess_dir is None:
            return generate_latest(self.registry)
        from prometheus_client.multiprocess import MultiProcessCollector

        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.multiprocess_dir)
        return generate_latest(merged)


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(path) if path else UNMATCHED_ROUTE


class MetricsMiddleware:
    """ASGI middleware counting every HTTP request and timing it.

    Args:
        app: the wrapped application.
        metrics: where to count.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_wrapper(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = _route_template(scope)
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.request_seconds.labels(method, route).observe(
                time.perf_counter() - started
            )
