"""pilothouse's side of the bus: relay, completions, deadlines and ``run_action``.

:class:`EventService` runs four loops in one task group, all through the
facade (``ph.events``, ``ph.command``):

- the **relay** publishes the outbox's unsent commands and marks them sent
  (at least once: a crash between the two publishes them again, and the
  worker's completion is deduplicated by correlation id);
- the **completion consumer** applies each ``SkillCompletionEvent`` on the
  reply topic (a duplicate or late one is counted, never applied twice)
  and acknowledges it only afterwards, so a crash delivers it again;
- the **deadline sweep** ends overdue calls with a timeout result;
- the **action consumer** answers ``run_action`` with ``turn_finished``.

Any number of pilothouse processes may run one: they share the consumer
groups and the database's tables. A service acts only for the tenants it
was started for (``tenants``, by default its facade's tenant): a
``run_action`` naming another tenant is answered ``FA`` and not run, a
completion of another tenant's call is not applied, and the relay and the
sweep leave other tenants' rows to their own processes.
"""

from __future__ import annotations

__all__ = ["EventService", "EventServiceMetrics"]

import json
import logging
import uuid as uuid_module
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge
from pydantic import ValidationError

from pilothouse.errors import ErrorCategory, ForbiddenError, InvalidFieldError, PilothouseError
from pilothouse.events._backoff import PublishBackoff
from pilothouse.events._bus import (
    Bus,
    BusError,
    Delivery,
    positive_seconds,
    served_tenants,
    tenant_list,
)
from pilothouse.events._payloads import (
    RunAction,
    SkillCompletionEvent,
    TurnFinishedEvent,
    decode,
    encode,
)
from pilothouse.events._poison import (
    DEFAULT_MAX_DELIVER,
    PoisonGuard,
    dead_letter_topic,
    reply_target,
    unreadable_reason,
)
from pilothouse.types import Caller, FinishReason, TurnResult, cost_text

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse

logger = logging.getLogger("pilothouse.events")

_ACTION_NAMESPACE = uuid_module.UUID("6f1d1a52-64a4-4b8e-9f3c-1c2b3a4d5e6f")
"""Names the conversation of a ``run_action`` after its correlation id (uuid5):
a duplicate command finds its conversation taken and is not run twice."""


@dataclass
class EventServiceMetrics:
    """Prometheus metrics of the service (its own registry)."""

    registry: CollectorRegistry
    published: Counter
    publish_failures: Counter
    completions: Counter
    actions: Counter
    unsent: Gauge
    lag: Gauge

    @classmethod
    def create(cls) -> EventServiceMetrics:
        """New metrics in a registry of their own."""
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            published=Counter(
                "pilothouse_events_published",
                "Commands the relay published.",
                ["topic"],
                registry=registry,
            ),
            publish_failures=Counter(
                "pilothouse_events_publish_failures",
                "Commands the bus refused (each is tried again after its backoff).",
                ["topic"],
                registry=registry,
            ),
            completions=Counter(
                "pilothouse_events_completions",
                "Completions received, by what became of them.",
                ["outcome"],
                registry=registry,
            ),
            actions=Counter(
                "pilothouse_events_actions",
                "run_action commands, by outcome.",
                ["outcome"],
                registry=registry,
            ),
            unsent=Gauge(
                "pilothouse_events_outbox_unsent",
                "Outbox commands not yet published.",
                registry=registry,
                # A level, not a count: under the client's multiprocess mode
                # (PROMETHEUS_MULTIPROC_DIR) the highest of the live processes,
                # never a dead process's last value.
                multiprocess_mode="livemax",
            ),
            lag=Gauge(
                "pilothouse_events_consumer_lag",
                "Messages after the last one consumed, by topic.",
                ["topic"],
                registry=registry,
                # A level, not a count: under the client's multiprocess mode
                # (PROMETHEUS_MULTIPROC_DIR) the highest of the live processes,
                # never a dead process's last value.
                multiprocess_mode="livemax",
            ),
        )


