"""Event-driven execution: event tools over Kafka, NATS or memory (docs/events.md).

A face of pilothouse like the HTTP service: it enters only through
:mod:`pilothouse.api`. :class:`EventService` publishes event tools' commands
and applies workers' completions for a pilothouse process, and answers
``run_action``; :class:`Worker` runs tools for commands; :func:`open_bus`
gives the bus adapter of a URL.
"""

from pilothouse.events._bus import Bus, BusError, Delivery, describe_bus, open_bus
from pilothouse.events._memory import MemoryBus
from pilothouse.events._payloads import (
    RunAction,
    SkillCompletionEvent,
    SkillInvocationEvent,
    TurnFinishedEvent,
    decode,
    encode,
)
from pilothouse.events._service import EventService, EventServiceMetrics, turn_finished
from pilothouse.events._worker import Worker, WorkerMetrics

__all__ = [
    "Bus",
    "BusError",
    "Delivery",
    "EventService",
    "EventServiceMetrics",
    "MemoryBus",
    "RunAction",
    "SkillCompletionEvent",
    "SkillInvocationEvent",
    "TurnFinishedEvent",
    "Worker",
    "WorkerMetrics",
    "decode",
    "describe_bus",
    "encode",
    "open_bus",
    "turn_finished",
]
