"""The messages on the bus, with seed 002's names: one TypeAdapter reads them all.

``SkillInvocationEvent`` {correlationId, skillName, arguments, replyTo}
goes out on the command topic (pilothouse adds tenant, conversationId,
toolCallId and deadline); a worker answers with ``SkillCompletionEvent``
{correlationId, result | error} on ``replyTo``. ``run_action`` asks
pilothouse to run an action and is answered by ``turn_finished``.
"""

from __future__ import annotations

__all__ = [
    "EventMessage",
    "RunAction",
    "SkillCompletionEvent",
    "SkillInvocationEvent",
    "TurnFinishedEvent",
    "decode",
    "encode",
]

from datetime import datetime
from typing import Annotated, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from pydantic.alias_generators import to_camel


class _Message(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True
    )


class SkillInvocationEvent(_Message):
    """A command: run ``skill_name`` with ``arguments`` and answer on ``reply_to``."""

    type: Literal["SkillInvocationEvent"] = "SkillInvocationEvent"
    correlation_id: str = Field(min_length=1, max_length=64)
    skill_name: str = Field(min_length=1, max_length=128)
    arguments: dict[str, Any] = Field(default_factory=dict[str, Any])
    reply_to: str = Field(min_length=1)
    tenant: str = "default"
    conversation_id: str = ""
    tool_call_id: str = ""
    deadline: datetime | None = None


class SkillCompletionEvent(_Message):
    """A worker's answer: ``result``, or ``error`` when it failed."""

    type: Literal["SkillCompletionEvent"] = "SkillCompletionEvent"
    correlation_id: str = Field(min_length=1, max_length=64)
    result: Any = None
    error: str | None = None


class RunAction(_Message):
    """A command: run an action (optionally as an agent) and answer with ``turn_finished``."""

    type: Literal["run_action"] = "run_action"
    action: str = Field(min_length=1)
    agent: str | None = None
    input: str | dict[str, Any] = ""
    memory_id: str | None = None
    correlation_id: str = Field(min_length=1, max_length=64)
    reply_to: str = Field(min_length=1)
    tenant: str | None = None


class TurnFinishedEvent(_Message):
    """The answer to ``run_action``: the turn's output, status, usage and ``aiMeta``.

    ``final`` is False on the answer of a turn that waits (``WA``: event
    calls or questions); the final answer follows when the conversation
    finishes, with the same ``correlationId``.
    """

    type: Literal["turn_finished"] = "turn_finished"
    correlation_id: str
    conversation_uuid: str | None = None
    status: str
    finish_reason: str | None = None
    output: Any = None
    usage: dict[str, Any] = Field(default_factory=dict[str, Any])
    ai_meta: dict[str, Any] | None = None
    error: str | None = None
    final: bool = True


EventMessage = Annotated[
    SkillInvocationEvent | SkillCompletionEvent | RunAction | TurnFinishedEvent,
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[EventMessage] = TypeAdapter(EventMessage)


def decode(value: bytes) -> EventMessage:
    """Read one message; a payload without ``type`` is read by its fields' names.

    Raises:
        pydantic.ValidationError: not one of the messages.
    """
    from pilothouse.api import loads_json

    # Any integer is read; the facade names one too large.
    data = loads_json(value, check=False)
    if isinstance(data, dict) and "type" not in data:
        # Seed 002's events carry no type: tell them apart by their fields.
        fields = cast("dict[str, Any]", data)
        if "skillName" in fields:
            fields = {**fields, "type": "SkillInvocationEvent"}
        elif "action" in fields:
            fields = {**fields, "type": "run_action"}
        else:
            fields = {**fields, "type": "SkillCompletionEvent"}
        data = fields
    return _ADAPTER.validate_python(data)


def encode(message: EventMessage) -> bytes:
    """One message as the JSON bytes published (camelCase, as seed 002 names them)."""
    return message.model_dump_json(by_alias=True).encode()
