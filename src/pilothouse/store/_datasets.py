"""Evaluation datasets in the store: named sets of cases taken from recorded conversations.

A case is what a replay needs to run one conversation again and what a
scorer compares against: the user's text and input data, the recorded
answer, and every tool call with its recorded result. Conversations of an
erased user (their ``memory_id`` reads ``erased:...``) never become cases,
and erasing a user deletes the cases taken from their conversations.
"""

from __future__ import annotations

__all__ = [
    "CaseFilter",
    "DatasetCase",
    "DatasetInfo",
    "RecordedCall",
    "add_cases",
    "case_from_json",
    "case_to_json",
    "create_dataset",
    "dataset_cases",
    "delete_cases_of_conversations",
    "delete_dataset",
    "find_dataset",
    "list_datasets",
    "select_conversations",
]

import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import delete, func, insert, select

from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.store._tables import (
    conversation_table,
    dataset_case_table,
    dataset_table,
    message_table,
    tool_call_table,
)

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

ERASED_PREFIX = "erased:"
"""The ``memory_id`` prefix an erased user's conversations are given."""

REPLAY_FACE = "replay"
"""The face recorded on conversations a replay ran: never taken into datasets."""


@dataclass(frozen=True)
class RecordedCall:
    """One tool call of a case and the result it got when it was recorded.

    Attributes:
        name: the tool's name.
        arguments: the arguments the model gave.
        result: the recorded result (None when the call had none).
    """

    name: str
    arguments: Mapping[str, Any]
    result: str | None = None


@dataclass(frozen=True)
class DatasetCase:
    """One case of a dataset: an input, the output it got and its tool calls.

    Attributes:
        action: the catalog action the case runs.
        input_text: the user's message.
        input_data: the action's input data (its prompt's placeholders).
        expected_output: the recorded (or hand-written) answer, if any.
        tool_calls: the recorded tool calls with their results, in order.
        agent: the agent that ran it, or None for the action's own.
        tags: free labels (hand-written cases, or where the case came from).
        recorded: the recorded usage: ``input_tokens``, ``output_tokens``,
            ``cost`` (a decimal string), ``latency_ms``, ``model``.
        source_conversation: the conversation it was taken from, or None.
        sequence: its position in the dataset (0 before it is stored).
    """

    action: str
    input_text: str
    input_data: Mapping[str, Any] | None = None
    expected_output: str | None = None
    tool_calls: tuple[RecordedCall, ...] = ()
    agent: str | None = None
    tags: tuple[str, ...] = ()
    recorded: Mapping[str, Any] = field(default_factory=dict[str, Any])
    source_conversation: str | None = None
    sequence: int = 0


@dataclass(frozen=True)
class DatasetInfo:
    """A dataset's name and size.

    Attributes:
        name: unique within the tenant.
        description: free text.
        cases: how many cases it holds.
        created_at: when it was created.
    """

    name: str
    description: str
    cases: int
    created_at: datetime


@dataclass(frozen=True)
class CaseFilter:
    """Which recorded conversations become cases.

    Attributes:
        action: only this action's conversations.
        agent: only this agent's.
        status: only conversations in this status (default: completed ones).
        since: created at or after.
        until: created before.
        uuids: only these conversations.
        tag: only conversations whose user message data carries this tag
            (``input_data["tags"]`` or the message's ``tags``).
        sample: at most this many, chosen at random (``seed`` makes it repeatable).
        seed: the sample's random seed.
    """

    action: str | None = None
    agent: str | None = None
    status: ProcessStatus | None = ProcessStatus.COMPLETED
    since: datetime | None = None
    until: datetime | None = None
    uuids: Collection[str] | None = None
    tag: str | None = None
    sample: int | None = None
    seed: int | None = None


