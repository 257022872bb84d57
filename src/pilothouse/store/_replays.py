"""Replay runs in the store: a dataset run again against a changed target, case by case.

Each finished case is written in its own transaction as soon as it ends, so
a run that was interrupted resumes with only the cases it lacks.
"""

from __future__ import annotations

__all__ = [
    "CaseResult",
    "ReplayRun",
    "add_result",
    "create_run",
    "find_run",
    "finish_run",
    "list_runs",
    "read_run",
]

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select, update

from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.store._base import utcnow
from pilothouse.store._tables import replay_result_table, replay_run_table

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection


@dataclass(frozen=True)
class CaseResult:
    """What one case gave when it was replayed.

    Attributes:
        sequence: the case's position in its dataset.
        status: ``ok`` (the turn ended) or ``failed`` (it raised; see ``error``).
        output: the answer's text.
        tool_calls: the tool calls the replayed model made, in order, each
            ``{"name": ..., "arguments": {...}}``.
        divergences: the calls the recording did not have, each ``{"tool",
            "arguments", "expected", "live"}``.
        answered: tool calls answered from the recording.
        input_tokens: input tokens of the replay.
        output_tokens: output tokens of the replay.
        cost: its cost, from the model's prices.
        latency_ms: wall time of the turn.
        conversation_uuid: the conversation the replay recorded (face ``replay``).
        error: why the turn failed, if it did.
    """

    sequence: int
    status: str
    output: str | None
    tool_calls: tuple[Mapping[str, Any], ...] = ()
    divergences: tuple[Mapping[str, Any], ...] = ()
    answered: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal(0)
    latency_ms: int | None = None
    conversation_uuid: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class ReplayRun:
    """A replay run and its results so far.

    Attributes:
        name: unique within the tenant.
        dataset: the dataset it replays.
        target: what was changed (``model``, ``configuration``, ``settings``,
            ``live_tools``, ``count_budgets``).
        created_at: when it started.
        finished_at: when its last case ended (None while unfinished).
        results: one per finished case, by sequence.
    """

    name: str
    dataset: str
    target: Mapping[str, Any]
    created_at: datetime
    finished_at: datetime | None
    results: tuple[CaseResult, ...] = field(default=())


async def find_run(connection: AsyncConnection, tenant: str, name: str) -> int | None:
    """Return the id of the tenant's run ``name``, or None."""
    c = replay_run_table.c
    return (
        await connection.execute(select(c.id).where(c.tenant == tenant, c.name == name))
    ).scalar_one_or_none()


async def create_run(
    connection: AsyncConnection,
    tenant: str,
    name: str,
    dataset: str,
    target: Mapping[str, Any],
) -> int:
    """Insert a run and return its id.

    Raises:
        InvalidFieldError: the name is empty or too long.
    """
    if not name.strip() or len(name) > 128:
        raise InvalidFieldError("run", "a run name has 1 to 128 characters")
    result = await connection.execute(
        insert(replay_run_table).values(
            tenant=tenant, name=name, dataset=dataset, target=dict(target)
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


async def add_result(connection: AsyncConnection, run_id: int, result: CaseResult) -> None:
    """Record one finished case of a run."""
    await connection.execute(
        insert(replay_result_table).values(
            run_id=run_id,
            case_sequence=result.sequence,
            conversation_uuid=result.conversation_uuid,
            status=result.status,
            output=result.output,
            tool_calls=[dict(c) for c in result.tool_calls],
            divergences=[dict(d) for d in result.divergences],
            answered=result.answered,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            cost=result.cost,
            latency_ms=result.latency_ms,
            error=result.error,
        )
    )


async def finish_run(connection: AsyncConnection, run_id: int) -> None:
    """Mark a run finished now."""
    await connection.execute(
        update(replay_run_table).where(replay_run_table.c.id == run_id).values(finished_at=utcnow())
    )


async def read_run(connection: AsyncConnection, tenant: str, name: str) -> ReplayRun:
    """Return a run with its results.

    Raises:
        NotFoundError: no such run.
    """
    c = replay_run_table.c
    row = (
        await connection.execute(select(replay_run_table).where(c.tenant == tenant, c.name == name))
    ).one_or_none()
    if row is None:
        raise NotFoundError(f"no replay run {name!r}")
    r = replay_result_table.c
    results = await connection.execute(
        select(replay_result_table).where(r.run_id == row.id).order_by(r.case_sequence)
    )
    return ReplayRun(
        name=row.name,
        dataset=row.dataset,
        target=row.target,
        created_at=row.created_at,
        finished_at=row.finished_at,
        results=tuple(
            CaseResult(
                sequence=x.case_sequence,
                status=x.status,
                output=x.output,
                tool_calls=tuple(x.tool_calls),
                divergences=tuple(x.divergences),
                answered=x.answered,
                input_tokens=x.input_tokens,
                output_tokens=x.output_tokens,
                cost=Decimal(x.cost),
                latency_ms=x.latency_ms,
                conversation_uuid=x.conversation_uuid,
                error=x.error,
            )
            for x in results
        ),
    )


async def list_runs(connection: AsyncConnection, tenant: str) -> list[ReplayRun]:
    """Return the tenant's runs, newest first, without their results."""
    c = replay_run_table.c
    rows = await connection.execute(
        select(replay_run_table)
        .where(c.tenant == tenant)
        .order_by(c.created_at.desc(), c.id.desc())
    )
    return [
        ReplayRun(row.name, row.dataset, row.target, row.created_at, row.finished_at)
        for row in rows
    ]
