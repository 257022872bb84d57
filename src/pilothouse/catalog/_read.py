"""Read an action and its agent from the catalog with Core statements, into views.

The compile of an action (``runtime/_compile.py``) reads one action, its
agent and everything they name. Through the ORM that was the mapped
classes' configuration (about 45 ms of CPU, once per process) and seven
ORM statements with their loader strategies; the first turn of every
process paid both (``docs/architecture.md``, "Cold start"). Here the same
rows are read with plain ``SELECT``s on one connection, in the store's
transaction, and built into the frozen views of :mod:`pilothouse.catalog._views`.

What is read matches what the mapped classes load eagerly: every
relationship a view has is one the mapped class loads with ``joined`` or
``selectin`` (the tests compare both readings, view by view). Rows are read
once per compile even when several paths name them (a tool linked to the
action and to a skill is one :class:`ToolView`).
"""

from __future__ import annotations

__all__ = ["CatalogReader", "read_revision"]

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, RowMapping, Table, select

from pilothouse.catalog._models import (
    Action,
    ActionAdvisor,
    ActionCollection,
    ActionMcpClient,
    ActionSchema,
    ActionSkill,
    ActionTool,
    ActionType,
    Advisor,
    AdvisorType,
    Agent,
    AgentType,
    Application,
    CatalogRevision,
    Configuration,
    DocumentCollection,
    McpClient,
    McpClientType,
    MemoryStrategy,
    MemoryStrategyType,
    Model,
    Persona,
    PersonaType,
    Provider,
    Skill,
    SkillDependency,
    SkillTool,
    SkillType,
    Tool,
    ToolType,
    VectorStore,
    VectorStoreType,
)
from pilothouse.catalog._views import (
    ActionAdvisorView,
    ActionCollectionView,
    ActionMcpClientView,
    ActionSchemaView,
    ActionSkillView,
    ActionToolView,
    ActionTypeView,
    ActionView,
    AdvisorView,
    AgentView,
    ApplicationView,
    ConfigurationView,
    DocumentCollectionView,
    McpClientView,
    MemoryStrategyView,
    ModelView,
    PersonaView,
    ProviderView,
    SkillDependencyView,
    SkillToolView,
    SkillView,
    ToolView,
    TypeView,
    VectorStoreView,
)
from pilothouse.errors import InvalidStateError

V = TypeVar("V")

# Columns whose attribute on the mapped class has another name.
_RENAMED: dict[str, dict[str, str]] = {
    "action_schema": {"schema": "json_schema"},
    "action_advisor": {"advisor_order": "order"},
}


def _table(mapped: Any) -> Table:
    table: Table = mapped.__table__
    return table


def _fields(table: Table, row: RowMapping) -> dict[str, Any]:
    """A row's columns under the mapped class's attribute names."""
    renamed = _RENAMED.get(table.name, {})
    return {renamed.get(str(key), str(key)): value for key, value in row.items()}


def read_revision(connection: Connection, tenant: str) -> int:
    """Return the tenant's catalog revision (0 before any catalog write)."""
    table = _table(CatalogRevision)
    value = connection.execute(
        select(table.c.revision).where(table.c.tenant == tenant)
    ).scalar_one_or_none()
    return int(value or 0)


