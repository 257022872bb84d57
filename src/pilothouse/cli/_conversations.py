"""`pilothouse conversations` commands: list and show recorded conversations."""

from __future__ import annotations

__all__ = ["app"]

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table

from pilothouse.cli._context import CliState, fail, open_facade, run
from pilothouse.types import ProcessStatus, cost_text

if TYPE_CHECKING:
    # The facade and the store's views load SQLAlchemy: `pilothouse --help`
    # and the other commands' start-up need neither.
    from pilothouse.api import Pilothouse
    from pilothouse.types import Conversation, ConversationView, Page

app = typer.Typer(help="Inspect and recover recorded conversations.", no_args_is_help=True)


def _status(value: str | None) -> ProcessStatus | None:
    """Accept a status code (``CO``) or name (``completed``)."""
    if value is None:
        return None
    text = value.strip()
    for status in ProcessStatus:
        if text.upper() == status.value or text.upper() == status.name:
            return status
    choices = ", ".join(f"{s.value} ({s.name.lower()})" for s in ProcessStatus)
    fail(f"--status: unknown status '{value}'; use one of {choices}")


def _time(option: str, value: str | None) -> datetime | None:
    """Parse an ISO 8601 date or time; a time without zone is taken as UTC."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        fail(f"{option}: '{value}' is not an ISO 8601 date or time (e.g. 2025-01-31T12:00)")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _wide_console() -> Console:
    console = Console()
    # Piped output has no width to respect; Rich would assume 80 columns and
    # cut the codes of a listing that a script or a user needs whole.
    if not console.is_terminal:
        console = Console(width=max(console.width, 200))
    return console


def _when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value is not None else "-"


def _page_document(page: Page[Conversation]) -> dict[str, Any]:
    from pilothouse.types import ConversationInfo

    return {
        "items": [ConversationInfo.model_validate(c).model_dump(mode="json") for c in page.items],
        "total": page.total,
        "limit": page.limit,
        "offset": page.offset,
    }


def _page_table(page: Page[Conversation]) -> Table:
    shown = f"{page.offset + 1}-{page.offset + len(page.items)}" if page.items else "none"
    table = Table(title=f"conversations {shown} of {page.total}", box=box.SIMPLE_HEAD)
    # The uuid is what the user copies into `show`: never wrap or cut it.
    table.add_column("uuid", no_wrap=True, min_width=36)
    for name in ("agent", "action", "status", "finish"):
        table.add_column(name)
    table.add_column("in/out", justify="right")
    table.add_column("cost", justify="right")
    table.add_column("created (UTC)", no_wrap=True)
    for c in page.items:
        table.add_row(
            c.uuid,
            escape(c.agent_code or "-"),
            escape(c.action_code),
            c.status.value,
            c.finish_reason.value if c.finish_reason is not None else "-",
            f"{c.input_tokens}/{c.output_tokens}",
            cost_text(c.estimated_cost),
            _when(c.created_at),
        )
    return table


@app.command("list")
def list_conversations(
    ctx: typer.Context,
    agent: Annotated[str | None, typer.Option(help="Only this agent's conversations.")] = None,
    action: Annotated[str | None, typer.Option(help="Only this action's conversations.")] = None,
    status: Annotated[
        str | None, typer.Option(help="Only this status: a code (CO) or a name (completed).")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="Created at or after this ISO time (UTC unless zoned).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Created before this ISO time (UTC unless zoned).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Page size.")] = 50,
    offset: Annotated[int, typer.Option(min=0, help="Conversations to skip.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """List conversations, newest first."""
    state: CliState = ctx.obj
    wanted = _status(status)
    created_from = _time("--since", since)
    created_to = _time("--until", until)

    async def body() -> Page[Conversation]:
        # Not migrated first: listing reads a database whose upgrade stopped
        # at too-long catalog keys too (the facade brings the rest up to date).
        async with open_facade(state, migrate=False) as ph:
            return await ph.query.list_conversations(
                agent=agent,
                action=action,
                status=wanted,
                created_from=created_from,
                created_to=created_to,
                limit=limit,
                offset=offset,
            )

    page = run(body)
    if as_json:
        typer.echo(json.dumps(_page_document(page), indent=2))
    else:
        _wide_console().print(_page_table(page))


def _summary(view: ConversationView) -> Panel:
    lines = [
        f"[bold]status[/] {view.status.value} ({view.status.name.lower()})"
        + (f"   [bold]finish[/] {view.finish_reason.value}" if view.finish_reason else ""),
        f"[bold]agent[/] {escape(view.agent_code or '-')}   "
        f"[bold]action[/] {escape(view.action_code)}   "
        f"[bold]model[/] {escape(view.response_model or '-')}",
        f"[bold]tokens[/] in {view.input_tokens} / out {view.output_tokens}"
        f" (cached {view.cached_tokens}, reasoning {view.reasoning_tokens})   "
        f"[bold]cost[/] {cost_text(view.estimated_cost)}",
        f"[bold]created[/] {_when(view.created_at)}   [bold]started[/] {_when(view.started_at)}"
        f"   [bold]finished[/] {_when(view.finished_at)}",
        f"[bold]memory[/] {escape(view.memory_id)}   "
        f"[bold]audit[/] {'on' if view.audit else 'off'}",
    ]
    if view.error_detail:
        lines.append(f"[bold red]error[/] {escape(view.error_detail)}")
    return Panel("\n".join(lines), title=f"conversation {view.uuid}", expand=False)


def _transcript(view: ConversationView) -> Group | str:
    if not view.messages:
        return "[dim]no messages[/]"
    parts: list[Any] = []
    for m in view.messages:
        extras = f" tool call {m.tool_call_id}" if m.tool_call_id else ""
        heading = f"#{m.sequence} {m.role.name.lower()} ({m.role.value}){extras}"
        body = escape(m.content) if m.content else "[dim](empty)[/]"
        for a in m.attachments:
            where = a.url or f"{a.size} bytes"
            body += f"\n[dim]attachment {escape(a.name or '')} {a.media_type} {escape(where)}[/]"
        parts.append(Panel(body, title=heading, title_align="left"))
    return Group(*parts)


def _tool_calls(view: ConversationView) -> Table:
    table = Table(title="tool calls")
    for name in ("message", "call id", "tool", "arguments", "status", "result"):
        table.add_column(name)
    for c in view.tool_calls:
        table.add_row(
            str(c.message_sequence),
            escape(c.call_id),
            escape(c.name),
            escape(json.dumps(c.arguments)),
            c.status.value,
            escape(c.result or "-"),
        )
    return table


def _timeline(view: ConversationView) -> Table:
    table = Table(title="timeline")
    for name in ("#", "time (UTC)", "event", "data"):
        table.add_column(name)
    for e in view.timeline:
        table.add_row(
            str(e.sequence), _when(e.created_at), e.kind.value, escape(json.dumps(e.data))
        )
    return table


@app.command("show")
def show_conversation(
    ctx: typer.Context,
    uuid: Annotated[str, typer.Argument(help="The conversation's uuid.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Show one conversation: status, tokens, cost, transcript, tool calls and timeline."""
    state: CliState = ctx.obj

    async def body() -> ConversationView:
        async with open_facade(state) as ph:
            return await ph.query.get_transcript(uuid)

    view = run(body)
    if as_json:
        typer.echo(view.model_dump_json(indent=2))
        return
    # Piped or not, the transcript wraps to the terminal's (or Rich's) width.
    console = Console()
    console.print(_summary(view))
    console.print(_transcript(view))
    if view.tool_calls:
        console.print(_tool_calls(view))
    if view.timeline:
        console.print(_timeline(view))


