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
AckWait = Annotated[
    float | None,
    typer.Option(
        "--ack-wait",
        envvar="PILOTHOUSE_EVENTS_ACK_WAIT",
        help="NATS: seconds before an unacknowledged message is delivered again (default 60).",
    ),
]
Acks = Annotated[
    str | None,
    typer.Option(
        "--acks",
        envvar="PILOTHOUSE_KAFKA_ACKS",
        help="Kafka: 'all' (default: every in-sync replica has a message before it counts "
        "as published) or '1' (the partition leader alone).",
    ),
]
ReplicationFactor = Annotated[
    int | None,
    typer.Option(
        "--replication-factor",
        envvar="PILOTHOUSE_KAFKA_REPLICATION_FACTOR",
        help="Kafka: replicas of the topics this process creates (default 1, one local "
        "broker; 3 on a production cluster).",
    ),
]
MaxDeliver = Annotated[
    int,
    typer.Option(
        "--max-deliver",
        min=1,
        envvar="PILOTHOUSE_EVENTS_MAX_DELIVER",
        help="Deliveries of a message whose handling raises before it goes to the "
        "dead-letter topic (<topic>.dlq for run_action and completions).",
    ),
]
MetricsPort = Annotated[
    int | None, typer.Option("--metrics-port", help="Serve Prometheus metrics on this port.")
]


def _open(
    bus: str,
    session_timeout: float | None,
    ack_wait: float | None = None,
    acks: str | None = None,
    replication_factor: int | None = None,
) -> EventBus:
    from pilothouse.events import open_bus

    try:
        return open_bus(
            bus,
            session_timeout=session_timeout,
            ack_wait=ack_wait,
            acks=acks,
            replication_factor=replication_factor,
        )
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
    ack_wait: AckWait = None,
    acks: Acks = None,
    replication_factor: ReplicationFactor = None,
    max_deliver: MaxDeliver = 5,
    metrics_port: MetricsPort = None,
) -> None:
    """Run tools for SkillInvocationEvent commands (a worker in a consumer group)."""
    from pilothouse.events import Worker, describe_bus

    state: CliState = ctx.obj
    opened = _open(bus, session_timeout, ack_wait, acks, replication_factor)

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
                max_deliver=max_deliver,
            )
            try:
                names = runner.register(tools or [])
            except PilothouseError as exc:
                fail(f"--tools: {exc}")
            _serve_metrics(metrics_port, runner.metrics.registry)
            # One line an operator can check the process against (no secrets).
            typer.echo(
                f"pilothouse worker: bus {describe_bus(opened, bus, ack_wait)}; "
                f"topic {topic} (group {group}), dead letters {runner.dead_letter_topic}; "
                f"tenant {ph.tenant} only; attempts {attempts}, max_deliver {max_deliver}, "
                f"timeout {timeout:g} s; "
                f"registered tools: {', '.join(names) or 'none'}, and tenant {ph.tenant}'s "
                "catalog tools",
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
            help="Completions applied at once (one at a time per conversation), and "
            "run_actions run at once (one at a time per memoryId); each its own bound.",
        ),
    ] = 8,
    recover_after: Annotated[
        float,
        typer.Option(
            "--recover-after",
            envvar="PILOTHOUSE_EVENTS_RECOVER_AFTER",
            help="Seconds without a write before a conversation a dead process left running "
            "is continued (longer than any model call), and before a final answer claimed "
            "by a dead process is published by another.",
        ),
    ] = 120.0,
    busy_retry: Annotated[
        float,
        typer.Option(
            "--busy-retry",
            envvar="PILOTHOUSE_EVENTS_BUSY_RETRY",
            help="Seconds a completion whose conversation runs a turn is retried before it "
            "is handed back to the bus.",
        ),
    ] = 60.0,
    session_timeout: SessionTimeout = None,
    ack_wait: AckWait = None,
    acks: Acks = None,
    replication_factor: ReplicationFactor = None,
    max_deliver: MaxDeliver = 5,
    metrics_port: MetricsPort = None,
) -> None:
    """Publish event tools' commands, apply completions, answer run_action."""
    from pilothouse.events import EventService, describe_bus

    state: CliState = ctx.obj
    opened = _open(bus, session_timeout, ack_wait, acks, replication_factor)

    async def go() -> None:
        # The turns it runs call the URLs tenants wrote through the service:
        # the same egress policy at every call as `pilothouse serve` applies.
        async with open_facade(state, catalog_egress=True, long_running=True) as ph:
            service = EventService(
                ph,
                opened,
                reply_topic=reply_topic,
                group=group,
                action_topic=action_topic,
                concurrency=concurrency,
                recover_after=recover_after,
                busy_retry=busy_retry,
                max_deliver=max_deliver,
            )
            # One line an operator can check the process against (no secrets).
            typer.echo(
                f"pilothouse events: bus {describe_bus(opened, bus, ack_wait)}; topics: "
                f"completions {reply_topic}"
                + (f", run_action {action_topic}" if action_topic else "")
                + f" (group {group}); tenant {ph.tenant} only; concurrency {concurrency}; "
                f"recover_after {recover_after:g} s, busy_retry {busy_retry:g} s, "
                f"max_deliver {max_deliver}",
                err=True,
            )
            _serve_metrics(metrics_port, service.metrics.registry)
            try:
                await service.run()
            finally:
                await opened.close()

    run(go)
