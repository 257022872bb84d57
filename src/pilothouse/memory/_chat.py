"""Chat memory: which stored messages a turn sends to the model.

The run loop calls :func:`select_history` once per turn with the
conversation's messages (oldest first) and the action's memory policy. The
function is pure and cheap: it counts tokens only when a budget is set, walks
from the newest message backwards and stops as soon as a limit is reached, so
its cost follows what is kept, not the length of the conversation.

Messages are grouped before any cut: an assistant message that requested tool
calls and the tool results answering it form one group, kept or dropped
whole, because every provider rejects a tool result whose request is missing
(and most reject a request whose results are missing).
"""

from __future__ import annotations

__all__ = ["NO_MEMORY", "MemoryMessage", "MemoryPolicy", "message_tokens", "select_history"]

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pilothouse.catalog._enums import MemoryKind, MessageRole
from pilothouse.catalog._memsettings import ScopedMemorySettings
from pilothouse.memory._tokens import MESSAGE_OVERHEAD_TOKENS, TokenCounter

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MemoryMessage:
    """One stored message of a conversation's history.

    Attributes:
        role: who the message is from.
        content: the message text.
        tool_call_id: on a tool (``TO``) message, the id of the call it answers.
        data: structured extras; on an assistant message that requested tool
            calls, ``{"tool_calls": [{"id", "name", "arguments"}, ...]}``.
        token_count: the content's token count when already known (e.g. stored
            with the message); saves counting it again. Excludes the
            per-message overhead.
    """

    role: MessageRole
    content: str
    tool_call_id: str | None = None
    data: Mapping[str, Any] | None = None
    token_count: int | None = None

    @property
    def tool_calls(self) -> Sequence[Mapping[str, Any]]:
        """The tool calls this message requested (empty unless an assistant asked for tools)."""
        if self.data is None:
            return ()
        calls = self.data.get("tool_calls")
        if not isinstance(calls, Sequence) or isinstance(calls, str | bytes):
            return ()
        return cast("Sequence[Mapping[str, Any]]", calls)


@dataclass(frozen=True, slots=True)
class MemoryPolicy:
    """How much history a turn sees.

    Attributes:
        kind: ``FULL`` keeps every message; ``WINDOW`` keeps the last ``window``;
            ``SCOPED`` keeps the last ``window`` and adds retrieved memories.
        window: the number of messages ``WINDOW`` keeps (at least 1).
        token_budget: when set, the oldest messages are dropped until the
            system prompt and the kept history fit in this many tokens.
        remember: False for an action without a memory strategy (seed 000:
            "absent means no memory"): a turn sees only its own messages
            (from its user message on), never earlier turns.
    """

    kind: MemoryKind = MemoryKind.WINDOW
    window: int = 20
    token_budget: int | None = None
    remember: bool = True
    scoped: ScopedMemorySettings | None = None
    """A ``SCOPED`` strategy's settings (its chat history is kept as ``WINDOW``)."""

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"window: must be at least 1, got {self.window}")
        if self.token_budget is not None and self.token_budget < 1:
            raise ValueError(f"token_budget: must be at least 1, got {self.token_budget}")


NO_MEMORY = MemoryPolicy(remember=False)
"""The policy of an action without a memory strategy: no earlier turns."""


def _replayed(message: MemoryMessage) -> bool:
    return bool(message.data and message.data.get("replayed"))


def _current_turn(history: Sequence[MemoryMessage]) -> tuple[int, int]:
    """Return where the current turn starts and where the history a client sent starts.

    The current turn starts at the newest user message (a resumed turn has
    its tool calls and results after it). A chat client's own history
    (replayed messages, marked ``{"replayed": true}``) written right before
    it belongs to this turn's request, not to the server's memory.
    """
    current = next(
        (i for i in range(len(history) - 1, -1, -1) if history[i].role is MessageRole.USER),
        len(history) - 1,
    )
    start = current
    while start > 0 and _replayed(history[start - 1]):
        start -= 1
    return current, start


def message_tokens(message: MemoryMessage, counter: TokenCounter) -> int:
    """Return what ``message`` costs in a prompt: content, tool calls and overhead.

    Args:
        message: the message.
        counter: the model's token counter; not used when
            ``message.token_count`` is set.

    Returns:
        Content tokens (``token_count`` or counted) plus the tool calls' names
        and arguments plus :data:`MESSAGE_OVERHEAD_TOKENS`.
    """
    tokens = message.token_count
    if tokens is None:
        tokens = counter.count(message.content)
        for call in message.tool_calls:
            name = call.get("name")
            arguments = call.get("arguments")
            if isinstance(name, str):
                tokens += counter.count(name)
            if isinstance(arguments, str):
                tokens += counter.count(arguments)
            elif arguments is not None:
                tokens += counter.count(json.dumps(arguments, default=str))
    return tokens + MESSAGE_OVERHEAD_TOKENS


