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

from pydantic import BaseModel, ConfigDict, Field, StrictStr, TypeAdapter
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
    """A worker's answer: ``result``, or ``error`` when it failed.

    Read tolerantly: fields it does not know (a ``timestamp``, the
    ``skillName`` and ``arguments`` a worker echoes from its command) are
    ignored, so a worker that adds one never leaves its call waiting.
    """

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    type: Literal["SkillCompletionEvent"] = "SkillCompletionEvent"
    correlation_id: str = Field(min_length=1, max_length=64)
    result: Any = None
    error: str | None = None


class RunAction(_Message):
    """A command: run an action (optionally as an agent) and answer with ``turn_finished``.

    Read strictly: a field it does not know is refused (answered ``FA``
    naming it), since a misspelt ``memoryID`` would otherwise run the action
    without its memory. The lengths are those of the columns that keep them.
    """

    type: Literal["run_action"] = "run_action"
    action: str = Field(min_length=1, max_length=64)
    agent: str | None = Field(default=None, min_length=1, max_length=64)
    input: StrictStr | dict[str, Any] = ""
    memory_id: str | None = Field(default=None, min_length=1, max_length=64)
    correlation_id: str = Field(min_length=1, max_length=64)
    reply_to: str = Field(min_length=1, max_length=249)
    tenant: str | None = Field(default=None, min_length=1, max_length=32)


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


_TYPES = frozenset({"SkillInvocationEvent", "SkillCompletionEvent", "run_action", "turn_finished"})


def decode(value: bytes) -> EventMessage:
    """Read one message; a payload without ``type`` is read by its fields' names.

    A CloudEvents envelope (structured mode: ``specversion`` and ``data``)
    is read as its ``data``, typed by the envelope's ``type`` when its last
    dotted part names one of the messages (``com.example.SkillCompletionEvent``).

    Raises:
        pydantic.ValidationError: not one of the messages.
    """
    from pilothouse.api import loads_json

    # Any integer is read; the facade names one too large.
    data = loads_json(value, check=False)
    if isinstance(data, dict):
        data = _typed(cast("dict[str, Any]", data))
    return _ADAPTER.validate_python(data)


def _typed(fields: dict[str, Any]) -> dict[str, Any]:
    """The message's fields with its ``type``, out of a CloudEvents envelope if it is one."""
    inner = fields.get("data")
    if "specversion" in fields and isinstance(inner, dict):
        kind = str(fields.get("type", "")).rpartition(".")[2]
        fields = cast("dict[str, Any]", inner)
        if "type" not in fields and kind in _TYPES:
            fields = {**fields, "type": kind}
    if "type" in fields:
        return fields
    # Seed 002's events carry no type: tell them apart by their fields. A
    # result or an error makes a completion, also when the worker echoes its
    # command's skillName.
    if "result" in fields or "error" in fields:
        kind = "SkillCompletionEvent"
    elif "skillName" in fields:
        kind = "SkillInvocationEvent"
    elif "action" in fields:
        kind = "run_action"
    else:
        kind = "SkillCompletionEvent"
    return {**fields, "type": kind}


def encode(message: EventMessage) -> bytes:
    """One message as the JSON bytes published (camelCase, as seed 002 names them)."""
    return message.model_dump_json(by_alias=True).encode()
