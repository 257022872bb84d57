"""Events a running turn emits to its subscribers, and the results it returns.

Events are frozen dataclasses with a literal ``type`` discriminator, so the
HTTP service can serialize them with one TypeAdapter and a client can switch
on ``type``.
"""

from __future__ import annotations

__all__ = [
    "AnswerSource",
    "EventHub",
    "Listener",
    "Question",
    "ReturnedCall",
    "StatusChanged",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallRecord",
    "ToolCallRequested",
    "TurnEvent",
    "TurnFinished",
    "TurnResult",
    "TurnRetry",
]

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from pilothouse._cost import cost_text
from pilothouse.catalog._enums import FinishReason, ProcessStatus, ToolCallStatus

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Question:
    """A question the model asked the user (``AskUserQuestion``); the turn waits for answers.

    Attributes:
        id: the question's id, which the answer names.
        question: the question's text.
        choices: the allowed answers; empty when any answer goes.
        call_id: the ``AskUserQuestion`` call that asked it.
    """

    id: str
    question: str
    choices: tuple[str, ...]
    call_id: str

    def to_dict(self) -> dict[str, Any]:
        """The question as JSON-ready data (without the call id, as on the wire)."""
        return {"id": self.id, "question": self.question, "choices": list(self.choices)}


_RETURNED_CALL_KEYS = ("id", "name", "arguments", "correlation_id")


@dataclass(frozen=True, slots=True)
class ReturnedCall:
    """A call of a custom-schema tool, returned to the caller unexecuted.

    The caller runs it and gives the result back (``submit_tool_result``).
    A call of an event tool is published on the bus instead, and a worker's
    completion answers it: it carries its ``correlation_id``.

    Attributes:
        id: the call's id.
        name: the tool's name.
        arguments: the arguments the model gave.
        correlation_id: the call's correlation id on the event bus, if it went there.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    correlation_id: str | None = None

    def __getitem__(self, key: str) -> Any:
        """Read a field as from a mapping too: ``call["id"]`` is ``call.id``.

        The wire shows calls as objects ``{id, name, arguments}``; code written
        against that shape works on the typed call unchanged.

        Raises:
            KeyError: not a field of a returned call.
        """
        if key not in _RETURNED_CALL_KEYS:
            raise KeyError(f"{key!r}: a returned call has {', '.join(_RETURNED_CALL_KEYS)}")
        return getattr(self, key)

    def to_dict(self) -> dict[str, Any]:
        """The call as JSON-ready data."""
        data = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.correlation_id is not None:
            data["correlationId"] = self.correlation_id
        return data


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """A tool call the model made during a turn, and what became of it.

    Attributes:
        id: the call's id.
        name: the tool's name.
        arguments: the arguments the model gave (repaired when they needed it).
        status: succeeded, failed, denied, returned to the caller, or still
            requested (a question waiting for its answer).
        result: what the model was told, once there is a result.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    status: ToolCallStatus
    result: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready data (the status as its code)."""
        return {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "status": self.status.value,
            "result": self.result,
        }


@dataclass(frozen=True, slots=True)
class AnswerSource:
    """A chunk retrieval gave the model for this answer, numbered as the model saw it.

    Attributes:
        n: its number in the prompt (``[1]`` first); the model cites it as ``[n]``.
        collection: the document collection's code it came from.
        document_id: its document's id in the store.
        source: its document's source (file path, URL, or the given source).
        title: its document's title.
        heading: the headings above the chunk, joined by `` > `` (empty: none).
        chunk_id: the chunk's id in the store.
        position: the chunk's place in its document, from 0.
        similarity: the cosine similarity of the chunk to the query.
        score: the rank score the hits were ordered by.
        text: the chunk's text, as the model was given it.
        cited: the answer cites it as ``[n]``.
        pages: a PDF chunk's pages (empty: not a PDF, or unknown).
    """

    n: int
    collection: str
    document_id: str
    source: str
    title: str
    heading: str
    chunk_id: str
    position: int
    similarity: float
    score: float
    text: str
    cited: bool = False
    pages: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The source as JSON-ready data."""
        data: dict[str, Any] = {
            "n": self.n,
            "collection": self.collection,
            "document_id": self.document_id,
            "source": self.source,
            "title": self.title,
            "heading": self.heading,
            "chunk_id": self.chunk_id,
            "position": self.position,
            "similarity": round(self.similarity, 6),
            "score": round(self.score, 6),
            "cited": self.cited,
            "text": self.text,
        }
        if self.pages:
            data["pages"] = self.pages
        return data


SETTLED = frozenset(
    {
        ProcessStatus.COMPLETED,
        ProcessStatus.FAILED,
        ProcessStatus.TERMINATED,
        ProcessStatus.KILLED,
        ProcessStatus.STUCK,
    }
)
"""Statuses in which a conversation waits for nothing (``CO`` unless its calls wait)."""


