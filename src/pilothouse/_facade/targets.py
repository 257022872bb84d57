"""What a target id names: an action, run by an agent or not.

A target id is what the OpenAI-compatible endpoint calls a model id:
``action:<CODE>`` (or the plain ``<CODE>``) and ``agent:<CODE>``. Resolving
one is on every chat completion's path, so it reads only
the columns it needs, with SQLAlchemy Core in one short transaction, rather
than the full catalog rows (an :class:`~pilothouse.catalog.Action` loads its
whole graph: model, schemas, skills, tools, ...). The same statement reads
the tenant's catalog revision, so the caller can tell whether a compiled
action the runtime cached is still current without reading it again.
"""

from __future__ import annotations

__all__ = ["list_targets", "resolve_target"]

from functools import cache
from typing import Any

from sqlalchemy import Connection, Row, Select, String, bindparam, select
from sqlalchemy.orm import aliased

from pilothouse.catalog._models import Action, Agent, CatalogRevision
from pilothouse.runtime._prompt import template_fields
from pilothouse.store import Database
from pilothouse.types import Target, TargetInfo


@cache
def _statements() -> tuple[Select[*tuple[Any, ...]], Select[*tuple[Any, ...]]]:
    """The action and the agent lookups, built once (a statement keeps its cache key)."""
    revision = (
        select(CatalogRevision.revision)
        .where(CatalogRevision.tenant == bindparam("b_tenant"))
        .scalar_subquery()
        .label("revision")
    )
    action = select(
        Action.code,
        Action.active,
        Action.prompt,
        Action.name,
        Action.goal_description,
        Action.updated_at,
        revision,
    ).where(Action.tenant == bindparam("b_tenant"), Action.code == bindparam("b_code"))
    goal = aliased(Action)
    agent = (
        select(
            Agent.code,
            Agent.active,
            Agent.prompt,
            Agent.name,
            Agent.updated_at,
            goal.code.label("action_code"),
            goal.active.label("action_active"),
            goal.prompt.label("action_prompt"),
            revision,
        )
        .join(goal, goal.id == Agent.goal_action_id)
        # The goal action must be the tenant's own, like everything else.
        .where(
            Agent.tenant == bindparam("b_tenant"),
            Agent.code == bindparam("b_code"),
            goal.tenant == Agent.tenant,
        )
    )
    return action, agent


def _read(connection: Connection, tenant: str, agent: bool, code: str) -> Row[Any] | None:
    statement = _statements()[1 if agent else 0]
    return connection.execute(statement, {"b_tenant": tenant, "b_code": code}).first()


def _fields(*prompts: str | None) -> frozenset[str]:
    return frozenset(name for prompt in prompts for name in template_fields(prompt or ""))


async def resolve_target(database: Database, tenant: str, target_id: str) -> Target | None:
    """Return what ``target_id`` names for ``tenant``, or None.

    ``action:<CODE>`` and the plain ``<CODE>`` name an active action;
    ``agent:<CODE>`` names an active agent whose goal action is active.
    Anything else (unknown, inactive, another tenant's, another prefix) is
    None: a tenant cannot tell "not yours" from "not there".
    """
    kind, colon, code = target_id.partition(":")
    if not colon:
        kind, code = "action", target_id
    if kind not in ("action", "agent"):
        return None
    row = await database.transaction(_read, tenant, kind == "agent", code)
    if row is None or not row.active:
        return None
    revision = int(row.revision or 0)
    if kind == "action":
        return Target(
            action_code=row.code,
            agent_code=None,
            placeholders=_fields(row.prompt),
            name=row.goal_description or row.name,
            updated_at=row.updated_at,
            revision=revision,
        )
    if not row.action_active:
        return None
    return Target(
        action_code=row.action_code,
        agent_code=row.code,
        placeholders=_fields(row.action_prompt, row.prompt),
        name=row.name,
        updated_at=row.updated_at,
        revision=revision,
    )


@cache
def _list_statements() -> tuple[Select[*tuple[Any, ...]], Select[*tuple[Any, ...]]]:
    tenant = bindparam("b_tenant", type_=String())
    actions = (
        select(Action.code, Action.name, Action.goal_description, Action.updated_at)
        .where(Action.tenant == tenant, Action.active.is_(True))
        .order_by(Action.code)
    )
    goal = aliased(Action)
    agents = (
        select(Agent.code, Agent.name, Agent.updated_at)
        .join(goal, goal.id == Agent.goal_action_id)
        .where(
            Agent.tenant == tenant,
            Agent.active.is_(True),
            goal.tenant == Agent.tenant,
            goal.active.is_(True),
        )
        .order_by(Agent.code)
    )
    return actions, agents


def _list(connection: Connection, tenant: str) -> list[TargetInfo]:
    actions, agents = _list_statements()
    parameters = {"b_tenant": tenant}
    listed = [
        TargetInfo(f"action:{row.code}", row.updated_at, row.goal_description or row.name)
        for row in connection.execute(actions, parameters)
    ]
    listed.extend(
        TargetInfo(f"agent:{row.code}", row.updated_at, row.name)
        for row in connection.execute(agents, parameters)
    )
    return listed


async def list_targets(database: Database, tenant: str) -> list[TargetInfo]:
    """Every target of ``tenant``: active actions, then active agents with an active goal.

    Each group is sorted by code; plain ``<CODE>`` aliases are not listed.
    """
    return await database.transaction(_list, tenant)