def case_to_json(case: DatasetCase) -> dict[str, Any]:
    """Return one case as the JSON object of a JSONL export line."""
    return {
        "action": case.action,
        "agent": case.agent,
        "input_text": case.input_text,
        "input_data": dict(case.input_data) if case.input_data is not None else None,
        "expected_output": case.expected_output,
        "tool_calls": [
            {"name": c.name, "arguments": dict(c.arguments), "result": c.result}
            for c in case.tool_calls
        ],
        "tags": list(case.tags),
        "recorded": dict(case.recorded),
        "source_conversation": case.source_conversation,
    }


_CASE_FIELDS = frozenset(case_to_json(DatasetCase(action="", input_text="")))
_CALL_FIELDS = frozenset({"name", "arguments", "result"})


def _text(value: object, name: str, *, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidFieldError(name, "must be a string")
    return value


def case_from_json(document: Mapping[str, Any], where: str = "case") -> DatasetCase:
    """Read one case written by :func:`case_to_json` (or by hand).

    Only ``action`` and ``input_text`` are required; an unknown field is refused.

    Raises:
        InvalidFieldError: a field is unknown or of the wrong type.
    """
    unknown = sorted(set(document) - _CASE_FIELDS)
    if unknown:
        raise InvalidFieldError(where, f"unknown fields {', '.join(unknown)}")
    action = _text(document.get("action"), f"{where}.action") or ""
    if not action:
        raise InvalidFieldError(f"{where}.action", "is required")
    calls: list[RecordedCall] = []
    raw_calls: object = document.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise InvalidFieldError(f"{where}.tool_calls", "must be a list")
    for index, raw in enumerate(cast(list[object], raw_calls)):
        name = f"{where}.tool_calls[{index}]"
        if not isinstance(raw, dict):
            raise InvalidFieldError(name, "must be an object")
        call = cast(dict[str, Any], raw)
        extra = sorted(set(call) - _CALL_FIELDS)
        if extra:
            raise InvalidFieldError(name, f"unknown fields {', '.join(extra)}")
        arguments: object = call.get("arguments") or {}
        if not isinstance(arguments, dict):
            raise InvalidFieldError(f"{name}.arguments", "must be an object")
        calls.append(
            RecordedCall(
                name=_text(call.get("name"), f"{name}.name") or "",
                arguments=cast(dict[str, Any], arguments),
                result=_text(call.get("result"), f"{name}.result", optional=True),
            )
        )
    input_data: object = document.get("input_data")
    if input_data is not None and not isinstance(input_data, dict):
        raise InvalidFieldError(f"{where}.input_data", "must be an object")
    tags: object = document.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in cast(list[object], tags)):
        raise InvalidFieldError(f"{where}.tags", "must be a list of strings")
    recorded: object = document.get("recorded") or {}
    if not isinstance(recorded, dict):
        raise InvalidFieldError(f"{where}.recorded", "must be an object")
    return DatasetCase(
        action=action,
        agent=_text(document.get("agent"), f"{where}.agent", optional=True),
        input_text=_text(document.get("input_text", ""), f"{where}.input_text") or "",
        input_data=cast("dict[str, Any] | None", input_data),
        expected_output=_text(
            document.get("expected_output"), f"{where}.expected_output", optional=True
        ),
        tool_calls=tuple(calls),
        tags=tuple(cast(list[str], tags)),
        recorded=cast(dict[str, Any], recorded),
        source_conversation=_text(
            document.get("source_conversation"), f"{where}.source_conversation", optional=True
        ),
    )


async def find_dataset(connection: AsyncConnection, tenant: str, name: str) -> int | None:
    """Return the id of the tenant's dataset ``name``, or None."""
    columns = dataset_table.c
    return (
        await connection.execute(
            select(columns.id).where(columns.tenant == tenant, columns.name == name)
        )
    ).scalar_one_or_none()


async def _dataset_id(connection: AsyncConnection, tenant: str, name: str) -> int:
    found = await find_dataset(connection, tenant, name)
    if found is None:
        raise NotFoundError(f"no dataset {name!r}")
    return found


