"""The tool worker: runs ``SkillInvocationEvent`` commands and answers them.

A :class:`Worker` consumes the command topic in a consumer group (start as
many as needed: the group shares the work), runs each command's
``skillName`` (a Python tool registered on the worker, or a catalog tool of
the command's tenant, through ``ph.events.run_tool``) and publishes a
``SkillCompletionEvent`` on its ``replyTo``. A command that fails
``attempts`` times in a row, or that cannot be read, goes to the
dead-letter topic; a readable one is also answered with the error, so its
conversation does not wait for the deadline. A command past its deadline is
not run: pilothouse has already ended the call with a timeout result.
A worker runs commands only of the tenants it was started for
(``tenants``, by default its facade's tenant): a command naming another
tenant is answered with an error and nothing runs.
A command for a skill the worker does not have is neither run nor
answered: it is passed on to the group (:meth:`Delivery.pass_on`), so the
worker that has the skill answers it.

Idempotency is pilothouse's: a command delivered twice is run twice, and
the second completion is recorded as a duplicate and ignored. Make tools
with side effects idempotent by ``correlationId`` (``ToolContext.call_id``
carries the model's call id; the correlation id is in the command).
"""

from __future__ import annotations

__all__ = ["Worker", "WorkerMetrics"]

import logging
import time
from collections.abc import AsyncGenerator, Callable, Collection, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from pydantic import ValidationError

from pilothouse.errors import ForbiddenError, InvalidFieldError, NotFoundError, PilothouseError
from pilothouse.events._bus import (
    Bus,
    BusError,
    Delivery,
    positive_seconds,
    served_tenants,
    tenant_list,
)
from pilothouse.events._payloads import (
    SkillCompletionEvent,
    SkillInvocationEvent,
    decode,
    encode,
)
from pilothouse.events._poison import (
    DEFAULT_MAX_DELIVER,
    PoisonGuard,
    reply_target,
    unreadable_reason,
)

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse

logger = logging.getLogger("pilothouse.events.worker")


@dataclass
class WorkerMetrics:
    """Prometheus metrics of a worker: progress, failures, lag, durations."""

    registry: CollectorRegistry
    commands: Counter
    seconds: Histogram
    lag: Gauge

    @classmethod
    def create(cls) -> WorkerMetrics:
        """New metrics in a registry of their own."""
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            commands=Counter(
                "pilothouse_worker_commands",
                "Commands handled, by outcome "
                "(ok, error, dead_letter, expired, invalid, forbidden, not_served).",
                ["topic", "outcome"],
                registry=registry,
            ),
            seconds=Histogram(
                "pilothouse_worker_seconds",
                "Time to run one command, by skill.",
                ["skill"],
                registry=registry,
            ),
            lag=Gauge(
                "pilothouse_worker_lag",
                "Commands after the last one taken, by topic (consumer lag).",
                ["topic"],
                registry=registry,
                # A level, not a count: under the client's multiprocess mode
                # (PROMETHEUS_MULTIPROC_DIR) the highest of the live processes,
                # never a dead process's last value.
                multiprocess_mode="livemax",
            ),
        )


