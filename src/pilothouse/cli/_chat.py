"""``pilothouse chat``: one conversation, turn by turn, in the terminal.

Ctrl-C is the user's way to stop an answer that runs on: it must stop the
turn, not the program. SIGINT is taken over for the session; during a turn
it cancels the turn through the API (the conversation is recorded ``TE``
with what was written so far) and the next message continues the same
conversation; at the prompt it ends the session, as Ctrl-D does.
"""

from __future__ import annotations

__all__ = ["ChatSession"]

import os
import signal
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
from rich.console import Console

from pilothouse.cli._run import run_turn, show_summary
from pilothouse.errors import PilothouseError
from pilothouse.types import ProcessStatus, SchemaDirection

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.types import TurnResult


LAST = "last"
"""``ChatSession.resume`` for the newest conversation of the action."""


@dataclass(frozen=True)
class _Asked:
    """A question of the model's, as the chat asks it."""

    id: str
    question: str
    choices: tuple[str, ...]


def _asked(result: TurnResult) -> tuple[_Asked, ...]:
    if result.status is not ProcessStatus.WAITING:
        return ()
    return tuple(_Asked(q.id, q.question, q.choices) for q in result.questions)


class _Lines:
    """Lines read from a file descriptor without blocking the event loop.

    Waiting for input must be cancellable (Ctrl-C at the prompt ends the
    session): a thread blocked in ``readline`` would hold the process open.
    Reading the descriptor directly also sidesteps Python's own buffering,
    which would hide lines already read from the readiness check. Input
    redirected from a file or ``/dev/null`` cannot be polled (epoll refuses
    such descriptors) and never blocks: it is read directly.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False
        self._pollable = True

    async def readline(self) -> str | None:
        while b"\n" not in self._buffer and not self._eof:
            if self._pollable:
                try:
                    await anyio.wait_readable(self._fd)
                except PermissionError:
                    self._pollable = False
            chunk = os.read(self._fd, 4096)
            self._eof = not chunk
            self._buffer += chunk
        if not self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace")


@dataclass
class ChatSession:
    """A chat in the terminal: prompts, turns, inline questions, Ctrl-C.

    Attributes:
        action: the action's code.
        agent: the agent's code.
        memory_id: shared chat memory, if any.
        resume: ``"last"`` for the newest conversation of the action (and
            agent), a conversation's uuid, or None for a new conversation.
        config: the runtime config of every turn.
        input_data: the prompt's placeholder values, every turn.
        out: where answers go (stdout).
        err: where prompts, status lines and errors go (stderr).
    """

    action: str
    agent: str | None
    memory_id: str | None
    resume: str | None
    config: dict[str, Any]
    input_data: dict[str, Any]
    out: Console
    err: Console
    _turn_scope: anyio.CancelScope | None = field(default=None, init=False)
    _lines: _Lines = field(default_factory=lambda: _Lines(sys.stdin.fileno()), init=False)
    _interrupted: bool = field(default=False, init=False)

    async def run(self, ph: Pilothouse) -> None:
        """Hold the session until an empty line, /exit, Ctrl-D or Ctrl-C at the prompt."""
        # Bad input data or config is refused before a conversation exists.
        await ph.command.check_message(
            "",
            action=self.action,
            agent=self.agent,
            input_data=self.input_data or None,
            runtime_config=self.config or None,
        )
        uuid, pending = await self._conversation(ph)
        found = await ph.query.find_action_by_code(self.action)
        structured = found is not None and any(
            s.direction is SchemaDirection.OUTPUT for s in found.schemas
        )
        self.err.print(f"conversation {uuid}; empty line or /exit to end, Ctrl-C stops an answer")
        async with anyio.create_task_group() as group:
            prompt_scope = anyio.CancelScope()
            # Started (the handler installed) before the first prompt shows.
            await group.start(self._watch_interrupts, ph, uuid, prompt_scope)
            with prompt_scope:
                await self._loop(ph, uuid, structured, pending)
            group.cancel_scope.cancel()

    async def _conversation(self, ph: Pilothouse) -> tuple[str, tuple[_Asked, ...]]:
        """The conversation to talk in, and the questions it still waits on."""
        if self.resume is None:
            started = await ph.command.start_conversation(
                action=self.action, agent=self.agent, memory_id=self.memory_id
            )
            return started.uuid, ()
        if self.resume == LAST:
            page = await ph.query.list_conversations(action=self.action, agent=self.agent, limit=1)
            if not page.items:
                raise PilothouseError(
                    f"no conversation of action {self.action} to continue; leave out --continue "
                    "to start one"
                )
            uuid = page.items[0].uuid
        else:
            uuid = self.resume
        conversation = await ph.query.get_conversation(uuid)
        if conversation.action_code != self.action:
            raise PilothouseError(
                f"conversation {uuid} is of action {conversation.action_code}, not "
                f"{self.action}: run pilothouse chat {conversation.action_code} "
                f"--conversation {uuid}"
            )
        messages = await ph.query.get_conversation_messages(uuid)
        self.err.print(f"continuing conversation {uuid} ({len(messages)} messages recorded)")
        pending = await ph.query.get_pending_questions(uuid)
        return uuid, tuple(
            _Asked(
                str((m.data or {}).get("question_id")),
                m.content,
                tuple(str(c) for c in (m.data or {}).get("choices") or ()),
            )
            for m in pending
        )

    async def _loop(
        self, ph: Pilothouse, uuid: str, structured: bool, pending: tuple[_Asked, ...]
    ) -> None:
        if pending and not await self._answer(ph, uuid, pending, structured):
            return
        while True:
            text = await self._ask("[bold cyan]you>[/] ")
            if text is None or not text.strip() or text.strip() == "/exit":
                return
            result = await self._turn(ph, uuid, text.strip(), structured)
            if _asked(result):
                if not await self._answer(ph, uuid, _asked(result), structured):
                    return
                continue
            show_summary(result, self.err)
            if result.status is ProcessStatus.FAILED:
                return

    async def _answer(
        self, ph: Pilothouse, uuid: str, questions: tuple[_Asked, ...], structured: bool
    ) -> bool:
        """Ask the model's questions inline until it stops asking; False at end of input."""
        while questions:
            answers: dict[str, str] = {}
            for question in questions:
                choices = f" ({' / '.join(question.choices)})" if question.choices else ""
                answer = await self._ask(
                    f"[bold magenta]model asks>[/] {question.question}{choices}\n"
                    "[bold cyan]answer>[/] "
                )
                if answer is None:
                    return False
                answers[question.id] = answer.strip()
            try:
                # The answer streams, with the tools it calls, as a turn does.
                result = await run_turn(
                    ph,
                    uuid,
                    answers,
                    input_data=self.input_data,
                    config=self.config,
                    out=self.out,
                    structured=structured,
                    err=self.err,
                    questions_inline=True,
                )
            except PilothouseError as exc:
                self.err.print(f"[red]error:[/] {exc}")
                continue
            questions = _asked(result)
            if not questions:
                show_summary(result, self.err)
        return True

    async def _turn(self, ph: Pilothouse, uuid: str, text: str, structured: bool) -> TurnResult:
        self._interrupted = False
        with anyio.CancelScope() as scope:
            self._turn_scope = scope
            try:
                return await run_turn(
                    ph,
                    uuid,
                    text,
                    input_data=self.input_data,
                    config=self.config,
                    out=self.out,
                    structured=structured,
                    err=self.err,
                    questions_inline=True,
                )
            finally:
                self._turn_scope = None
        # Only a Ctrl-C the turn did not see through its own cancel ends here.
        raise PilothouseError("the turn was interrupted")  # pragma: no cover

    async def _ask(self, prompt: str) -> str | None:
        """One line from stdin (None at end of input); the wait can be cancelled."""
        self.err.print(prompt, end="")
        return await self._lines.readline()

    async def _watch_interrupts(
        self,
        ph: Pilothouse,
        uuid: str,
        prompt_scope: anyio.CancelScope,
        *,
        task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                if self._turn_scope is not None and not self._interrupted:
                    # The runner stops the turn and records it TE with the
                    # partial answer; the stream then ends with that result.
                    self._interrupted = True
                    self.err.print("\n[yellow]stopping the answer…[/]")
                    await ph.command.cancel(uuid)
                else:
                    self.err.print()
                    prompt_scope.cancel()
                    return