async def create_dataset(
    connection: AsyncConnection, tenant: str, name: str, description: str
) -> int:
    """Insert an empty dataset and return its id.

    Raises:
        InvalidFieldError: the name is empty, too long or taken.
    """
    if not name.strip() or len(name) > 128:
        raise InvalidFieldError("name", "a dataset name has 1 to 128 characters")
    if await find_dataset(connection, tenant, name) is not None:
        raise InvalidFieldError("name", f"dataset {name!r} already exists")
    result = await connection.execute(
        insert(dataset_table).values(tenant=tenant, name=name, description=description)
    )
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


async def add_cases(
    connection: AsyncConnection, tenant: str, name: str, cases: Sequence[DatasetCase]
) -> int:
    """Append cases to a dataset; return how many it holds now.

    Raises:
        NotFoundError: no such dataset.
    """
    dataset = await _dataset_id(connection, tenant, name)
    columns = dataset_case_table.c
    last = (
        await connection.execute(
            select(func.max(columns.sequence)).where(columns.dataset_id == dataset)
        )
    ).scalar_one_or_none()
    start = (last or 0) + 1
    if cases:
        await connection.execute(
            insert(dataset_case_table),
            [
                {
                    "dataset_id": dataset,
                    "sequence": start + index,
                    "source_conversation": case.source_conversation,
                    "action_code": case.action,
                    "agent_code": case.agent,
                    "input_text": case.input_text,
                    "input_data": dict(case.input_data) if case.input_data is not None else None,
                    "expected_output": case.expected_output,
                    "tool_calls": case_to_json(case)["tool_calls"],
                    "tags": list(case.tags),
                    "recorded": dict(case.recorded),
                }
                for index, case in enumerate(cases)
            ],
        )
    return int(
        (
            await connection.execute(
                select(func.count(columns.id)).where(columns.dataset_id == dataset)
            )
        ).scalar_one()
    )


async def dataset_cases(connection: AsyncConnection, tenant: str, name: str) -> list[DatasetCase]:
    """Return a dataset's cases in order.

    Raises:
        NotFoundError: no such dataset.
    """
    dataset = await _dataset_id(connection, tenant, name)
    columns = dataset_case_table.c
    rows = await connection.execute(
        select(dataset_case_table).where(columns.dataset_id == dataset).order_by(columns.sequence)
    )
    cases: list[DatasetCase] = []
    for row in rows:
        base = case_from_json(
            {
                "action": row.action_code,
                "agent": row.agent_code,
                "input_text": row.input_text,
                "input_data": row.input_data,
                "expected_output": row.expected_output,
                "tool_calls": row.tool_calls,
                "tags": row.tags,
                "recorded": row.recorded,
                "source_conversation": row.source_conversation,
            }
        )
        cases.append(replace(base, sequence=int(row.sequence)))
    return cases


async def list_datasets(connection: AsyncConnection, tenant: str) -> list[DatasetInfo]:
    """Return the tenant's datasets by name, with their case counts."""
    d, c = dataset_table.c, dataset_case_table.c
    rows = await connection.execute(
        select(d.name, d.description, d.created_at, func.count(c.id))
        .select_from(dataset_table.outerjoin(dataset_case_table, c.dataset_id == d.id))
        .where(d.tenant == tenant)
        .group_by(d.id, d.name, d.description, d.created_at)
        .order_by(d.name)
    )
    return [DatasetInfo(row[0], row[1], int(row[3]), row[2]) for row in rows]


async def delete_dataset(connection: AsyncConnection, tenant: str, name: str) -> None:
    """Delete a dataset and its cases.

    Raises:
        NotFoundError: no such dataset.
    """
    dataset = await _dataset_id(connection, tenant, name)
    await connection.execute(
        delete(dataset_case_table).where(dataset_case_table.c.dataset_id == dataset)
    )
    await connection.execute(delete(dataset_table).where(dataset_table.c.id == dataset))