@app.command("clear-memory")
def clear_memory(
    ctx: typer.Context,
    uuid: Annotated[str, typer.Argument(help="A conversation whose chat memory to clear.")],
) -> None:
    """Clear a conversation's chat memory: later turns see no earlier message.

    Every conversation sharing its memory id is affected; the transcript
    keeps every message and shows where the memory was cleared.
    """
    state: CliState = ctx.obj

    async def body() -> str:
        async with open_facade(state) as ph:
            memory_id = (await ph.query.get_conversation(uuid)).memory_id
            await ph.command.clear_memory(memory_id)
            return memory_id

    memory_id = run(body)
    typer.echo(f"chat memory '{memory_id}' cleared")


@app.command("recover")
def recover(
    ctx: typer.Context,
    uuids: Annotated[
        list[str] | None, typer.Argument(help="Stuck conversations to recover (or --all).")
    ] = None,
    every: Annotated[
        bool, typer.Option("--all", help="Every stuck (ST) conversation of the tenant.")
    ] = False,
    retry: Annotated[
        bool | None,
        typer.Option(
            "--retry/--fail",
            help="Call the model again on the stored history, or record the conversation FA.",
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also take over running turns whose process cannot be proved dead "
            "(another host's, or a fresh heartbeat): only when it is known to be gone.",
        ),
    ] = False,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            min=1,
            help="Conversations recovered at once (each retry is a model call).",
        ),
    ] = 1,
) -> None:
    """Recover conversations a crash left running: retry their turn, or fail them.

    Running conversations that no live process owns are first marked ST (as
    `pilothouse serve` does at start-up); then each one named, or every ST
    conversation with --all, is retried or failed, up to --concurrency at
    once. Each conversation's outcome is one line as it ends; one that
    cannot be recovered is named and the others go on (exit code 2 at the end).
    """
    state: CliState = ctx.obj
    if retry is None:
        fail("say what to do: --retry (call the model again) or --fail (record FA)")
    if every == bool(uuids):
        fail("name the conversations to recover, or give --all (not both)")

    async def body() -> int:
        import anyio

        from pilothouse.errors import PilothouseError

        refused = 0
        async with open_facade(state) as ph:
            for stuck in await ph.sweep_orphans(force=force):
                typer.echo(f"{stuck.uuid}: marked ST ({stuck.reason})")
            targets = list(uuids or [])
            if every:
                targets = await _stuck(ph)
            slots = anyio.Semaphore(concurrency)

            async def recover_one(uuid: str) -> None:
                nonlocal refused
                async with slots:
                    try:
                        result = await ph.command.recover(uuid, retry=bool(retry))
                    except PilothouseError as exc:
                        # One conversation's problem is its own line; the
                        # others are still recovered.
                        refused += 1
                        typer.echo(f"{uuid}: not recovered: {exc.public_message}", err=True)
                        return
                if result is None:
                    typer.echo(f"{uuid}: recorded FA")
                else:
                    typer.echo(f"{uuid}: retried, now {result.status.value}")

            async with anyio.create_task_group() as group:
                for uuid in targets:
                    group.start_soon(recover_one, uuid)
        return refused

    if run(body):
        raise typer.Exit(code=2)


async def _stuck(ph: Pilothouse) -> list[str]:
    """Every ST conversation of the facade's tenant, oldest first."""
    found: list[str] = []
    offset = 0
    while True:
        page = await ph.query.list_conversations(
            status=ProcessStatus.STUCK, limit=200, offset=offset
        )
        found.extend(c.uuid for c in page.items)
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return list(reversed(found))