def settled(status: ProcessStatus, finish_reason: FinishReason | None) -> bool:
    """Whether a conversation in ``status`` has its answer and waits for nothing.

    ``WA`` (event calls, questions), ``RU``, ``NS`` and ``PA`` wait; so does
    ``CO`` with finish reason ``TC`` (custom-schema calls returned to the
    caller wait for their results). A ``run_action``'s final ``turn_finished``
    is published when its conversation is settled.
    """
    if status is ProcessStatus.COMPLETED and finish_reason is FinishReason.TOOL_CALLS:
        return False
    return status in SETTLED


@dataclass(frozen=True)
class TurnResult:
    """What one turn produced.

    Attributes:
        conversation_uuid: the conversation.
        status: the conversation's status after the turn.
        finish_reason: why the model stopped, when it answered.
        output: the answer: text, or the parsed JSON when the action has an
            output schema.
        text: the answer's raw text.
        input_tokens: tokens sent in this turn (all model calls).
        output_tokens: tokens received in this turn.
        cost: estimated cost of this turn from the model's prices.
        ai_meta: the AI-generated marker of the output.
        error: the error detail when the turn failed.
        tool_calls: calls returned to the caller unexecuted.
        questions: the questions asked, when the turn waits (``WA``) for
            answers; ``output`` carries them too, as ``{"questions": [...]}``.
        call_records: every tool call the model made in this turn, in order,
            with its outcome.
        usage_estimated: some of the tokens were counted by pilothouse, not
            reported by the provider: a server that reports no usage, or a
            call stopped mid-answer (the prompt and the text streamed so far).
        model: the catalog code of the model that made the turn's last call.
        requested_model: the model the turn asked for, when a ``downgrade``
            budget switched it to ``model`` (None: no switch).
        sources: the chunks retrieval gave the model for this turn, numbered
            as in the prompt, each marked ``cited`` when the answer cites it
            as ``[n]`` (empty: the turn retrieved nothing).
    """

    conversation_uuid: str
    status: ProcessStatus
    finish_reason: FinishReason | None
    output: Any
    text: str
    input_tokens: int
    output_tokens: int
    cost: Decimal
    ai_meta: dict[str, Any] | None
    error: str | None = None
    tool_calls: tuple[ReturnedCall, ...] = ()
    questions: tuple[Question, ...] = ()
    call_records: tuple[ToolCallRecord, ...] = ()
    usage_estimated: bool = False
    sources: tuple[AnswerSource, ...] = ()
    model: str | None = None
    requested_model: str | None = None

    @property
    def cited(self) -> tuple[AnswerSource, ...]:
        """The sources the answer cites as ``[n]``, in the order they were numbered."""
        return tuple(source for source in self.sources if source.cited)

    @property
    def settled(self) -> bool:
        """Whether the conversation has its answer: nothing it waits for (see :func:`settled`)."""
        return settled(self.status, self.finish_reason)

    def as_json(self) -> dict[str, Any]:
        """Return the result as JSON-ready data (codes for enums, cost as a string)."""
        return {
            "conversation_uuid": self.conversation_uuid,
            "status": self.status.value,
            "finish_reason": self.finish_reason.value if self.finish_reason else None,
            "output": self.output,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": cost_text(self.cost),
            "usage_estimated": self.usage_estimated,
            "ai_meta": self.ai_meta,
            "error": self.error,
            "tool_calls": [call.to_dict() for call in self.tool_calls],
            "sources": [source.to_dict() for source in self.sources],
            "model": self.model,
            "requested_model": self.requested_model,
        }


@dataclass(frozen=True)
class TextDelta:
    """A piece of the answer's text, as it arrives.

    Attributes:
        model: the catalog model writing it, when a ``downgrade`` budget
            switched the turn away from the model its action names; None
            when the action's own model writes it.
    """

    conversation_uuid: str
    text: str
    type: Literal["text_delta"] = "text_delta"
    model: str | None = None


@dataclass(frozen=True)
class ThinkingDelta:
    """A piece of the model's reasoning text, as it arrives.

    Attributes:
        model: as :attr:`TextDelta.model`.
    """

    conversation_uuid: str
    text: str
    type: Literal["thinking_delta"] = "thinking_delta"
    model: str | None = None


@dataclass(frozen=True)
class ToolCallRequested:
    """The model asked for a tool call."""

    conversation_uuid: str
    call_id: str
    name: str
    arguments: dict[str, Any]
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolCallFinished:
    """A tool the turn ran has its result (what the model reads next)."""

    conversation_uuid: str
    call_id: str
    name: str
    result: str
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class StatusChanged:
    """The conversation moved from one status to another."""

    conversation_uuid: str
    old: ProcessStatus
    new: ProcessStatus
    type: Literal["status"] = "status"


