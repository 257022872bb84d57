"""One turn's state, and the steps it goes through.

A turn is a small state machine (driven by :meth:`Runner._steps
<pilothouse.runtime.Runner>`): it opens with :class:`Prompt` (a new message)
or :class:`Resume` (answers or tool results), then alternates
:class:`CallModel` and :class:`RunTools`, each step returning the next,
until an ending: :class:`Answered`, :class:`Paused` (questions for the
user), :class:`Returned` (calls for the caller), :class:`Failed` or
:class:`Blocked`. The :class:`~pilothouse.runtime._record.TurnRecorder`
writes the ending. What the steps share lives in :class:`Turn`.

How the turn takes its conversation is typed too: :class:`NewConversation`
(written with the turn's first step) or :class:`TakeConversation`.
"""

from __future__ import annotations

__all__ = [
    "Answered",
    "Blocked",
    "CallModel",
    "Ending",
    "Failed",
    "NewConversation",
    "NewTurn",
    "Opening",
    "Paused",
    "Prompt",
    "Resume",
    "Returned",
    "RunTools",
    "Step",
    "TakeConversation",
    "ToolReply",
    "Turn",
    "activated_skills",
    "mark_lazy_start",
    "memory_messages",
    "unseen_until_second_write",
]

import uuid as uuid_module
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from pydantic_ai.messages import ModelMessage, ModelResponse

from pilothouse._caller import Caller
from pilothouse.catalog._enums import MessageRole, ProcessStatus, ToolCallStatus
from pilothouse.memory import MemoryMessage, TokenCounter
from pilothouse.runtime._advisors import ContentBlocked
from pilothouse.runtime._compile import CompiledAction
from pilothouse.runtime._config import RuntimeConfig
from pilothouse.runtime._convert import ParsedResponse
from pilothouse.runtime._events import (
    AnswerSource,
    Listener,
    Question,
    ReturnedCall,
    ToolCallRecord,
)
from pilothouse.runtime._repair import CallProblem, RepairedCall
from pilothouse.runtime._toolset import ToolSet
from pilothouse.store import (
    NewAttachment,
    NewEvent,
    NewMessage,
    NewProcessed,
    StoredMessage,
    ToolCallOutcome,
    TurnBatch,
    TurnHandle,
    Usage,
)

if TYPE_CHECKING:
    from pydantic_ai.models import Model
    from sqlalchemy import Connection

    from pilothouse.providers import ModelOptions
    from pilothouse.runtime._toolexec import ToolExecutor

_MILLION = Decimal(1_000_000)


@dataclass(frozen=True)
class NewTurn:
    """A new turn's checked input: what its first step writes and its prompt holds."""

    action_code: str
    agent_code: str | None
    text: str
    attachments: Sequence[NewAttachment]
    input_data: Mapping[str, Any] | None
    runtime_config: Mapping[str, Any] | None
    compiled: CompiledAction
    config: RuntimeConfig
    system_prompt: str
    counter: TokenCounter
    caller: Caller | None = None

    def first(self, *, record_prompt: bool = False) -> TurnBatch:
        """The turn's first step: the user's message, after the system prompt when asked.

        Args:
            record_prompt: record the assembled system prompt as an ``SY``
                message first (what the model is told, for the audit).
        """
        messages: list[NewMessage] = []
        if record_prompt and self.system_prompt:
            messages.append(
                NewMessage(
                    MessageRole.SYSTEM,
                    self.system_prompt,
                    token_count=self.counter.count(self.system_prompt),
                    data={"system_prompt": True, "catalog_revision": self.compiled.revision},
                )
            )
        user = NewMessage(
            MessageRole.USER,
            self.text,
            token_count=self.counter.count(self.text),
            attachments=tuple(self.attachments),
            # Kept so a turn resumed later (answers, tool results) can fill
            # the prompt's placeholders again.
            data=self._message_data(),
        )
        messages.append(user)
        return TurnBatch(messages=messages)

    def _message_data(self) -> dict[str, Any] | None:
        data: dict[str, Any] = {}
        if self.input_data:
            data["input_data"] = dict(self.input_data)
        if self.config.end_user is not None:
            data["end_user"] = self.config.end_user
        if self.config.retrieval.collections:
            # The audit shows which collections this message asked for.
            data["retrieval"] = {"collections": list(self.config.retrieval.collections)}
        if self.caller is not None:
            # Who sent this message: a later turn may come through another
            # face or key than the one that started the conversation.
            data["caller"] = self.caller.as_data()
        return data or None


