"""``pilothouse run`` and ``pilothouse chat``: run an action from the terminal.

The answer streams to stdout as the model writes it; status, tokens, cost and
(on request) the audit timeline follow on stderr, so stdout stays the answer.
"""

from __future__ import annotations

__all__ = ["chat", "parse_assignments", "run_action", "run_turn", "show_summary"]

import json
from collections.abc import Mapping
from contextlib import aclosing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pilothouse.cli._context import CliState, fail, open_facade, run
from pilothouse.types import SchemaDirection, cost_text

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.types import Action, TurnResult


def parse_assignments(pairs: list[str], option: str) -> dict[str, Any]:
    """Turn ``key=value`` pairs into a mapping; values are JSON when they parse.

    ``--set temperature=0.5`` gives a number, ``--set stop=END`` a string, and
    ``--input document=@brand.md`` the text of a file.
    """
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            fail(f"{option} {pair!r}: expected key=value")
        if raw.startswith("@"):
            try:
                values[key.strip()] = Path(raw[1:]).read_text(encoding="utf-8")
            except OSError as exc:
                fail(f"{option} {key.strip()}: cannot read {raw[1:]!r} ({exc.strerror})")
            continue
        try:
            # Any integer is read; the facade names one too large. (Imported here:
            # the CLI starts without the facade.)
            from pilothouse.api import loads_json

            values[key.strip()] = loads_json(raw, check=False)
        except json.JSONDecodeError:
            values[key.strip()] = raw
    return values


def _has_output_schema(action: Action | None) -> bool:
    return action is not None and any(
        schema.direction is SchemaDirection.OUTPUT for schema in action.schemas
    )


def show_summary(result: TurnResult, err: Console) -> None:
    """Print a turn's status, finish reason, tokens, cost and error on ``err``."""
    status = result.status
    finish = result.finish_reason.name.lower() if result.finish_reason else "-"
    err.print(
        f"[bold]{status.name.lower()}[/] ({status.value}) · finish {finish} · "
        f"tokens in {result.input_tokens} / out {result.output_tokens} · "
        f"cost {cost_text(result.cost)} · conversation {result.conversation_uuid}",
        soft_wrap=True,
    )
    if result.error:
        err.print(f"[red]error:[/] {result.error}")


async def _timeline(ph: Pilothouse, uuid: str, err: Console) -> None:
    transcript = await ph.query.get_transcript(uuid)
    table = Table(title="audit timeline", show_lines=False)
    for column in ("#", "kind", "at", "data"):
        table.add_column(column)
    for event in transcript.timeline:
        data = json.dumps(event.data, default=str)
        table.add_row(
            str(event.sequence),
            str(event.kind),
            event.created_at.strftime("%H:%M:%S.%f")[:-3],
            data if len(data) <= 110 else data[:107] + "...",
        )
    err.print(table)


async def run_turn(
    ph: Pilothouse,
    uuid: str,
    message: str | Mapping[str, str],
    *,
    input_data: dict[str, Any],
    config: dict[str, Any],
    out: Console,
    structured: bool,
    err: Console | None = None,
    questions_inline: bool = False,
) -> TurnResult:
    """Stream one turn's answer to ``out`` and return its result.

    ``message`` is the user's text, or the answers to the model's pending
    questions (``{question id: answer}``). A spinner on ``err`` runs while
    nothing shows; each tool call and its result are printed on ``err`` as
    they happen. With ``questions_inline`` the model's questions are left
    to the caller to ask, not printed as the output.
    """
    from pilothouse.types import TextDelta, ToolCallFinished, ToolCallRequested, TurnFinished

    notes = err or Console(stderr=True)
    result: TurnResult | None = None
    streamed = False
    # Until the first token (a local model may need seconds to start), a
    # spinner on stderr says the turn is under way; Rich shows nothing when
    # stderr is not a terminal.
    waiting = notes.status("[dim]thinking…[/]", spinner="dots")
    waiting.start()
    if isinstance(message, str):
        events = ph.command.stream_message(
            uuid, message, input_data=input_data or None, runtime_config=config or None
        )
    else:
        events = ph.command.stream_answers(uuid, message)
    try:
        async with aclosing(events):
            async for event in events:
                # Structured answers are shown once parsed and validated, not as
                # the raw JSON the model streams.
                if isinstance(event, TextDelta) and not structured:
                    waiting.stop()
                    streamed = True
                    out.print(event.text, end="", markup=False, highlight=False, soft_wrap=True)
                elif isinstance(event, ToolCallRequested):
                    waiting.stop()
                    _show_call(notes, event.name, event.arguments)
                    waiting.start()
                elif isinstance(event, ToolCallFinished):
                    waiting.stop()
                    _show_result(notes, event.name, event.result)
                    waiting.start()
                elif isinstance(event, TurnFinished):
                    result = event.result
    finally:
        waiting.stop()
    if result is None:  # pragma: no cover - the runner always finishes a turn
        raise RuntimeError("the turn ended without a result")
    if not (questions_inline and result.questions):
        show_output(result, out, streamed)
    return result


ASK_USER = "AskUserQuestion"
"""The built-in tool through which the model asks the user (asked inline, not shown)."""

