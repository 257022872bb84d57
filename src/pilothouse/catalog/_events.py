"""The settings of an event tool, checked when the catalog is written.

An ``event`` tool (or any tool of a skill whose ``execution`` is ``event``)
is published on the event bus instead of being run. Its ``settings`` say
where: an unknown field is refused, so a misspelt ``replyTo`` never leaves
the default in place silently. The runtime reads the same model.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_COMMAND_TOPIC",
    "DEFAULT_EVENT_TIMEOUT",
    "DEFAULT_REPLY_TOPIC",
    "EventToolSettings",
]

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

DEFAULT_COMMAND_TOPIC = "agent-commands"
"""Where ``SkillInvocationEvent`` commands go (seed 002's topic)."""
DEFAULT_REPLY_TOPIC = "agent-events"
"""Where workers publish ``SkillCompletionEvent`` completions (seed 002's topic)."""
DEFAULT_EVENT_TIMEOUT = 300.0
"""Seconds a call waits for its completion before it ends with a timeout result."""

# Kafka's topic rule, which NATS subjects also accept.
_Topic = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]{1,249}$")]


class EventToolSettings(BaseModel):
    """Where an event tool's calls go and how long they may wait.

    Attributes:
        topic: the command topic.
        reply_to: the topic workers answer on (``replyTo`` in the command).
        timeout: seconds until the call ends with ``tool.exec.timeout``.
        skill: the ``skillName`` a worker runs; defaults to the tool's name.
    """

    # defer_build: built on first use, not in every cold start.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    topic: _Topic = DEFAULT_COMMAND_TOPIC
    reply_to: _Topic = DEFAULT_REPLY_TOPIC
    timeout: float = Field(default=DEFAULT_EVENT_TIMEOUT, gt=0)
    skill: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