async def delete_cases_of_conversations(
    connection: AsyncConnection, tenant: str, uuids: Collection[str]
) -> int:
    """Delete the tenant's cases taken from these conversations; return how many."""
    if not uuids:
        return 0
    c = dataset_case_table.c
    owned = select(dataset_table.c.id).where(dataset_table.c.tenant == tenant)
    result = await connection.execute(
        delete(dataset_case_table).where(
            c.source_conversation.in_(list(uuids)), c.dataset_id.in_(owned)
        )
    )
    return int(result.rowcount)


def _tags_of(data: Mapping[str, Any] | None) -> set[str]:
    if not data:
        return set()
    found: set[str] = set()
    inner: object = data.get("input_data")
    holders: list[Mapping[str, Any]] = [data]
    if isinstance(inner, dict):
        holders.append(cast(dict[str, Any], inner))
    for holder in holders:
        tags: object = holder.get("tags")
        if isinstance(tags, list):
            found |= {str(t) for t in cast(list[object], tags)}
        elif isinstance(tags, str):
            found.add(tags)
    return found


async def select_conversations(
    connection: AsyncConnection, tenant: str, where: CaseFilter
) -> list[DatasetCase]:
    """Read the recorded conversations ``where`` selects, as cases.

    Erased users' conversations, replays and conversations without a user
    message are left out.
    """
    conv = conversation_table.c
    statement = select(conversation_table).where(
        conv.tenant == tenant,
        ~conv.memory_id.startswith(ERASED_PREFIX),
        (conv.face.is_(None)) | (conv.face != REPLAY_FACE),
    )
    if where.action is not None:
        statement = statement.where(conv.action_code == where.action)
    if where.agent is not None:
        statement = statement.where(conv.agent_code == where.agent)
    if where.status is not None:
        statement = statement.where(conv.status == where.status)
    if where.since is not None:
        statement = statement.where(conv.created_at >= where.since)
    if where.until is not None:
        statement = statement.where(conv.created_at < where.until)
    if where.uuids is not None:
        statement = statement.where(conv.uuid.in_(list(where.uuids)))
    rows = list(await connection.execute(statement.order_by(conv.created_at, conv.id)))
    cases: list[DatasetCase] = []
    for row in rows:
        case = await _case_of(connection, row)
        if case is None:
            continue
        if where.tag is not None and where.tag not in case.tags:
            continue
        cases.append(case)
    if where.sample is not None and len(cases) > where.sample:
        chosen = sorted(random.Random(where.seed).sample(range(len(cases)), where.sample))
        cases = [cases[i] for i in chosen]
    return cases


async def _case_of(connection: AsyncConnection, row: Any) -> DatasetCase | None:
    m, t = message_table.c, tool_call_table.c
    messages = list(
        await connection.execute(
            select(m.role, m.content, m.data)
            .where(m.conversation_id == row.id)
            .order_by(m.sequence)
        )
    )
    user = next((x for x in messages if x.role == MessageRole.USER), None)
    if user is None:
        return None
    answer = next((x for x in reversed(messages) if x.role == MessageRole.ASSISTANT), None)
    calls = await connection.execute(
        select(t.name, t.arguments, t.result)
        .where(t.conversation_id == row.id)
        .order_by(t.message_sequence, t.id)
    )
    data: Mapping[str, Any] | None = user.data
    input_data = data.get("input_data") if data else None
    latency = (
        int((row.finished_at - row.started_at).total_seconds() * 1000)
        if row.finished_at is not None and row.started_at is not None
        else None
    )
    cost: Decimal = row.estimated_cost
    return DatasetCase(
        action=row.action_code,
        agent=row.agent_code,
        input_text=user.content,
        input_data=input_data,
        expected_output=answer.content if answer is not None else None,
        tool_calls=tuple(RecordedCall(c.name, dict(c.arguments or {}), c.result) for c in calls),
        tags=tuple(sorted(_tags_of(data))),
        recorded={
            "input_tokens": row.input_tokens,
            "output_tokens": row.output_tokens,
            "cost": str(cost.normalize()) if cost else "0",
            "latency_ms": latency,
            "model": row.response_model,
        },
        source_conversation=row.uuid,
    )