_SHOWN_RESULT = 300
"""Characters of a tool's result shown in the terminal (the record keeps it whole)."""


def _show_call(err: Console, name: str, arguments: Mapping[str, Any]) -> None:
    if name == ASK_USER:
        return  # asked inline as a question, not shown as a call
    shown = json.dumps(arguments, ensure_ascii=False)
    err.print(f"[dim]→ tool {name}[/] {escape(shown)}", highlight=False, soft_wrap=True)


def _show_result(err: Console, name: str, result: str) -> None:
    if name == ASK_USER:
        return
    short = result if len(result) <= _SHOWN_RESULT else result[:_SHOWN_RESULT] + "…"
    err.print(f"[dim]← {name}:[/] {escape(short)}", highlight=False, soft_wrap=True)


def show_output(result: TurnResult, out: Console, streamed: bool) -> None:
    """Print a turn's answer when it was not streamed (structured output as JSON)."""
    if not streamed and result.output is not None:
        if isinstance(result.output, str):
            out.print(result.output, end="", markup=False, highlight=False, soft_wrap=True)
        else:
            out.print_json(data=result.output)
    out.print()
    # The summary goes to stderr; flush the answer first so they don't interleave.
    out.file.flush()


def run_action(
    ctx: typer.Context,
    action: Annotated[str, typer.Argument(help="The action's code, e.g. SUMBRAND.")],
    message: Annotated[str, typer.Argument(help="The user message.")],
    agent: Annotated[str | None, typer.Option("--agent", help="The agent's code.")] = None,
    memory_id: Annotated[
        str | None, typer.Option("--memory-id", help="Share chat memory across runs.")
    ] = None,
    settings: Annotated[
        list[str] | None,
        typer.Option("--set", help="Runtime config key=value (temperature=0.5, audit=false)."),
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option("--input", help="Input data key=value for the prompt's {placeholders}."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    timeline: Annotated[
        bool, typer.Option("--timeline", help="Print the audit timeline afterwards.")
    ] = False,
) -> None:
    """Run ACTION once on MESSAGE and stream the answer."""
    state: CliState = ctx.obj
    config = parse_assignments(settings or [], "--set")
    data = parse_assignments(inputs or [], "--input")
    out = Console(highlight=False)
    err = Console(stderr=True, highlight=False)

    async def body() -> int:
        async with open_facade(state) as ph:
            # Refuse bad input before a conversation exists, so it leaves none behind.
            await ph.command.check_message(
                message,
                action=action,
                agent=agent,
                input_data=data or None,
                runtime_config=config or None,
            )
            conversation = await ph.command.start_conversation(
                action=action, agent=agent, memory_id=memory_id
            )
            if as_json:
                result = await ph.command.send_message(
                    conversation.uuid,
                    message,
                    input_data=data or None,
                    runtime_config=config or None,
                )
                typer.echo(json.dumps(result.as_json(), ensure_ascii=False))
            else:
                found = await ph.query.find_action_by_code(action)
                result = await run_turn(
                    ph,
                    conversation.uuid,
                    message,
                    input_data=data,
                    config=config,
                    out=out,
                    structured=_has_output_schema(found),
                    err=err,
                )
                show_summary(result, err)
                if timeline:
                    await _timeline(ph, conversation.uuid, err)
            return 0 if result.error is None else 1

    code = run(body)
    if code:
        raise typer.Exit(code=code)


def chat(
    ctx: typer.Context,
    action: Annotated[str, typer.Argument(help="The action's code.")],
    agent: Annotated[str | None, typer.Option("--agent", help="The agent's code.")] = None,
    memory_id: Annotated[
        str | None, typer.Option("--memory-id", help="Share chat memory across sessions.")
    ] = None,
    settings: Annotated[
        list[str] | None, typer.Option("--set", help="Runtime config key=value.")
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            help="Input data key=value (or key=@file) for the prompt's {placeholders}, every turn.",
        ),
    ] = None,
    resume_last: Annotated[
        bool,
        typer.Option(
            "--continue", "-c", help="Continue the newest conversation of ACTION (and --agent)."
        ),
    ] = False,
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", help="Continue the conversation with this uuid."),
    ] = None,
) -> None:
    """Talk with ACTION turn by turn; an empty line, /exit or Ctrl-D ends the session.

    The model's questions are asked inline and the answers sent back. Ctrl-C
    during an answer stops that turn (recorded ``TE`` with what was written)
    and the session goes on in the same conversation; Ctrl-C at the prompt
    ends the session. Answers stream as they are written, and each tool call
    and its result show as they happen. ``--continue`` or ``--conversation``
    resume an earlier conversation (its questions still open are asked first).
    """
    from pilothouse.cli._chat import LAST, ChatSession

    state: CliState = ctx.obj
    if resume_last and conversation is not None:
        fail("--continue and --conversation both name a conversation; give one")
    session = ChatSession(
        action=action,
        agent=agent,
        memory_id=memory_id,
        resume=LAST if resume_last else conversation,
        config=parse_assignments(settings or [], "--set"),
        input_data=parse_assignments(inputs or [], "--input"),
        out=Console(highlight=False),
        err=Console(stderr=True, highlight=False),
    )

    async def body() -> None:
        async with open_facade(state) as ph:
            await session.run(ph)

    run(body)
