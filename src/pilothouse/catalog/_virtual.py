"""The ``virtual_servers`` kind: a tenant's named bundles of MCP tools.

A virtual server is what one audience (a sales desk, a support bot) sees of
the tenant's MCP server, served at ``/mcp/<code>``: the actions, agents,
catalog tools (a gateway row among them brings all its operations), single
gateway operations and built-in tools it names, and nothing else. Every
member is checked when the catalog is written: an action, agent or tool the
tenant lacks, an operation its gateway does not include, or a built-in tool
that does not exist is refused, naming it.

Actions, agents and tools are link rows (a member cannot be deleted while a
bundle names it); single operations are ``<gateway code>:<operation>``
strings, the operation written as in the gateway's ``settings.gateway.include``
(an ``operationId`` or ``METHOD /path``).
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_TOOLS",
    "VirtualServer",
    "VirtualServerAction",
    "VirtualServerAgent",
    "VirtualServerSpec",
    "VirtualServerTool",
    "operation_member_rules",
    "split_operation",
]

from collections.abc import Mapping
from typing import Annotated, Any, cast

from pydantic import Field, StringConstraints, field_validator, model_validator
from sqlalchemy.orm import Mapped, relationship

from pilothouse.catalog._models import Action, Agent, CatalogEntity, Tool
from pilothouse.catalog._spec import CatalogSpec, Code, Name
from pilothouse.catalog._tables import (
    virtual_server_action_table,
    virtual_server_agent_table,
    virtual_server_table,
    virtual_server_tool_table,
)
from pilothouse.store._base import Base

Location = tuple[str | int, ...]

BUILTIN_TOOLS = (
    "pilothouse_answer",
    "pilothouse_memory_list",
    "pilothouse_memory_get",
    "pilothouse_memory_search",
    "pilothouse_memory_add",
    "pilothouse_memory_edit",
    "pilothouse_memory_forget",
    "pilothouse_memory_versions",
    "pilothouse_resources",
)
"""The MCP server's own tools a bundle may name (``pilothouse_resources``: the resources)."""

Operation = Annotated[str, StringConstraints(max_length=300, pattern=r"^[A-Za-z0-9_.-]+:\S.*$")]


def split_operation(member: str) -> tuple[str, str]:
    """``"CRM:getCustomer"`` → ``("CRM", "getCustomer")``."""
    code, _, operation = member.partition(":")
    return code, operation


class VirtualServerSpec(CatalogSpec):
    """A named bundle of MCP tools for one audience, served at ``/mcp/<code>``.

    Attributes:
        code: the business key, also the path (``/mcp/SALES``).
        name: a label.
        description: what the bundle is for (shown to nobody but admins).
        actions: action codes: each is the tool ``action_<CODE>``.
        agents: agent codes: each is the tool ``agent_<CODE>``.
        tools: catalog tool codes: each is the tool ``tool_<name>``; a
            gateway row serves every operation it offers.
        operations: single gateway operations, ``<gateway code>:<operation>``,
            the operation as the gateway's ``settings.gateway.include`` lists it.
        builtins: the MCP server's own tools the bundle serves too
            (``pilothouse_answer`` by default, so questions can be answered).
    """

    code: Code
    name: Name = ""
    description: Annotated[str, StringConstraints(max_length=2000)] | None = None
    actions: list[str] = Field(default_factory=list[str])
    agents: list[str] = Field(default_factory=list[str])
    tools: list[str] = Field(default_factory=list[str])
    operations: list[Operation] = Field(default_factory=list[str])
    builtins: list[str] = Field(default_factory=lambda: ["pilothouse_answer"])

    @field_validator("actions", "agents", "tools", "operations", "builtins")
    @classmethod
    def _once(cls, members: list[str]) -> list[str]:
        twice = sorted({m for m in members if members.count(m) > 1})
        if twice:
            raise ValueError(f"lists {', '.join(repr(m) for m in twice)} more than once")
        return members

    @field_validator("builtins")
    @classmethod
    def _known_builtins(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in BUILTIN_TOOLS]
        if unknown:
            raise ValueError(
                f"{', '.join(repr(n) for n in unknown)}: not a built-in tool; write any of "
                f"{', '.join(BUILTIN_TOOLS)} (actions, agents and tools go in their own lists)"
            )
        return names

    @model_validator(mode="after")
    def _has_members(self) -> VirtualServerSpec:
        if not (self.actions or self.agents or self.tools or self.operations):
            raise ValueError(
                "a virtual server serves at least one action, agent, tool or operation: "
                "list them under actions, agents, tools or operations"
            )
        return self


def operation_member_rules(
    operations: list[str], tools: Mapping[str, tuple[str, Mapping[str, Any]]]
) -> list[tuple[Location, str]]:
    """Check each single operation against its gateway row's ``include``.

    Args:
        operations: the spec's ``operations``.
        tools: the tenant's tools (stored and being written): code → (name, settings).

    Returns:
        ``(location, rule)`` per operation its gateway does not include; an
        unknown gateway code is the reference check's to report.
    """
    found: list[tuple[Location, str]] = []
    for index, member in enumerate(operations):
        code, operation = split_operation(member)
        tool = tools.get(code)
        if tool is None:
            continue
        block = tool[1].get("gateway")
        if not isinstance(block, dict):
            found.append(
                (
                    ("operations", index),
                    f"tool '{code}' is not a gateway (it has no settings.gateway block): "
                    "list it under tools",
                )
            )
            continue
        include = [
            str(i) for i in cast("list[Any]", cast(dict[str, Any], block).get("include", []))
        ]
        if operation not in include:
            listed = ", ".join(repr(i) for i in include) or "nothing"
            found.append(
                (
                    ("operations", index),
                    f"gateway '{code}' does not include '{operation}' (its settings.gateway."
                    f"include lists {listed}): add it there, or serve the whole gateway "
                    f"with tools: [{code}]",
                )
            )
    return found


class VirtualServer(CatalogEntity):
    """A named bundle of MCP tools served at ``/mcp/<code>``."""

    __table__ = virtual_server_table
    entity_name = "virtual server"

    code: Mapped[str]
    name: Mapped[str]
    description: Mapped[str | None]
    operations: Mapped[list[Any]]
    builtins: Mapped[list[Any]]

    actions: Mapped[list[VirtualServerAction]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="VirtualServerAction.position"
    )
    agents: Mapped[list[VirtualServerAgent]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="VirtualServerAgent.position"
    )
    tools: Mapped[list[VirtualServerTool]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="VirtualServerTool.position"
    )


class VirtualServerAction(Base):
    """An action a virtual server serves."""

    __table__ = virtual_server_action_table

    virtual_server_id: Mapped[int]
    action_id: Mapped[int]
    position: Mapped[int]

    action: Mapped[Action] = relationship(lazy="joined")


class VirtualServerAgent(Base):
    """An agent a virtual server serves."""

    __table__ = virtual_server_agent_table

    virtual_server_id: Mapped[int]
    agent_id: Mapped[int]
    position: Mapped[int]

    agent: Mapped[Agent] = relationship(lazy="joined")


class VirtualServerTool(Base):
    """A catalog tool (or a whole gateway) a virtual server serves."""

    __table__ = virtual_server_tool_table

    virtual_server_id: Mapped[int]
    tool_id: Mapped[int]
    position: Mapped[int]

    tool: Mapped[Tool] = relationship(lazy="joined")
