"""`pilothouse memory` commands: the scoped memory door, a user's erasure and export.

list, search, add, edit, forget, versions, erase-user, export, run-jobs, expire.

Every command names its scope: ``--scope`` (session, user, agent,
organization) with ``--user``, ``--agent`` and ``--session`` as the scope
needs. Output is JSON lines (one memory per line), for scripts and people.
"""

from __future__ import annotations

__all__ = ["app"]

import getpass
import json
from typing import Annotated, Any

import typer

from pilothouse.cli._context import CliState, fail, open_facade, run
from pilothouse.errors import InvalidFieldError
from pilothouse.types import MemoryScope

app = typer.Typer(
    help="Scoped long-term memory: list, search, add, edit, forget, versions; erase or export "
    "a user.",
    no_args_is_help=True,
)

ScopeOpt = Annotated[str, typer.Option("--scope", help="session, user, agent or organization.")]
UserOpt = Annotated[str | None, typer.Option("--user", help="The end user's id.")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="The agent's (or action's) code.")]
SessionOpt = Annotated[
    str | None, typer.Option("--session", help="The session (conversation uuid).")
]


def _scope(scope: str, user: str | None, agent: str | None, session: str | None) -> MemoryScope:
    try:
        return MemoryScope(scope, user_id=user, agent=agent, session_id=session)  # type: ignore[arg-type]
    except InvalidFieldError as exc:
        fail(str(exc))


def _print(rows: list[dict[str, Any]]) -> None:
    for row in rows:
        typer.echo(json.dumps(row, ensure_ascii=False, sort_keys=True))


def _metadata(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        # Any integer is read; the facade names one too large. (Imported here:
        # the CLI starts without the facade.)
        from pilothouse.api import loads_json

        value = loads_json(text, check=False)
    except json.JSONDecodeError as exc:
        fail(f"--metadata: not JSON ({exc.msg})")
    if not isinstance(value, dict):
        fail("--metadata: must be a JSON object")
    return value  # type: ignore[return-value]


@app.command("list")
def list_(
    ctx: typer.Context,
    scope: ScopeOpt,
    user: UserOpt = None,
    agent: AgentOpt = None,
    session: SessionOpt = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000)] = 100,
) -> None:
    """List a scope's memories, newest first."""
    state: CliState = ctx.obj
    where = _scope(scope, user, agent, session)

    async def body() -> list[dict[str, Any]]:
        async with open_facade(state) as ph:
            return [item.as_json() for item in await ph.memory.list(where, limit=limit)]

    _print(run(body))


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for.")],
    scope: ScopeOpt,
    user: UserOpt = None,
    agent: AgentOpt = None,
    session: SessionOpt = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=100)] = 5,
) -> None:
    """Search a scope by meaning; best first, with similarity and score."""
    state: CliState = ctx.obj
    where = _scope(scope, user, agent, session)

    async def body() -> tuple[list[dict[str, Any]], dict[str, str]]:
        async with open_facade(state) as ph:
            hits = await ph.memory.search(query, where, limit=limit)
            return [hit.as_json() for hit in hits], await ph.memory.index()

    rows, index = run(body)
    _print(rows)
    # On stderr, so the hits stay one JSON object per line on stdout.
    typer.echo(f"index: {index['kind']} ({index['reason']})", err=True)


@app.command()
def add(
    ctx: typer.Context,
    content: Annotated[str, typer.Argument(help="What to remember.")],
    scope: ScopeOpt,
    user: UserOpt = None,
    agent: AgentOpt = None,
    session: SessionOpt = None,
    memory_type: Annotated[str | None, typer.Option("--type", help="fact, preference, ...")] = None,
    importance: Annotated[float, typer.Option("--importance", min=0.0, max=1.0)] = 1.0,
    metadata: Annotated[str | None, typer.Option("--metadata", help="A JSON object.")] = None,
) -> None:
    """Add a memory; print it."""
    state: CliState = ctx.obj
    where = _scope(scope, user, agent, session)
    extra = _metadata(metadata)

    async def body() -> dict[str, Any]:
        async with open_facade(state) as ph:
            item = await ph.memory.add(
                content, where, memory_type=memory_type, importance=importance, metadata=extra
            )
            return item.as_json()

    _print([run(body)])


