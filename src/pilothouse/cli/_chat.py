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

from pilothouse.cli._run import run_turn, show_output, show_summary
from pilothouse.errors import PilothouseError
from pilothouse.types import ProcessStatus, SchemaDirection

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.types import TurnResult


class _Lines:
    """Lines read from a file descriptor without blocking the event loop.

    Waiting for input must be cancellable (Ctrl-C at the prompt ends the
    session): a thread blocked in ``readline`` would hold the process open.
    Reading the descriptor directly also sidesteps Python's own buffering,
    which would hide lines already read from the readiness check.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    async def readline(self) -> str | None:
        while b"\n" not in self._buffer and not self._eof:
            await anyio.wait_readable(self._fd)
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
        config: the runtime config of every turn.
        input_data: the prompt's placeholder values, every turn.
        out: where answers go (stdout).
        err: where prompts, status lines and errors go (stderr).
    """

    action: str
    agent: str | None
    memory_id: str | None
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
        conversation = await ph.command.start_conversation(
            action=self.action, agent=self.agent, memory_id=self.memory_id
        )
        found = await ph.query.find_action_by_code(self.action)
        structured = found is not None and any(
            s.direction is SchemaDirection.OUTPUT for s in found.schemas
        )
        self.err.print(
            f"conversation {conversation.uuid}; empty line or /exit to end, Ctrl-C stops an answer"
        )
        async with anyio.create_task_group() as group:
            prompt_scope = anyio.CancelScope()
            # Started (the handler installed) before the first prompt shows.
            await group.start(self._watch_interrupts, ph, conversation.uuid, prompt_scope)
            with prompt_scope:
                await self._loop(ph, conversation.uuid, structured)
            group.cancel_scope.cancel()

    async def _loop(self, ph: Pilothouse, uuid: str, structured: bool) -> None:
        while True:
            text = await self._ask("[bold cyan]you>[/] ")
            if text is None or not text.strip() or text.strip() == "/exit":
                return
            result = await self._turn(ph, uuid, text.strip(), structured)
            # The model's questions, answered inline until it stops asking.
            while result.status is ProcessStatus.WAITING and result.questions:
                answers: dict[str, str] = {}
                for question in result.questions:
                    choices = f" ({' / '.join(question.choices)})" if question.choices else ""
                    answer = await self._ask(
                        f"[bold magenta]model asks>[/] {question.question}{choices}\n"
                        "[bold cyan]answer>[/] "
                    )
                    if answer is None:
                        return
                    answers[question.id] = answer.strip()
                try:
                    result = await ph.command.submit_answers(uuid, answers)
                except PilothouseError as exc:
                    self.err.print(f"[red]error:[/] {exc}")
                    continue
                show_output(result, self.out, streamed=False)
            show_summary(result, self.err)
            if result.status is ProcessStatus.FAILED:
                return

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