# How a turn takes its conversation.


@dataclass(frozen=True, slots=True)
class NewConversation:
    """Write a new conversation already taken by the turn, with its first step."""

    uuid: str
    action_code: str
    agent_code: str | None
    first: TurnBatch
    memory_id: str | None
    audit: bool | None
    default_audit: bool
    caller: Caller | None = None
    read_memory: bool = True
    """Read the messages of a shared memory with the start (False: read already)."""


@dataclass(frozen=True, slots=True)
class TakeConversation:
    """Take an existing conversation from one of the ``allowed`` statuses."""

    uuid: str
    allowed: frozenset[ProcessStatus]
    first: TurnBatch | None = None
    read_memory: bool = False
    arrived: float | None = None
    """``time.monotonic()`` when the turn's message arrived: a cancel recorded
    after it (by another process, while this one prepared the turn) ends the
    turn before its model call."""


Opening = NewConversation | TakeConversation


@dataclass
class ModelCalls:
    """What every model call of one turn shares, set up at its first call."""

    model: Model
    options: ModelOptions
    settings: Any
    executor: ToolExecutor


@dataclass
class Turn:
    """The state of one running turn, shared by its steps.

    Attributes:
        handle: the turn's hold on its conversation (store side).
        compiled: the action it runs.
        config: the per-call runtime config.
        listener: the caller's listener for this turn's events.
        run_id: names the turn in its AI-generated markers.
        pending: audit events not yet written; the next write takes them.
        memory_text: the user's text a ``SCOPED`` memory retrieved for (and
            stores with the answer).
        resumed: the turn goes on after a human answer or a tool result.
        partial: the text the model call in flight streamed so far (recorded
            if the turn is cancelled); each call starts it anew.
        active_skills: skills activated in the conversation so far.
        offers_tools: whether the current model call offers tools.
        calls: the model, settings and tool executor, from the first call on
            (which also sets the two retry budgets below).
        tool_rounds: rounds of tool calls so far.
        repairs_left: rounds of only unrepairable calls still allowed.
        output_retries_left: answers off the output schema still allowed.
        records: the tool calls of this turn and their outcomes.
        wire_repairs: repairs the wire layer made to the last model
            response's calls, by call id.
        sources: the numbered chunks retrieval gave the model (``[1]`` first).
        skill_offer: the skills ``use_skill`` offers this turn, best match
            first (None: all of them; an action with few skills).
        requested_model: the model the turn asked for, once a ``downgrade``
            budget switched it to a cheaper one.
        settles: budget settles not yet written; the next write runs them in
            its own transaction.
        after_write: what to do once that write has committed (announce the
            budget thresholds its settles crossed).
        started: set while the turn's start statement is still in flight
            (a new conversation on PostgreSQL, see ``_opening``): every
            write waits for it first, and it puts the real handle in place.
        start_with: set while that statement is held back for the first
            model call's budget hold to ride on: sends it with the given
            ledger work in its transaction and says whether it carried it.
    """

    handle: TurnHandle
    compiled: CompiledAction
    config: RuntimeConfig
    listener: Listener | None
    run_id: str = field(default_factory=lambda: str(uuid_module.uuid4()))
    pending: list[NewEvent] = field(default_factory=lambda: [])
    memory_text: str = ""
    resumed: bool = False
    partial: list[str] = field(default_factory=lambda: [])
    active_skills: set[str] = field(default_factory=lambda: set[str]())
    offers_tools: bool = False
    calls: ModelCalls | None = None
    tool_rounds: int = 0
    repairs_left: int = 0
    output_retries_left: int = 0
    records: list[ToolCallRecord] = field(default_factory=lambda: [])
    wire_repairs: dict[str, list[str]] = field(default_factory=lambda: {})
    sources: tuple[AnswerSource, ...] = ()
    skill_offer: tuple[str, ...] | None = None
    requested_model: str | None = None
    settles: list[Callable[[Connection], None]] = field(default_factory=lambda: [])
    after_write: list[Callable[[], Awaitable[None]]] = field(default_factory=lambda: [])
    started: Callable[[], Awaitable[object]] | None = None
    start_with: Callable[[Callable[[Connection], None] | None], Awaitable[bool]] | None = None
    # Usage not yet written (reset by every write) ...
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cost: Decimal = Decimal(0)
    # ... and what the whole turn used.
    turn_input: int = 0
    turn_output: int = 0
    turn_cost: Decimal = Decimal(0)
    # Whether some of the turn's usage was counted by pilothouse, not
    # reported by the provider (a server that reports none, a stopped call).
    usage_estimated: bool = False
    # The model id the provider's stream named (its answer's own), for the
    # marker of an answer stopped before the response was complete.
    answered_by: str | None = None
    # The output tokens counted for the call a cancel stopped: its
    # interrupted text's token_count, as an answer's is its call's.
    partial_tokens: int | None = None
    # The tool step a cancel stopped: the answer with its calls and what
    # they did, written with the turn's TE (see _toolstep._interrupted_step).
    interrupted: TurnBatch | None = None
    # The API key the turn's message came with (budgets scoped to keys), and
    # whether the turn was counted against budgets' turn limits yet.
    key_prefix: str | None = None
    budget_counted: bool = False

    @property
    def uuid(self) -> str:
        """The conversation's uuid."""
        return self.handle.uuid

    @property
    def tenant(self) -> str:
        """The conversation's tenant."""
        return self.handle.tenant

    def add_usage(self, response: ModelResponse) -> None:
        """Count a response's tokens and cost for the turn."""
        usage = response.usage
        spec = self.compiled.model
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.turn_input += usage.input_tokens
        self.turn_output += usage.output_tokens
        self.cached_tokens += usage.cache_read_tokens
        self.reasoning_tokens += int(usage.details.get("reasoning_tokens", 0))
        cost = Decimal(0)
        if spec.input_price is not None:
            cost += Decimal(usage.input_tokens) * spec.input_price / _MILLION
        if spec.output_price is not None:
            cost += Decimal(usage.output_tokens) * spec.output_price / _MILLION
        self.cost += cost
        self.turn_cost += cost

    def take_usage(self) -> Usage:
        """Usage not yet written, for the next batch; resets it."""
        usage = Usage(
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            cached_tokens=self.cached_tokens,
            reasoning_tokens=self.reasoning_tokens,
            estimated_cost=self.cost,
        )
        # Usage is counted once: whatever a batch wrote is not written again.
        self.input_tokens = self.output_tokens = self.cached_tokens = self.reasoning_tokens = 0
        self.cost = Decimal(0)
        return usage

    def take_pending(self) -> list[NewEvent]:
        """Audit events not yet written, for the next batch; clears them."""
        pending, self.pending = self.pending, []
        return pending