class CatalogReader:
    """Reads catalog rows of one tenant into views, each row once.

    One reader serves one compile, inside one transaction: what it has read
    it keeps, so rows named from several places (a tool of the action and of
    a skill, a model of the action and of a collection) are read once and
    are the same view.

    Args:
        connection: the transaction's connection.
        tenant: the tenant whose catalog is read.
    """

    def __init__(self, connection: Connection, tenant: str) -> None:
        self._connection = connection
        self._tenant = tenant
        self._seen: dict[tuple[str, int], Any] = {}
        self._building: set[int] = set()

    # -- entry points -----------------------------------------------------

    def action(self, code: str) -> ActionView | None:
        """The tenant's action ``code`` with everything it names, or None."""
        row = self._by_key(_table(Action), "code", code)
        return None if row is None else self._remember(_table(Action), row, self._action)

    def agent(self, code: str) -> AgentView | None:
        """The tenant's agent ``code`` with its application, type and goal action, or None."""
        row = self._by_key(_table(Agent), "code", code)
        return None if row is None else self._remember(_table(Agent), row, self._agent)

    def mcp_clients(self, names: Sequence[str]) -> dict[str, McpClientView]:
        """The tenant's MCP clients among ``names``, by name (absent names are left out)."""
        if not names:
            return {}
        table = _table(McpClient)
        rows = self._connection.execute(
            select(table).where(table.c.tenant == self._tenant, table.c.name.in_(sorted(names)))
        ).mappings()
        found = [self._remember(table, row, self._mcp_client) for row in rows]
        return {client.name: client for client in found}

    def collections(self, codes: Sequence[str]) -> dict[str, bool]:
        """Whether each of the tenant's document collections among ``codes`` is active."""
        table = _table(DocumentCollection)
        rows = self._connection.execute(
            select(table.c.code, table.c.active).where(
                table.c.tenant == self._tenant, table.c.code.in_(sorted(set(codes)))
            )
        )
        return {str(code): bool(active) for code, active in rows}

    # -- reading ----------------------------------------------------------

    def _by_key(self, table: Table, column: str, value: str) -> RowMapping | None:
        return (
            self._connection.execute(
                select(table).where(table.c.tenant == self._tenant, table.c[column] == value)
            )
            .mappings()
            .one_or_none()
        )

    def _get(self, mapped: Any, id_: int, build: Callable[[RowMapping], V]) -> V:
        table = _table(mapped)
        known = self._seen.get((table.name, id_))
        if known is not None:
            found: V = known
            return found
        row = (
            self._connection.execute(select(table).where(table.c.id == id_))
            .mappings()
            .one_or_none()
        )
        if row is None:
            # Foreign keys make this impossible on a sound database.
            raise InvalidStateError(f"the catalog's {table.name} {id_} is missing")
        return self._remember(table, row, build)

    def _maybe(self, mapped: Any, id_: int | None, build: Callable[[RowMapping], V]) -> V | None:
        return None if id_ is None else self._get(mapped, id_, build)

    def _remember(self, table: Table, row: RowMapping, build: Callable[[RowMapping], V]) -> V:
        key = (table.name, int(row["id"]))
        known = self._seen.get(key)
        if known is not None:
            found: V = known
            return found
        view = build(row)
        self._seen[key] = view
        return view

    def _links(
        self, mapped: Any, column: str, owner: int, order: str = "position"
    ) -> list[dict[str, Any]]:
        table = _table(mapped)
        rows = self._connection.execute(
            select(table).where(table.c[column] == owner).order_by(table.c[order])
        ).mappings()
        return [_fields(table, row) for row in rows]

    # -- builders ---------------------------------------------------------

    def _type(self, mapped: Any, id_: int | None) -> TypeView | None:
        return self._maybe(mapped, id_, lambda row: TypeView(**_fields(_table(mapped), row)))

    def _provider(self, row: RowMapping) -> ProviderView:
        return ProviderView(**_fields(_table(Provider), row))

    def _model(self, row: RowMapping) -> ModelView:
        fields = _fields(_table(Model), row)
        provider = self._get(Provider, fields["provider_id"], self._provider)
        return ModelView(**fields, provider=provider)

    def _tool(self, row: RowMapping) -> ToolView:
        fields = _fields(_table(Tool), row)
        return ToolView(**fields, type=self._type(ToolType, fields["type_id"]))

    def _mcp_client(self, row: RowMapping) -> McpClientView:
        fields = _fields(_table(McpClient), row)
        return McpClientView(**fields, type=self._type(McpClientType, fields["type_id"]))

    def _advisor(self, row: RowMapping) -> AdvisorView:
        fields = _fields(_table(Advisor), row)
        return AdvisorView(**fields, type=self._type(AdvisorType, fields["type_id"]))

    def _skill(self, row: RowMapping) -> SkillView:
        fields = _fields(_table(Skill), row)
        id_ = int(fields["id"])
        if id_ in self._building:
            # The catalog refuses cycles when it is written (skill_cycle_issues).
            raise InvalidStateError(f"skill '{fields['code']}' depends on itself")
        self._building.add(id_)
        try:
            parent = self._maybe(Skill, fields["parent_id"], self._skill)
            dependencies = tuple(
                SkillDependencyView(
                    **link, depends_on=self._get(Skill, link["depends_on_id"], self._skill)
                )
                for link in self._links(SkillDependency, "skill_id", id_)
            )
            tools = tuple(
                SkillToolView(**link, tool=self._get(Tool, link["tool_id"], self._tool))
                for link in self._links(SkillTool, "skill_id", id_)
            )
        finally:
            self._building.discard(id_)
        return SkillView(
            **fields,
            type=self._type(SkillType, fields["type_id"]),
            parent=parent,
            dependencies=dependencies,
            tools=tools,
        )

    def _vector_store(self, row: RowMapping) -> VectorStoreView:
        fields = _fields(_table(VectorStore), row)
        return VectorStoreView(**fields, type=self._type(VectorStoreType, fields["type_id"]))

    def _collection(self, row: RowMapping) -> DocumentCollectionView:
        fields = _fields(_table(DocumentCollection), row)
        return DocumentCollectionView(
            **fields,
            store=self._get(VectorStore, fields["store_id"], self._vector_store),
            embedding_model=self._maybe(Model, fields["embedding_model_id"], self._model),
            qa_model=self._maybe(Model, fields["qa_model_id"], self._model),
        )

    def _memory_strategy(self, row: RowMapping) -> MemoryStrategyView:
        fields = _fields(_table(MemoryStrategy), row)
        return MemoryStrategyView(**fields, type=self._type(MemoryStrategyType, fields["type_id"]))

    def _persona(self, row: RowMapping) -> PersonaView:
        fields = _fields(_table(Persona), row)
        return PersonaView(**fields, type=self._type(PersonaType, fields["type_id"]))

    def _action(self, row: RowMapping) -> ActionView:
        fields = _fields(_table(Action), row)
        id_ = int(fields["id"])
        action_type = self._maybe(
            ActionType,
            fields["type_id"],
            lambda type_row: ActionTypeView(**_fields(_table(ActionType), type_row)),
        )
        return ActionView(
            **fields,
            type=action_type,
            model=self._get(Model, fields["model_id"], self._model),
            configuration=self._get(
                Configuration,
                fields["configuration_id"],
                lambda c: ConfigurationView(**_fields(_table(Configuration), c)),
            ),
            persona=self._maybe(Persona, fields["persona_id"], self._persona),
            memory_strategy=self._maybe(
                MemoryStrategy, fields["memory_strategy_id"], self._memory_strategy
            ),
            schemas=tuple(
                ActionSchemaView(**link)
                for link in self._links(ActionSchema, "action_id", id_, order="id")
            ),
            skills=tuple(
                ActionSkillView(**link, skill=self._get(Skill, link["skill_id"], self._skill))
                for link in self._links(ActionSkill, "action_id", id_)
            ),
            tools=tuple(
                ActionToolView(**link, tool=self._get(Tool, link["tool_id"], self._tool))
                for link in self._links(ActionTool, "action_id", id_)
            ),
            mcp_clients=tuple(
                ActionMcpClientView(
                    **link,
                    mcp_client=self._get(McpClient, link["mcp_client_id"], self._mcp_client),
                )
                for link in self._links(ActionMcpClient, "action_id", id_)
            ),
            advisors=tuple(
                ActionAdvisorView(
                    **link, advisor=self._get(Advisor, link["advisor_id"], self._advisor)
                )
                for link in self._links(ActionAdvisor, "action_id", id_)
            ),
            collections=tuple(
                ActionCollectionView(
                    **link,
                    collection=self._get(
                        DocumentCollection, link["collection_id"], self._collection
                    ),
                )
                for link in self._links(ActionCollection, "action_id", id_)
            ),
        )

    def _agent(self, row: RowMapping) -> AgentView:
        fields = _fields(_table(Agent), row)
        return AgentView(
            **fields,
            application=self._get(
                Application,
                fields["application_id"],
                lambda a: ApplicationView(**_fields(_table(Application), a)),
            ),
            type=self._type(AgentType, fields["type_id"]),
            goal_action=self._maybe(Action, fields["goal_action_id"], self._action),
        )