@app.command()
def edit(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id.")],
    scope: ScopeOpt,
    user: UserOpt = None,
    agent: AgentOpt = None,
    session: SessionOpt = None,
    content: Annotated[str | None, typer.Option("--content")] = None,
    memory_type: Annotated[str | None, typer.Option("--type")] = None,
    importance: Annotated[float | None, typer.Option("--importance", min=0.0, max=1.0)] = None,
    metadata: Annotated[str | None, typer.Option("--metadata", help="A JSON object.")] = None,
) -> None:
    """Change a memory of the scope; print it."""
    state: CliState = ctx.obj
    where = _scope(scope, user, agent, session)
    extra = _metadata(metadata)

    async def body() -> dict[str, Any]:
        async with open_facade(state) as ph:
            item = await ph.memory.edit(
                memory_id,
                where,
                content=content,
                memory_type=memory_type,
                importance=importance,
                metadata=extra,
            )
            return item.as_json()

    _print([run(body)])


@app.command()
def forget(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id.")],
    scope: ScopeOpt,
    user: UserOpt = None,
    agent: AgentOpt = None,
    session: SessionOpt = None,
) -> None:
    """Forget a memory of the scope."""
    state: CliState = ctx.obj
    where = _scope(scope, user, agent, session)

    async def body() -> None:
        async with open_facade(state) as ph:
            await ph.memory.forget(memory_id, where)

    run(body)
    typer.echo(f"forgot memory {memory_id}")


@app.command()
def versions(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id.")],
    scope: ScopeOpt,
    user: UserOpt = None,
    agent: AgentOpt = None,
    session: SessionOpt = None,
) -> None:
    """Print a memory's history, oldest first (one JSON line each); the last is current."""
    state: CliState = ctx.obj
    where = _scope(scope, user, agent, session)

    async def body() -> list[dict[str, Any]]:
        async with open_facade(state) as ph:
            return [v.as_json() for v in await ph.memory.versions(memory_id, where)]

    _print(run(body))


def _os_user() -> str:
    """``cli:<login name>``, or ``cli`` where the system names no user (a bare container)."""
    try:
        return f"cli:{getpass.getuser()}"
    except OSError:
        # getpass raises OSError when neither the environment nor the
        # password database names the user: the event still says "cli".
        return "cli"


@app.command("erase-user")
def erase_user(
    ctx: typer.Context,
    user: Annotated[str, typer.Argument(help="The end user's id.")],
    reason: Annotated[str, typer.Option("--reason", help="Why (kept in the audit event).")] = "",
    requested_by: Annotated[
        str | None,
        typer.Option(
            "--requested-by",
            help="Who asked, as the audit event records it (default: cli:<your login name>).",
        ),
    ] = None,
) -> None:
    """Erase everything about a user; recorded as an audit event naming the requester.

    Every scope, memories derived from their conversations, versions, jobs,
    chat memory.
    """
    state: CliState = ctx.obj
    requester = requested_by if requested_by is not None else _os_user()

    async def body() -> dict[str, Any]:
        async with open_facade(state) as ph:
            report = await ph.memory.erase_user(user, reason=reason, requested_by=requester)
            return report.as_json()

    _print([run(body)])


@app.command()
def export(
    ctx: typer.Context,
    user: Annotated[str, typer.Option("--user", help="The end user's id.")],
) -> None:
    """Print everything stored about a user as one JSON document (right of access).

    Conversations with their messages, memories with provenance and
    versions, extraction jobs, erasure events: of the configured tenant only.
    """
    state: CliState = ctx.obj

    async def body() -> dict[str, Any]:
        async with open_facade(state) as ph:
            return await ph.memory.export_user(user)

    typer.echo(json.dumps(run(body), ensure_ascii=False, indent=2, sort_keys=True))


@app.command("run-jobs")
def run_jobs(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option("--limit", min=1, max=10_000)] = 100,
) -> None:
    """Run every tenant's pending extraction jobs once (the service's worker does it on its own)."""
    state: CliState = ctx.obj

    async def body() -> list[dict[str, Any]]:
        async with open_facade(state) as ph:
            outcomes = await ph.run_memory_jobs(limit)
            return [
                {"job_id": o.job_id, "status": o.status, "events": list(o.events), "error": o.error}
                for o in outcomes
            ]

    _print(run(body))


@app.command()
def expire(ctx: typer.Context) -> None:
    """Delete every tenant's session memory past its TTL now."""
    state: CliState = ctx.obj

    async def body() -> int:
        async with open_facade(state) as ph:
            return await ph.expire_memory()

    typer.echo(f"expired {run(body)} session memories")
