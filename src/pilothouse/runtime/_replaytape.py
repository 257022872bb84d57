"""A replay's tape: the recorded tool results a replayed turn is answered from.

A replay runs a recorded case through the normal run loop with a changed
target. While :func:`replaying` is active (a context variable, so it reaches
the turn's tasks and no other request), the tool executor answers each tool
call from the first unused recorded call with the same tool and equal
arguments, and never runs the tool. A call that matches nothing is a
divergence: it is reported, and answered with an error unless the tool is
one the replay lets run live and its catalog entry marks it read-only
(``settings.read_only: true``): a tool that may change something never runs
in a replay. A replay's model calls hold nothing on the tenant's budgets
unless the replay asks for it.
"""

from __future__ import annotations

__all__ = ["Divergence", "ReplayTape", "TapeCall", "current_tape", "replaying"]

import json
from collections.abc import Generator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TapeCall:
    """One recorded call: tool name, arguments, result."""

    name: str
    arguments: Mapping[str, Any]
    result: str | None


@dataclass(frozen=True)
class Divergence:
    """A tool call of the replay that the recording does not have.

    Attributes:
        tool: the tool the replayed model called.
        arguments: the arguments it gave.
        expected: the recorded arguments of the same tool not yet used
            (empty when the recording never called this tool).
        live: whether the tool then ran live (in ``live_tools`` and read-only).
    """

    tool: str
    arguments: Mapping[str, Any]
    expected: tuple[Mapping[str, Any], ...]
    live: bool


def _same(left: Mapping[str, Any], right: Mapping[str, Any]) -> bool:
    return json.dumps(left, sort_keys=True, default=str) == json.dumps(
        right, sort_keys=True, default=str
    )


@dataclass
class ReplayTape:
    """What one replayed case answers tool calls from, and what it saw.

    Attributes:
        calls: the recorded calls, in order.
        live_tools: tools that run live when a call does not match.
        model: a catalog model code to run instead of the action's.
        configuration: a catalog configuration code whose options replace
            the action's.
        count_budgets: hold the replay's model calls on the tenant's budgets.
        answered: calls answered from the recording.
        divergences: calls the recording did not have.
        called: every tool call of the replay, in order, as ``(tool, arguments)``.
    """

    calls: Sequence[TapeCall] = ()
    live_tools: frozenset[str] = frozenset()
    model: str | None = None
    configuration: str | None = None
    count_budgets: bool = False
    answered: int = 0
    divergences: list[Divergence] = field(default_factory=lambda: [])
    called: list[tuple[str, dict[str, Any]]] = field(default_factory=lambda: [])
    _used: set[int] = field(default_factory=lambda: set())

    def runs_live(self, tool: str, *, read_only: bool) -> bool:
        """Whether a call the recording lacks runs for real: named live, and read-only."""
        return read_only and tool in self.live_tools

    def answer(
        self, tool: str, arguments: Mapping[str, Any], *, read_only: bool = False
    ) -> str | None:
        """Return the recorded result for this call, or None (a divergence, recorded).

        Args:
            tool: the tool called.
            arguments: its arguments.
            read_only: whether the tool is marked read-only (then, named in
                ``live_tools``, a divergent call runs live).
        """
        self.called.append((tool, dict(arguments)))
        for index, call in enumerate(self.calls):
            if index in self._used or call.name != tool or not _same(call.arguments, arguments):
                continue
            self._used.add(index)
            self.answered += 1
            return call.result if call.result is not None else ""
        expected = tuple(
            c.arguments for i, c in enumerate(self.calls) if i not in self._used and c.name == tool
        )
        self.divergences.append(
            Divergence(
                tool, dict(arguments), expected, live=self.runs_live(tool, read_only=read_only)
            )
        )
        return None


_TAPE: ContextVar[ReplayTape | None] = ContextVar("pilothouse_replay_tape", default=None)


def current_tape() -> ReplayTape | None:
    """The tape of the replay running in this context, or None."""
    return _TAPE.get()


@contextmanager
def replaying(tape: ReplayTape) -> Generator[ReplayTape]:
    """Run the turns started inside the block as a replay answered from ``tape``."""
    token = _TAPE.set(tape)
    try:
        yield tape
    finally:
        _TAPE.reset(token)
