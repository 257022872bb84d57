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
    "STORED",
    "EventToolSettings",
    "check_topic",
]

import re
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
)
from pydantic_core import PydanticCustomError

DEFAULT_COMMAND_TOPIC = "agent-commands"
"""Where ``SkillInvocationEvent`` commands go (seed 002's topic)."""
DEFAULT_REPLY_TOPIC = "agent-events"
"""Where workers publish ``SkillCompletionEvent`` completions (seed 002's topic)."""
DEFAULT_EVENT_TIMEOUT = 300.0
"""Seconds a call waits for its completion before it ends with a timeout result."""

_TOPIC_CHARACTERS = re.compile(r"[A-Za-z0-9._-]{1,249}")


STORED = {"stored": True}
"""Validation context of a stored row: its topic names are not checked again."""


def check_topic(name: str, info: ValidationInfo) -> str:
    """Return ``name`` if every bus can publish on it: a Kafka topic and a NATS subject.

    Kafka takes 1 to 249 of ``[a-zA-Z0-9._-]``, but not ``.`` or ``..``; a
    NATS publish subject has no empty token (``a..b``, a leading or trailing
    dot), no whitespace and no wildcard (``*``, ``>``). A name either refuses
    would be written to the outbox and fail at every publish, so it is
    refused when the catalog is written. A row stored before this rule
    (validated with :data:`STORED` as context) keeps its name: its calls
    are written to the outbox and fail alone at the relay, which backs off
    per row, rather than failing every turn of the action.

    Raises:
        PydanticCustomError: what is wrong, and what to write instead.
    """
    if info.context == STORED:
        return name
    if not _TOPIC_CHARACTERS.fullmatch(name):
        raise PydanticCustomError(
            "topic_name",
            "'{name}' is no topic name: use 1 to 249 letters, digits, '.', '_' or '-' "
            "(no spaces, no wildcards), e.g. 'agent-commands'",
            {"name": name},
        )
    if "" in name.split("."):
        raise PydanticCustomError(
            "topic_name",
            "'{name}' has an empty part between dots (NATS refuses 'a..b' and a leading or "
            "trailing '.'; Kafka refuses '.' and '..'): write e.g. 'orders.commands'",
            {"name": name},
        )
    return name


# The rules of both buses: a catalog does not know which bus will carry it.
_Topic = Annotated[str, AfterValidator(check_topic)]


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
