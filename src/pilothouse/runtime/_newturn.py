"""A new turn's checked input, and the stored history as chat memory."""

from __future__ import annotations

__all__ = ["NewTurn", "activated_skills", "memory_messages"]

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from pilothouse.catalog._enums import MessageRole
from pilothouse.memory import MemoryMessage, TokenCounter
from pilothouse.runtime._compile import CompiledAction
from pilothouse.runtime._config import RuntimeConfig
from pilothouse.store._writer import NewAttachment, NewMessage, TurnBatch


@dataclass(frozen=True)
class NewTurn:
    """A new turn's checked input: what its first step writes and its body runs."""

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

    def first(self) -> TurnBatch:
        """The turn's first step: the user's message."""
        user = NewMessage(
            MessageRole.USER,
            self.text,
            token_count=self.counter.count(self.text),
            attachments=tuple(self.attachments),
            # Kept so a turn resumed later (answers, tool results) can fill
            # the prompt's placeholders again.
            data={"input_data": dict(self.input_data)} if self.input_data else None,
        )
        return TurnBatch(messages=[user])


def memory_messages(rows: Iterable[Any]) -> list[MemoryMessage]:
    """Stored messages as chat memory: rejected structured answers and system messages are not."""
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