def _groups(history: Sequence[MemoryMessage]) -> list[tuple[int, int]]:
    """Split ``history`` into ``[start, end)`` ranges that must not be cut.

    A tool-requesting assistant message and the tool messages right after it
    form one range; every other message is a range of its own.
    """
    groups: list[tuple[int, int]] = []
    i = 0
    n = len(history)
    while i < n:
        end = i + 1
        if history[i].role is MessageRole.ASSISTANT and history[i].tool_calls:
            while end < n and history[end].role is MessageRole.TOOL:
                end += 1
        groups.append((i, end))
        i = end
    return groups


def select_history(
    history: Sequence[MemoryMessage],
    policy: MemoryPolicy,
    *,
    system_prompt: str,
    counter: TokenCounter,
) -> list[MemoryMessage]:
    """Return the messages a turn sends to the model, oldest first.

    Rules, in order:

    0. Without memory (``remember`` False) only the current turn is kept:
       the newest user message and what follows it, plus the history a chat
       client sent with this request (replayed messages right before it).
       With memory, that client history is kept whole too and the policy
       trims only older messages.
    1. ``FULL`` keeps all messages; ``WINDOW(n)`` keeps the last ``n``.
    2. An assistant message with tool calls and its tool results are kept or
       dropped together; when a window would split them, the group is
       dropped (the window then holds fewer than ``n`` messages).
    3. With a ``token_budget``, the oldest groups are dropped until the system
       prompt plus the kept messages (each with its overhead) fit.
    4. The kept history never starts with a tool message.
    5. The newest message (the current user input, with its group) is always
       kept, even when it alone breaks the window or the budget; when it does
       break the budget a warning is logged.

    The system prompt is not part of ``history``; it is always sent, and only
    counted here.

    Args:
        history: the stored messages, oldest first; the last one is the
            current input.
        policy: the action's memory policy.
        system_prompt: the assembled system prompt (counted against the budget).
        counter: the model's token counter.

    Returns:
        A new list with a suffix of ``history`` (by groups).
    """
    if not history:
        return []
    _, request_start = _current_turn(history)
    if not policy.remember:
        return list(history[request_start:])
    if request_start < len(history) - 1 and _replayed(history[request_start]):
        # The history the client sent with this request is its own choice of
        # memory: kept whole; the policy trims only older server memory.
        older = select_history(
            [*history[:request_start], history[-1]],
            policy,
            system_prompt=system_prompt,
            counter=counter,
        )[:-1]
        return [*older, *history[request_start:]]
    groups = _groups(history)
    max_messages = len(history) if policy.kind is MemoryKind.FULL else policy.window
    budget = policy.token_budget
    remaining_tokens = 0
    if budget is not None:
        system_tokens = (
            counter.count(system_prompt) + MESSAGE_OVERHEAD_TOKENS if system_prompt else 0
        )
        remaining_tokens = budget - system_tokens
        if remaining_tokens < 0:
            logger.warning(
                "system prompt (%d tokens) exceeds the token budget (%d); "
                "sending only the newest message",
                system_tokens,
                budget,
            )
            first = groups[-1][0]
            return list(history[first:])

    # Walk newest to oldest; the newest group is taken unconditionally.
    first = groups[-1][0]
    kept_messages = len(history) - first
    if budget is not None:
        remaining_tokens -= sum(message_tokens(m, counter) for m in history[first:])
        if remaining_tokens < 0:
            logger.warning(
                "newest message alone exceeds the token budget (%d); sending it anyway", budget
            )
    for start, end in reversed(groups[:-1]):
        size = end - start
        if kept_messages + size > max_messages:
            break
        if budget is not None:
            cost = sum(message_tokens(m, counter) for m in history[start:end])
            if cost > remaining_tokens:
                break
            remaining_tokens -= cost
        kept_messages += size
        first = start

    # A tool message can lead only if its request was never stored (an orphan):
    # drop such messages, but never the newest one.
    last = len(history) - 1
    while first < last and history[first].role is MessageRole.TOOL:
        first += 1
    return list(history[first:])