# The steps. Each is handled by one method and returns the next step.


@dataclass(frozen=True, slots=True)
class Prompt:
    """A new message: check the compiled action is current, assemble the request.

    ``checked``: the compilation is known current (compiled for this turn,
    or an ad-hoc action); otherwise it is checked against the catalog
    revision read when the turn started.
    """

    new: NewTurn
    checked: bool


@dataclass(frozen=True, slots=True)
class ToolReply:
    """The answer to a pending call: a person's answers, or a caller's result."""

    call_id: str
    tool_name: str
    content: str
    status: ToolCallStatus = ToolCallStatus.SUCCEEDED
    words: str = ""
    """The reply as the user would say it (a person's answers), for models
    that read tool results best as text; empty for a caller's result."""


@dataclass(frozen=True, slots=True)
class Resume:
    """Record replies to pending calls, then continue from the stored history.

    With calls of the caller's ``still_pending``, the turn ends waiting for
    them (``WA`` when ``waiting``: some of them are on the event bus).
    ``processed`` marks event completions applied with the replies.
    ``caller`` is who gave the replies, when known: the continued turn's
    model calls are charged to its API key, as a new message's are.
    """

    replies: tuple[ToolReply, ...]
    event: NewEvent
    still_pending: tuple[ReturnedCall, ...] = ()
    waiting: bool = False
    processed: tuple[NewProcessed, ...] = ()
    caller: Caller | None = None

    def batch(self) -> TurnBatch:
        """What resuming records: the event, the replies and their calls' outcomes."""
        batch = TurnBatch(events=[self.event], processed=list(self.processed))
        for reply in self.replies:
            batch.messages.append(
                NewMessage(
                    MessageRole.TOOL,
                    reply.content,
                    tool_call_id=reply.call_id,
                    data={"tool_name": reply.tool_name},
                )
            )
            batch.outcomes.append(ToolCallOutcome(reply.call_id, reply.status, reply.content))
        return batch