class EventService:
    """Relays event commands and applies completions for a pilothouse process.

    Args:
        ph: the facade (its tenant is the default for ``run_action``).
        bus: the bus.
        tenants: the tenants this service acts for (default: the facade's
            tenant alone). A message of any other tenant is refused.
        reply_topic: where workers' completions come (``agent-events``).
        group: this service's consumer group (shared by its processes).
        action_topic: where ``run_action`` commands come; None runs no
            action consumer.
        poll_interval: seconds between outbox reads when nothing woke the relay.
        sweep_interval: seconds between deadline sweeps.
        busy_retry: seconds to keep retrying a completion whose conversation
            is running a turn, before handing it back to the bus to be
            delivered again (and retried again).
        recover_after: seconds without a write after which a conversation
            left ``RU`` by a dead process (after a completion was applied) is
            continued by the sweep; longer than any model call. Also the
            lease of a ``run_action``'s final answer claimed by a process
            that died before publishing it.
        concurrency: completions applied at once by this process (each
            resumes a conversation: its model call included); those of one
            conversation are applied one after another, in delivery order.
            The same bound, of its own, for ``run_action``s run at once:
            those with one ``memoryId`` run one after another, in delivery
            order.
        max_deliver: deliveries of a message whose handling raises (a
            database error, a bug) before it goes to the dead-letter topic
            ``<topic>.dlq``; until then it is handed back to the bus.
        metrics: where to count; new ones by default.
        publish_backoff: seconds before a command the bus refused is tried
            again; the delay doubles with each failure of that command.
        publish_backoff_max: the longest delay between two attempts of one
            command.
    """

    def __init__(
        self,
        ph: Pilothouse,
        bus: Bus,
        *,
        reply_topic: str = "agent-events",
        group: str = "pilothouse",
        action_topic: str | None = None,
        poll_interval: float = 0.2,
        sweep_interval: float = 1.0,
        busy_retry: float = 60.0,
        recover_after: float = 120.0,
        concurrency: int = 8,
        max_deliver: int = DEFAULT_MAX_DELIVER,
        metrics: EventServiceMetrics | None = None,
        tenants: Collection[str] | None = None,
        publish_backoff: float = 1.0,
        publish_backoff_max: float = 60.0,
    ) -> None:
        self.tenants = served_tenants(ph.tenant, tenants)
        if concurrency < 1:
            raise InvalidFieldError(
                "concurrency", f"must be at least 1 (1 applies one at a time), not {concurrency}"
            )
        self._concurrency = concurrency
        self._ph = ph
        self._bus = bus
        self.reply_topic = reply_topic
        self.group = group
        self.action_topic = action_topic
        # 0 would spin a loop (busy_retry: hand a completion back and take
        # it again at once; recover_after: take over turns still running).
        self._poll = positive_seconds("poll_interval", poll_interval)
        self._sweep = positive_seconds("sweep_interval", sweep_interval)
        self._busy_retry = positive_seconds("busy_retry", busy_retry)
        self._recover_after = positive_seconds("recover_after", recover_after)
        self._backoff = PublishBackoff(
            positive_seconds("publish_backoff", publish_backoff),
            positive_seconds("publish_backoff_max", publish_backoff_max),
        )
        self._poison = PoisonGuard(bus, max_deliver)
        self.metrics = metrics or EventServiceMetrics.create()
        self._wake = anyio.Event()

    def wake(self) -> None:
        """Have the relay read the outbox now (a turn just wrote to it)."""
        self._wake.set()

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Run every loop until cancelled."""
        await self._bus.start()
        # Workers answer on the reply topic without making a stream for it
        # (NATS): it must exist before the relay publishes the first command;
        # and a caller's run_action is taken once the service says it started.
        await self._bus.declare(self.reply_topic)
        if self.action_topic is not None:
            await self._bus.declare(self.action_topic)
        self._ph.subscribe(self._on_turn_event, deltas=False)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._relay_loop)
                group.start_soon(self._completion_loop)
                group.start_soon(self._sweep_loop)
                group.start_soon(self._recovery_loop)
                if self.action_topic is not None:
                    group.start_soon(self._action_loop, self.action_topic)
                task_status.started()
        finally:
            self._ph.unsubscribe(self._on_turn_event)

    async def _on_turn_event(self, event: Any) -> None:
        result = getattr(event, "result", None)
        # New commands in the outbox, or a conversation that may owe a
        # run_action its final answer: the relay reads both at once.
        if isinstance(result, TurnResult) and (
            result.settled or any(c.correlation_id for c in result.tool_calls)
        ):
            self.wake()

    # -- the relay ------------------------------------------------------------

    async def relay_once(self) -> int:
        """Publish every unsent command that is due; return how many were published.

        A command the bus refuses fails alone: the relay goes on with the
        others (every tenant's, every topic's) and tries it again after a
        delay that doubles with each failure, up to ``publish_backoff_max``
        seconds. Each failed attempt is one WARNING line per topic and error,
        not one per round.
        """
        sent, after, unsent = 0, 0, 0
        seen: set[int] = set()
        failures: dict[tuple[str, str], list[tuple[int, float]]] = {}
        try:
            while True:
                commands = await self._ph.events.unpublished(100, tenants=self.tenants, after=after)
                if not commands:
                    break
                after = commands[-1].id
                seen.update(c.id for c in commands)
                done: list[int] = []
                try:
                    for command in commands:
                        if not self._backoff.due(command.id):
                            unsent += 1
                            continue
                        try:
                            await self._bus.publish(
                                command.topic,
                                json.dumps(command.payload).encode(),
                                key=command.correlation_id,
                            )
                        except BusError as exc:
                            unsent += 1
                            self.metrics.publish_failures.labels(command.topic).inc()
                            failures.setdefault((command.topic, str(exc)), []).append(
                                self._backoff.failed(command.id)
                            )
                            continue
                        self._backoff.published(command.id)
                        done.append(command.id)
                        self.metrics.published.labels(command.topic).inc()
                finally:
                    # What the bus took is marked even when something else failed.
                    await self._ph.events.mark_published(done)
                sent += len(done)
            self._backoff.keep(seen)
            self.metrics.unsent.set(unsent)
        finally:
            # Logged even when the round is cancelled (a shutdown): every failure
            # the metric counts has its line.
            _log_failures(failures)
        return sent

    async def replies_once(self) -> int:
        """Publish the final ``turn_finished`` of every finished ``run_action``; return how many.

        A reply is claimed, published, then noted sent: a process that dies in
        between leaves a claim another takes over after ``recover_after``
        seconds (at least once: the caller may see a final answer twice).
        """
        sent = 0
        while True:
            replies = await self._ph.events.finished_replies(
                self._recover_after, tenants=self.tenants
            )
            if not replies:
                return sent
            done: list[str] = []
            try:
                for reply in replies:
                    event = turn_finished(reply.correlation_id, reply.result)
                    try:
                        await self._bus.answer(
                            reply.reply_to, encode(event), key=reply.correlation_id
                        )
                    except BusError as exc:
                        # Stays claimed: tried again when the claim's lease
                        # ends; the other answers go on meanwhile.
                        logger.warning(
                            "final answer of run_action %s on '%s' not published (next try in "
                            "%g s): %s",
                            reply.correlation_id,
                            reply.reply_to,
                            self._recover_after,
                            exc,
                        )
                        continue
                    done.append(reply.correlation_id)
                    self.metrics.actions.labels("final_reply").inc()
            finally:
                await self._ph.events.replies_sent(done)
            sent += len(done)
            if not done:
                return sent

    async def _relay_loop(self) -> None:
        while True:
            # A fresh event before reading the outbox: a wake that comes
            # while it is read is kept for the next round, never lost.
            self._wake = anyio.Event()
            try:
                await self.relay_once()
                await self.replies_once()
            except PilothouseError as exc:
                logger.warning("event relay: %s; retrying", exc)
            with anyio.move_on_after(self._poll):
                await self._wake.wait()

    # -- completions ------------------------------------------------------------

    async def _completion_loop(self) -> None:
        stream = self._bus.consume(self.reply_topic, self.group)
        # aclosing: a cancelled loop stops its consumer now, not at garbage collection.
        async with aclosing(stream):
            await self._completions(stream)

    async def _completions(self, stream: AsyncGenerator[Delivery]) -> None:
        """Apply deliveries, up to ``concurrency`` at once, one at a time per conversation."""
        await self._in_chains(stream, self._conversation_of, self._handle_acked)

    async def _in_chains(
        self,
        stream: AsyncGenerator[Delivery],
        key_of: Callable[[Delivery], Awaitable[str]],
        handle: Callable[[Delivery], Awaitable[None]],
    ) -> None:
        """Handle deliveries, up to ``concurrency`` at once, one at a time per key.

        Deliveries of one key (a conversation, a ``run_action``'s memory) wait
        in a chain behind each other, in the order delivered; those of other
        keys run meanwhile. The bound counts the waiting ones too, so no more
        than ``concurrency`` deliveries are taken from the bus and not yet
        acknowledged (Kafka commits an offset only once every earlier one of
        its partition is acknowledged: the adapter's in-order commits).
        """
        slots = anyio.Semaphore(self._concurrency)
        chains: dict[str, list[Delivery]] = {}

        async def chain(key: str, delivery: Delivery) -> None:
            while True:
                try:
                    await handle(delivery)
                finally:
                    slots.release()
                waiting = chains[key]
                if not waiting:
                    del chains[key]
                    return
                delivery = waiting.pop(0)

        async with anyio.create_task_group() as group:
            async for delivery in stream:
                if delivery.lag is not None:
                    self.metrics.lag.labels(delivery.topic).set(delivery.lag)
                await slots.acquire()
                key = await key_of(delivery)
                if key in chains:
                    chains[key].append(delivery)
                else:
                    chains[key] = []
                    group.start_soon(chain, key, delivery)

    async def _conversation_of(self, delivery: Delivery) -> str:
        """The conversation a delivery resumes (its chain); the correlation id when unknown."""
        try:
            message = decode(delivery.value)
        except (ValidationError, ValueError):
            return ""  # unreadable: handled (and counted) in a chain of its own
        if not isinstance(message, SkillCompletionEvent):
            return ""
        found = await self._ph.events.conversation_of(message.correlation_id)
        return found or message.correlation_id

    async def _handle_acked(self, delivery: Delivery) -> None:
        try:
            await self.handle_completion(delivery)
            self._poison.handled(delivery)
        except BusError as exc:
            # Applied but not acknowledged: it comes again and is a duplicate.
            logger.warning("completion on %s not acknowledged: %s", delivery.topic, exc)
        except Exception as exc:
            # One message must never stop the consumer: retried, then dead-lettered.
            if await self._poisoned(delivery, exc):
                self.metrics.completions.labels("dead_letter").inc()

    async def _poisoned(self, delivery: Delivery, exc: Exception) -> bool:
        """Hand back a message whose handling raised; True once it was dead-lettered."""
        try:
            return await self._poison.failed(delivery, exc)
        except BusError as bus_exc:
            logger.warning("a message on %s not handed back: %s", delivery.topic, bus_exc)
            return False

    async def handle_completion(self, delivery: Delivery) -> str:
        """Apply one delivered completion, then acknowledge it; return its outcome."""
        try:
            message = decode(delivery.value)
        except (ValidationError, ValueError, RecursionError) as exc:
            # Set aside where an operator can read it, not retried: it would
            # be refused again.
            topic = await self._poison.set_aside(delivery)
            logger.warning(
                "a message on %s is no completion (%s): dead-lettered on %s",
                delivery.topic,
                unreadable_reason(exc),
                topic,
            )
            self.metrics.completions.labels("invalid").inc()
            await delivery.ack()
            return "invalid"
        if not isinstance(message, SkillCompletionEvent):
            # Another kind of message shares the topic: not ours to apply.
            await delivery.ack()
            return "other"
        outcome = await self._apply(message)
        self.metrics.completions.labels(outcome).inc()
        if outcome == "refused":
            # Publishing on the reply topic is no right to resume another
            # tenant's conversation; nothing was recorded, so that tenant's
            # own process may still apply it if it is delivered there.
            logger.warning(
                "refused completion %s on %s: its call is of a tenant this process does not "
                "serve (it serves %s)",
                message.correlation_id,
                delivery.topic,
                tenant_list(self.tenants),
            )
        if outcome != "busy":
            await delivery.ack()
            return outcome
        # Handed back, to come again now: left unacknowledged, a Kafka group
        # would see it again only at its next rebalance (hours, in a stable
        # group) and NATS after its ack wait. Said, so a long hold is never silent.
        logger.warning(
            "completion %s handed back to the bus: its conversation was still running "
            "a turn after %g s",
            message.correlation_id,
            self._busy_retry,
        )
        await delivery.redeliver()
        return outcome

    async def _apply(self, message: SkillCompletionEvent) -> str:
        waited, pause = 0.0, 0.02
        while True:
            applied = await self._ph.events.complete(
                message.correlation_id,
                result=message.result,
                error=message.error,
                tenants=self.tenants,
            )
            if applied.outcome != "busy" or waited >= self._busy_retry:
                return applied.outcome
            await anyio.sleep(pause)
            waited += pause
            pause = min(pause * 2, 1.0)

    # -- deadlines ----------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        while True:
            await anyio.sleep(self._sweep)
            ended = await self._ph.events.expire(tenants=self.tenants)
            if ended:
                self.metrics.completions.labels("timeout").inc(ended)
            recovered = await self._ph.events.recover(self._recover_after, tenants=self.tenants)
            if recovered:
                self.metrics.completions.labels("recovered").inc(recovered)

    async def _recovery_loop(self) -> None:
        """Run again the ``run_action`` turns a dead process left (once; then they fail).

        A loop of its own: a turn run again holds it for a model call, which
        must not hold up the deadlines.
        """
        while True:
            await anyio.sleep(self._sweep)
            try:
                retried, failed = await self._ph.events.recover_actions(
                    self._recover_after, tenants=self.tenants
                )
            except Exception:
                # A database that is away for a moment must not end the
                # service: said with its traceback, tried at the next round.
                logger.exception("run_action recovery failed; retrying in %g s", self._sweep)
                continue
            if retried:
                self.metrics.actions.labels("recovered").inc(retried)
            if failed:
                self.metrics.actions.labels("recovery_failed").inc(failed)
            if retried or failed:
                self.wake()

    # -- run_action ---------------------------------------------------------------

    async def _action_loop(self, topic: str) -> None:
        stream = self._bus.consume(topic, self.group + "-actions")
        async with aclosing(stream):
            await self._actions(stream)

    async def _actions(self, stream: AsyncGenerator[Delivery]) -> None:
        """Run ``run_action``s, up to ``concurrency`` at once, in order per memory.

        Two actions with the same ``memoryId`` (of one tenant) share a chat
        memory: the second must see the first's answer, so they run one after
        another in the order delivered. Without a ``memoryId`` an action is a
        conversation of its own (named after its correlation id, which also
        keeps a redelivered duplicate behind its first delivery).
        """
        await self._in_chains(stream, self._action_key, self._handle_action_acked)

    async def _action_key(self, delivery: Delivery) -> str:
        """The chain of a ``run_action``: its tenant's memory, else its correlation id."""
        try:
            message = decode(delivery.value)
        except (ValidationError, ValueError, RecursionError):
            return ""  # unreadable: refused (and counted) in a chain of its own
        if not isinstance(message, RunAction):
            return ""
        tenant = self._ph.tenant if message.tenant is None else message.tenant
        if message.memory_id is not None:
            return json.dumps(["memory", tenant, message.memory_id])
        return json.dumps(["action", message.correlation_id])

    async def _handle_action_acked(self, delivery: Delivery) -> None:
        try:
            await self.handle_action(delivery)
            self._poison.handled(delivery)
        except BusError as exc:
            logger.warning("run_action on %s not finished: %s", delivery.topic, exc)
        except Exception as exc:
            # One message must never stop the consumer: retried, then
            # dead-lettered and answered, so its caller does not wait.
            if await self._poisoned(delivery, exc):
                self.metrics.actions.labels("dead_letter").inc()
                await self._answer_unhandled(delivery)

    async def _answer_unhandled(self, delivery: Delivery) -> None:
        """Answer a dead-lettered ``run_action`` with ``FA``, where its sender listens."""
        target = reply_target(delivery.value)
        if target is None:
            return
        correlation_id, reply_to = target
        reply = TurnFinishedEvent(
            correlation_id=correlation_id,
            status="FA",
            error=(
                f"internal: the run_action could not be handled in "
                f"{self._poison.max_deliver} deliveries; it was dead-lettered on "
                f"{dead_letter_topic(delivery.topic)}"
            ),
        )
        try:
            await self._bus.answer(reply_to, encode(reply), key=correlation_id)
        except BusError as exc:
            logger.warning("run_action %s not answered: %s", correlation_id, exc)

    async def handle_action(self, delivery: Delivery) -> str:
        """Run one delivered ``run_action`` and publish its ``turn_finished``."""
        try:
            message = decode(delivery.value)
        except (ValidationError, ValueError, RecursionError) as exc:
            return await self._refuse_unreadable(delivery, exc)
        if not isinstance(message, RunAction):
            await delivery.ack()
            return "other"
        correlation_id = message.correlation_id
        tenant = self._ph.tenant if message.tenant is None else message.tenant
        if tenant not in self.tenants:
            return await self._refuse_action(delivery, message, tenant)
        # What the bus starts is recorded as the bus's (no API key).
        ph = self._ph.for_tenant(tenant, caller=Caller("bus"))
        outcome, reply, settled = "finished", None, True
        try:
            result = await self._run_action(ph, message)
            reply = turn_finished(correlation_id, result)
            settled = result.settled
        except _Duplicate as duplicate:
            # Its conversation exists: this command was run already (its final
            # answer, if it still waits, comes from the relay). A turn a dead
            # process left is run again here, in its memory's order.
            outcome = "duplicate"
            retried, failed = await ph.events.recover_actions(
                self._recover_after, tenants=self.tenants, conversation_uuid=duplicate.uuid
            )
            if retried or failed:
                outcome = "recovered" if retried else "recovery_failed"
                self.wake()
        except PilothouseError as exc:
            outcome = "refused"
            reply = TurnFinishedEvent(
                correlation_id=correlation_id,
                status="FA",
                error=f"{exc.category.value}: {exc.public_message}",
            )
        if reply is not None:
            await self._bus.answer(message.reply_to, encode(reply), key=correlation_id)
            if settled:
                await ph.events.replies_sent([correlation_id])
            else:
                # The turn waits: its final answer goes out from whichever
                # process sees the conversation finish (the relay).
                outcome = "waiting"
                await ph.events.release_reply(correlation_id)
                self.wake()
        self.metrics.actions.labels(outcome).inc()
        await delivery.ack()
        return outcome

    async def _refuse_unreadable(self, delivery: Delivery, exc: Exception) -> str:
        """Answer a message that is no valid ``run_action`` with ``FA`` naming what is wrong.

        Answered when it names a ``correlationId`` and a ``replyTo`` (the
        sender listens there); dead-lettered and acknowledged either way:
        delivered again, it would be refused again.
        """
        reason = unreadable_reason(exc)
        topic = await self._poison.set_aside(delivery)
        logger.warning(
            "refused a message on %s that is no run_action (%s): dead-lettered on %s",
            delivery.topic,
            reason,
            topic,
        )
        self.metrics.actions.labels("invalid").inc()
        target = reply_target(delivery.value)
        if target is not None:
            correlation_id, reply_to = target
            reply = TurnFinishedEvent(
                correlation_id=correlation_id,
                status="FA",
                error=f"{ErrorCategory.INVALID_INPUT.value}: {reason}",
            )
            await self._bus.answer(reply_to, encode(reply), key=correlation_id)
        await delivery.ack()
        return "invalid"

    async def _refuse_action(self, delivery: Delivery, message: RunAction, tenant: str) -> str:
        """Answer a ``run_action`` of a tenant this process does not serve with ``FA``; run nothing.

        The bus carries no credentials: a message naming a tenant proves
        nothing, so only the tenants the process was started for are served.
        """
        served = tenant_list(self.tenants)
        logger.warning(
            "refused run_action %s on %s: it names tenant '%s'; this process serves %s",
            message.correlation_id,
            delivery.topic,
            tenant,
            served,
        )
        refusal = ForbiddenError(
            f"tenant '{tenant}' is not served by this process (it serves {served}); "
            "send the run_action to that tenant's pilothouse events process"
        )
        reply = TurnFinishedEvent(
            correlation_id=message.correlation_id,
            status="FA",
            error=f"{refusal.category.value}: {refusal.public_message}",
        )
        await self._bus.answer(message.reply_to, encode(reply), key=message.correlation_id)
        self.metrics.actions.labels("forbidden").inc()
        await delivery.ack()
        return "forbidden"

    async def _run_action(self, ph: Pilothouse, message: RunAction) -> TurnResult:
        conversation_uuid = str(uuid_module.uuid5(_ACTION_NAMESPACE, message.correlation_id))
        registered = await ph.events.register_reply(
            message.correlation_id, conversation_uuid, message.reply_to
        )
        if registered == "duplicate":
            raise _Duplicate(conversation_uuid)
        if isinstance(message.input, str):
            text, data = message.input, None
        else:
            text = str(message.input.get("input", "")) or json.dumps(message.input)
            data = message.input
        return await ph.command.start_and_send(
            text,
            action=message.action,
            agent=message.agent,
            memory_id=message.memory_id,
            input_data=data,
            conversation_uuid=conversation_uuid,
        )


class _Duplicate(Exception):
    """The command's conversation exists: it was run already.

    Attributes:
        uuid: that conversation.
    """

    def __init__(self, uuid: str) -> None:
        super().__init__(uuid)
        self.uuid = uuid


def turn_finished(correlation_id: str, result: TurnResult) -> TurnFinishedEvent:
    """The ``turn_finished`` event of a turn (the fields ``/v1/invoke`` answers with).

    ``final`` is False when the conversation still waits (``WA``).
    """
    finish = result.finish_reason
    return TurnFinishedEvent(
        correlation_id=correlation_id,
        conversation_uuid=result.conversation_uuid,
        status=result.status.value,
        finish_reason=finish.value if isinstance(finish, FinishReason) else None,
        output=result.output,
        usage={
            "inputTokens": result.input_tokens,
            "outputTokens": result.output_tokens,
            "totalTokens": result.input_tokens + result.output_tokens,
            "cost": cost_text(result.cost),
            "usageEstimated": result.usage_estimated,
        },
        ai_meta=result.ai_meta,
        error=result.error,
        final=result.settled,
    )


def _log_failures(failures: dict[tuple[str, str], list[tuple[int, float]]]) -> None:
    """One WARNING line per topic and error for a relay round's refused commands."""
    for (topic, error), steps in failures.items():
        count = max(c for c, _ in steps)
        delay = max(d for _, d in steps)
        logger.warning(
            "event relay: %d command(s) on '%s' not published (attempt %d; next try in "
            "%g s; the other commands go on): %s",
            len(steps),
            topic,
            count,
            delay,
            error,
        )
