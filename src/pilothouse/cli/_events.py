"""`pilothouse worker` and `pilothouse events`: the two ends of event tools.

``pilothouse worker`` runs Python tools (``--tools package.module:function``
or a module, and the tenant's catalog tools) for ``SkillInvocationEvent``
commands in a consumer group; ``pilothouse events`` is pilothouse's end:
it publishes the outbox, applies completions, ends overdue calls and
answers ``run_action``. Both serve Prometheus metrics with ``--metrics-port``.

Each process serves one tenant: the root ``--tenant`` (default
``PILOTHOUSE_TENANT``, ``default``). The bus carries no credentials, so a
message naming another tenant is answered with an error and nothing runs;
start one process per tenant.
"""

from __future__ import annotations

__all__ = ["events", "worker"]

from typing import TYPE_CHECKING, Annotated

import typer

from pilothouse.cli._context import CliState, fail, open_facade, run
from pilothouse.errors import PilothouseError

if TYPE_CHECKING:
    from pilothouse.events import Bus as EventBus

Bus = Annotated[
    str,
    typer.Option(
        "--bus", help="kafka://host:port, nats://host:port or memory:// (one process only)."
    ),
]
SessionTimeout = Annotated[
    float | None,
    typer.Option("--session-timeout", help="Kafka consumer group session timeout, seconds."),
]
MetricsPort = Annotated[
    int | None, typer.Option("--metrics-port", help="Serve Prometheus metrics on this port.")
]


def _open(bus: str, session_timeout: float | None) -> EventBus:
    from pilothouse.events import open_bus

    try:
        return open_bus(bus, session_timeout=session_timeout)
    except PilothouseError as exc:
        fail(str(exc))


def _serve_metrics(port: int | None, registry: object) -> None:
    if port is None:
        return
    if not 0 < port < 65536:
        fail(f"--metrics-port must be between 1 and 65535, not {port}")
    from prometheus_client import CollectorRegistry, start_http_server

    assert isinstance(registry, CollectorRegistry)
    start_http_server(port, addr="127.0.0.1", registry=registry)


def worker(
    ctx: typer.Context,
    bus: Bus,
    tools: Annotated[
        list[str] | None,
        typer.Option("--tools", help="Python tools to run: package.module:function or a module."),
    ] = None,
    topic: Annotated[str, typer.Option("--topic", help="The command topic.")] = "agent-commands",
    group: Annotated[str, typer.Option("--group", help="The consumer group.")] = (
        "pilothouse-workers"
    ),
    attempts: Annotated[
        int, typer.Option("--attempts", min=1, help="Runs before a command is dead-lettered.")
    ] = 3,
    dead_letter_topic: Annotated[
        str | None, typer.Option("--dead-letter-topic", help="Default: <topic>.dlq.")
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="Seconds a tool may run.")
    ] = 30.0,
    session_timeout: SessionTimeout = None,
    metrics_port: MetricsPort = None,
) -> None:
    """Run tools for SkillInvocationEvent commands (a worker in a consumer group)."""
    from pilothouse.events import Worker

    state: CliState = ctx.obj
    opened = _open(bus, session_timeout)

    async def go() -> None:
        # The worker runs tools tenants wrote through the service: their
        # addresses pass the tenant's egress policy at every call, as there.
        async with open_facade(state, catalog_egress=True, long_running=True) as ph:
            runner = Worker(
                ph,
                opened,
                topic=topic,
                group=group,
                attempts=attempts,
                dead_letter_topic=dead_letter_topic,
                timeout=timeout,
            )
            try:
                names = runner.register(tools or [])
            except PilothouseError as exc:
                fail(f"--tools: {exc}")
            _serve_metrics(metrics_port, runner.metrics.registry)
            typer.echo(
                f"worker on {topic} (group {group}); registered tools: "
                f"{', '.join(names) or 'none'}; commands and catalog tools of tenant "
                f"{ph.tenant} only",
                err=True,
            )
            try:
                await runner.run()
            finally:
                await opened.close()

    run(go)


def events(
    ctx: typer.Context,
    bus: Bus,
    reply_topic: Annotated[
        str, typer.Option("--reply-topic", help="Where workers' completions come.")
    ] = "agent-events",
    action_topic: Annotated[
        str | None, typer.Option("--action-topic", help="Answer run_action commands here.")
    ] = None,
    group: Annotated[str, typer.Option("--group", help="The consumer group.")] = "pilothouse",
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            min=1,
            help="Completions applied at once (one at a time per conversation).",
        ),
    ] = 8,
    session_timeout: SessionTimeout = None,
    metrics_port: MetricsPort = None,
) -> None:
    """Publish event tools' commands, apply completions, answer run_action."""
    from pilothouse.events import EventService

    state: CliState = ctx.obj
    opened = _open(bus, session_timeout)

    async def go() -> None:
        # The turns it runs call the URLs tenants wrote through the service:
        # the same egress policy at every call as `pilothouse serve` applies.
        async with open_facade(state, catalog_egress=True, long_running=True) as ph:
            typer.echo(
                f"events on {reply_topic}"
                + (f" and {action_topic}" if action_topic else "")
                + f" (group {group}); tenant {ph.tenant} only",
                err=True,
            )
            service = EventService(
                ph,
                opened,
                reply_topic=reply_topic,
                group=group,
                action_topic=action_topic,
                concurrency=concurrency,
            )
            _serve_metrics(metrics_port, service.metrics.registry)
            try:
                await service.run()
            finally:
                await opened.close()

    run(go)