@dataclass(frozen=True)
class TurnRetry:
    """A model call failed and will be tried again after ``delay`` seconds."""

    conversation_uuid: str
    attempt: int
    delay: float
    error: str
    type: Literal["retry"] = "retry"


@dataclass(frozen=True)
class TurnFinished:
    """The turn ended; carries its result (usage, cost, output)."""

    conversation_uuid: str
    result: TurnResult
    type: Literal["finished"] = "finished"


TurnEvent = (
    TextDelta
    | ThinkingDelta
    | ToolCallRequested
    | ToolCallFinished
    | StatusChanged
    | TurnRetry
    | TurnFinished
)
"""Every event a turn can emit."""

Listener = Callable[[TurnEvent], Awaitable[None] | None]
"""Receives a turn's events; may be sync or async."""


class EventHub:
    """Fans turn events out to subscribers: per conversation, per tenant, or for all.

    One hub serves a whole process (every tenant's turns); a subscriber for
    all conversations may keep to one tenant's (``tenant=``).
    """

    def __init__(self) -> None:
        # (listener, tenant or None for every tenant)
        self._all: list[tuple[Listener, str | None]] = []
        self._quiet: list[tuple[Listener, str | None]] = []
        # (listener, tenant or None for any tenant's conversation of that uuid)
        self._by_conversation: dict[str, list[tuple[Listener, str | None]]] = {}

    def subscribe(
        self,
        listener: Listener,
        conversation_uuid: str | None = None,
        *,
        deltas: bool = True,
        tenant: str | None = None,
    ) -> None:
        """Call ``listener`` with every event (of one conversation, when given).

        Args:
            listener: called with each event.
            conversation_uuid: only this conversation's events; all when None.
            deltas: also the text and thinking deltas of streamed answers. A
                listener for all conversations that needs none (metrics, a
                turn tracker) should say so: while any listener wants deltas,
                every model call is streamed to produce them.
            tenant: only this tenant's events: with a conversation given,
                another tenant's conversation of that uuid is never heard.
        """
        if conversation_uuid is not None:
            self._by_conversation.setdefault(conversation_uuid, []).append((listener, tenant))
        elif deltas:
            self._all.append((listener, tenant))
        else:
            self._quiet.append((listener, tenant))

    def unsubscribe(self, listener: Listener, conversation_uuid: str | None = None) -> None:
        """Stop calling ``listener``."""
        if conversation_uuid is None:
            for entries in (self._all, self._quiet):
                for entry in entries:
                    if entry[0] == listener:
                        entries.remove(entry)
                        return
            raise ValueError(f"{listener!r} is not subscribed")
        listeners = self._by_conversation.get(conversation_uuid, [])
        entry = next((e for e in listeners if e[0] == listener), None)
        if entry is None:
            raise ValueError(f"{listener!r} is not subscribed to {conversation_uuid}")
        listeners.remove(entry)
        if not listeners:
            self._by_conversation.pop(conversation_uuid, None)

    @property
    def active(self) -> bool:
        """Whether anyone listens at all (lets the loop skip building events)."""
        return bool(self._all or self._quiet or self._by_conversation)

    def wants_deltas(self, conversation_uuid: str, tenant: str | None = None) -> bool:
        """Whether anyone listening to this conversation (of ``tenant``) wants streamed deltas."""
        by_uuid = self._by_conversation.get(conversation_uuid, ())
        if any(only is None or only == tenant for _, only in by_uuid):
            return True
        return any(only is None or only == tenant for _, only in self._all)

    async def emit(
        self, event: TurnEvent, extra: Listener | None = None, tenant: str | None = None
    ) -> None:
        """Deliver ``event`` (of a turn of ``tenant``) to its subscribers and to ``extra``.

        A failing listener is logged and skipped: a broken subscriber must not
        break the turn it watches.
        """
        if self._all or self._quiet or self._by_conversation:
            listeners = [listener for listener, only in self._all if only is None or only == tenant]
            listeners.extend(
                listener
                for listener, only in self._by_conversation.get(event.conversation_uuid, ())
                if only is None or only == tenant
            )
            if not isinstance(event, TextDelta | ThinkingDelta):
                listeners.extend(
                    listener for listener, only in self._quiet if only is None or only == tenant
                )
            if extra is not None:
                listeners.append(extra)
        else:
            # No subscriber (the usual case, once per streamed delta): the
            # turn's own listener only, without filtering three empty lists.
            listeners = [extra] if extra is not None else []
        for listener in listeners:
            try:
                outcome = listener(event)
                if outcome is not None:
                    await outcome
            except Exception:
                logger.exception("turn event listener %r failed; event dropped for it", listener)