class Worker:
    """Runs tools for commands on the bus.

    Args:
        ph: the facade (runs the tools; a command's tenant picks the view).
        bus: the bus.
        topic: the command topic (``agent-commands``).
        group: the workers' consumer group.
        attempts: runs of a failing command before it is dead-lettered.
        dead_letter_topic: where poison commands go (default ``<topic>.dlq``).
        timeout: seconds a tool may run.
        metrics: where to count; new ones by default.
        tenants: the tenants whose commands this worker runs (default: the
            facade's tenant alone). A command of any other tenant is
            answered with an error and not run.
        max_deliver: deliveries of a command whose handling raises (not a
            failing tool: that is ``attempts``) before it is dead-lettered.

    Example:
        ```python
        worker = Worker(ph, open_bus("kafka://127.0.0.1:9092"))

        @worker.tool
        def lookup_order(order_id: str) -> dict:
            return {"order_id": order_id, "status": "shipped"}

        await worker.run()
        ```
    """

    def __init__(
        self,
        ph: Pilothouse,
        bus: Bus,
        *,
        topic: str = "agent-commands",
        group: str = "pilothouse-workers",
        attempts: int = 3,
        dead_letter_topic: str | None = None,
        timeout: float = 30.0,
        metrics: WorkerMetrics | None = None,
        tenants: Collection[str] | None = None,
        max_deliver: int = DEFAULT_MAX_DELIVER,
    ) -> None:
        self.tenants = served_tenants(ph.tenant, tenants)
        if attempts < 1:
            raise InvalidFieldError("attempts", f"must be at least 1, not {attempts}")
        self._ph = ph
        self._bus = bus
        self.topic = topic
        self.group = group
        self.attempts = attempts
        self.dead_letter_topic = dead_letter_topic or f"{topic}.dlq"
        self._timeout = positive_seconds("timeout", timeout)
        self.metrics = metrics or WorkerMetrics.create()
        self._poison = PoisonGuard(bus, max_deliver, dead_letter=self.dead_letter_topic)

    def tool(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """Register a Python function as a tool this worker runs (a decorator)."""
        self._ph.events.register_tools(function)
        return function

    def register(self, references: Sequence[str]) -> list[str]:
        """Register tools by reference (``package.module:function`` or a module)."""
        return [name for ref in references for name in self._ph.events.register_tools(ref)]

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Consume and run commands until cancelled."""
        await self._bus.start()
        stream = self._bus.consume(self.topic, self.group)
        task_status.started()
        # aclosing: a cancelled worker stops its consumer now, not at garbage collection.
        async with aclosing(stream):
            await self._loop(stream)

    async def _loop(self, stream: AsyncGenerator[Delivery]) -> None:
        async for delivery in stream:
            if delivery.lag is not None:
                self.metrics.lag.labels(self.topic).set(delivery.lag)
            try:
                await self.handle(delivery)
                self._poison.handled(delivery)
            except BusError as exc:
                # Unacknowledged: the bus delivers the command again.
                logger.warning("command on %s not finished: %s", self.topic, exc)
            except Exception as exc:
                # One command must never stop the worker: retried, then dead-lettered.
                await self._poisoned(delivery, exc)

    async def _poisoned(self, delivery: Delivery, exc: Exception) -> None:
        try:
            if not await self._poison.failed(delivery, exc):
                return
            self.metrics.commands.labels(self.topic, "dead_letter").inc()
            target = reply_target(delivery.value)
            if target is not None:
                # Its conversation waits for this answer, not for the deadline.
                error = (
                    f"tool.exec.error: internal: the command could not be handled in "
                    f"{self._poison.max_deliver} deliveries; it was dead-lettered on "
                    f"{self.dead_letter_topic}"
                )
                completion = SkillCompletionEvent(correlation_id=target[0], error=error)
                await self._bus.answer(target[1], encode(completion), key=target[0])
        except BusError as bus_exc:
            logger.warning("command on %s not handed back: %s", self.topic, bus_exc)

    async def handle(self, delivery: Delivery) -> str:
        """Run one delivered command, answer it, acknowledge it; return the outcome.

        A command for a skill this worker does not have is neither run nor
        answered: it is passed on to the group (:meth:`Delivery.pass_on`),
        whose member that has the skill, or another group, answers it.
        """
        outcome = await self._handle(delivery)
        self.metrics.commands.labels(self.topic, outcome).inc()
        if outcome == "not_served":
            await delivery.pass_on()
        else:
            await delivery.ack()
        return outcome

    async def _handle(self, delivery: Delivery) -> str:
        try:
            command = decode(delivery.value)
        except (ValidationError, ValueError, RecursionError) as exc:
            await self._dead_letter(delivery, f"unreadable: {exc}")
            target = reply_target(delivery.value)
            if target is not None:
                # Its sender waits for this answer: the reason, not the deadline.
                error = f"tool.exec.error: invalid_input: {unreadable_reason(exc)}"
                completion = SkillCompletionEvent(correlation_id=target[0], error=error)
                await self._bus.answer(target[1], encode(completion), key=target[0])
            return "invalid"
        if not isinstance(command, SkillInvocationEvent):
            return "other"
        if command.tenant not in self.tenants:
            await self._refuse(command)
            return "forbidden"
        if command.deadline is not None and command.deadline.timestamp() < time.time():
            # pilothouse has ended (or will end) the call with a timeout.
            return "expired"
        try:
            return await self._attempts(delivery, command)
        except NotFoundError:
            # Not this worker's skill: an error answer would beat the answer
            # of the worker or service that has it.
            logger.debug(
                "command %s (%s) on %s: not a skill of this worker; passed on",
                command.correlation_id,
                command.skill_name,
                self.topic,
            )
            return "not_served"

    async def _attempts(self, delivery: Delivery, command: SkillInvocationEvent) -> str:
        """Run the command up to ``attempts`` times, answer it; dead-letter it if it keeps failing.

        Raises:
            NotFoundError: the worker has no such skill.
        """
        error: str | None = None
        started = time.perf_counter()
        for attempt in range(1, self.attempts + 1):
            error, result = await self._run(command)
            if error is None:
                self.metrics.seconds.labels(command.skill_name).observe(
                    time.perf_counter() - started
                )
                await self._answer(command, result, None)
                return "ok"
            logger.info(
                "command %s (%s) failed, attempt %d of %d: %s",
                command.correlation_id,
                command.skill_name,
                attempt,
                self.attempts,
                error,
            )
        assert error is not None
        await self._dead_letter(delivery, error)
        await self._answer(command, None, f"{error} (dead-lettered after {self.attempts} attempts)")
        return "dead_letter"

    async def _run(self, command: SkillInvocationEvent) -> tuple[str | None, Any]:
        ph = self._ph.for_tenant(command.tenant)
        try:
            run = await ph.events.run_tool(
                command.skill_name,
                command.arguments,
                conversation_uuid=command.conversation_id,
                call_id=command.tool_call_id,
                timeout=self._timeout,
            )
        except NotFoundError:
            raise  # not this worker's skill: the caller passes the command on
        except PilothouseError as exc:
            return f"tool.exec.error: {exc}", None
        return run.error, run.result

    async def _refuse(self, command: SkillInvocationEvent) -> None:
        """Answer a command of a tenant this worker does not serve with an error; run nothing.

        The bus carries no credentials: a command naming a tenant proves
        nothing, so only the tenants the worker was started for are served.
        """
        served = tenant_list(self.tenants)
        logger.warning(
            "refused command %s (%s) on %s: it names tenant '%s'; this worker serves %s",
            command.correlation_id,
            command.skill_name,
            self.topic,
            command.tenant,
            served,
        )
        refusal = ForbiddenError(
            f"tenant '{command.tenant}' is not served by this worker (it serves {served})"
        )
        await self._answer(
            command, None, f"tool.exec.error: {refusal.category.value}: {refusal.public_message}"
        )

    async def _answer(self, command: SkillInvocationEvent, result: Any, error: str | None) -> None:
        completion = SkillCompletionEvent(
            correlation_id=command.correlation_id, result=result, error=error
        )
        await self._bus.answer(command.reply_to, encode(completion), key=command.correlation_id)

    async def _dead_letter(self, delivery: Delivery, reason: str) -> None:
        logger.warning("dead-lettered a command from %s: %s", delivery.topic, reason)
        await self._bus.publish(self.dead_letter_topic, delivery.value, key=delivery.key)