@dataclass(frozen=True, slots=True)
class CallModel:
    """Call the model with ``messages``; ``force_text`` offers no tools.

    ``withhold`` names tools not offered in this one call: the call right
    after the user's answers does not offer ``AskUserQuestion``, because a
    small model given the answers otherwise asks the same question again.
    """

    messages: list[ModelMessage]
    force_text: bool = False
    withhold: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class RunTools:
    """Run the (repaired) calls of a response and record the round."""

    messages: list[ModelMessage]
    response: ModelResponse
    text: str
    calls: list[RepairedCall]
    problems: list[CallProblem]
    toolset: ToolSet


# Endings: the TurnRecorder writes each one and returns the turn's result.


@dataclass(frozen=True, slots=True)
class Answered:
    """The model answered (text, or output that matches the schema): ``CO``."""

    response: ModelResponse
    parsed: ParsedResponse
    output: Any


@dataclass(frozen=True, slots=True)
class Paused:
    """The model asked the user: ``WA`` until the answers come."""

    response_model: str | None
    batch: TurnBatch
    questions: tuple[Question, ...]


@dataclass(frozen=True, slots=True)
class Returned:
    """Calls of custom-schema tools go back to the caller: ``CO``, finish reason ``TC``.

    ``response_model`` None leaves the conversation's as it is (a resumed
    turn still waiting for results made no model call). With ``waiting``
    (calls of event tools are among them, in the batch's outbox) the
    conversation is ``WA`` instead, until the bus answers.
    """

    response_model: str | None
    batch: TurnBatch
    calls: tuple[ReturnedCall, ...]
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class Failed:
    """The turn failed: ``FA`` with the detail."""

    detail: str


@dataclass(frozen=True, slots=True)
class Blocked:
    """A content filter refused the input or the answer: ``CO``, finish reason ``CF``."""

    blocked: ContentBlocked


Ending = Answered | Paused | Returned | Failed | Blocked
Step = Prompt | Resume | CallModel | RunTools | Ending


def memory_messages(rows: Iterable[StoredMessage]) -> list[MemoryMessage]:
    """Stored messages as chat memory: rejected structured answers and system messages are not.

    A memory cleared explicitly (a system message marked ``memory_cleared``)
    starts after its last marker.
    """
    rows = list(rows)
    for index in range(len(rows) - 1, -1, -1):
        row = rows[index]
        if row.role is MessageRole.SYSTEM and row.data and row.data.get("memory_cleared"):
            rows = rows[index + 1 :]
            break
    return [
        MemoryMessage(
            role=row.role,
            content=row.content,
            tool_call_id=row.tool_call_id,
            data=row.data,
            token_count=row.token_count,
        )
        for row in rows
        if row.role is not MessageRole.SYSTEM and not _rejected(row.data)
    ]


def _rejected(data: Mapping[str, Any] | None) -> bool:
    return bool(data and data.get("invalid_output"))


def activated_skills(history: Sequence[MemoryMessage]) -> set[str]:
    """Skills activated earlier in the conversation stay active (progressive disclosure)."""
    active: set[str] = set()
    for message in history:
        codes = (message.data or {}).get("activated")
        if message.role is MessageRole.TOOL and isinstance(codes, list):
            active.update(str(code) for code in cast("list[Any]", codes))
    return active


def unseen_until_second_write(first: Step, compiled: CompiledAction, watched: bool) -> bool:
    """Whether nothing of a turn reaches anyone, nor runs a tool, before its second write.

    A new message (not a resumed call) to an action that runs no tool, which
    nobody streams (``watched``): its model call is all that happens before
    the next write (the answer, a pause, a call returned, a failure, a cancel).
    """
    return isinstance(first, Prompt) and not watched and not compiled.runs_tools


def mark_lazy_start(batch: TurnBatch, first: Step, compiled: CompiledAction, watched: bool) -> None:
    """Let a turn's first write commit without waiting for the disk, when nothing depends on it.

    Called only when the operator chose it (``Settings.database_lazy_start``):
    the turn's next write waits for the log's flush, this one's with it.
    ``watched``: a listener or a stream sees the turn while it runs.
    """
    if unseen_until_second_write(first, compiled, watched):
        batch.durable_with_next = True
