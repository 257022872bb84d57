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

__all__ = ["CatalogReader"]

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from sqlalchemy import Connection, RowMapping, Table, select

from pilothouse.catalog._tables import (
    action_advisor_table,
    action_collection_table,
    action_mcp_client_table,
    action_schema_table,
    action_skill_table,
    action_table,
    action_tool_table,
    action_type_table,
    advisor_table,
    advisor_type_table,
    agent_table,
    agent_type_table,
    application_table,
    configuration_table,
    document_collection_table,
    mcp_client_table,
    mcp_client_type_table,
    memory_strategy_table,
    memory_strategy_type_table,
    model_table,
    persona_table,
    persona_type_table,
    provider_table,
    skill_dependency_table,
    skill_table,
    skill_tool_table,
    skill_type_table,
    tool_table,
    tool_type_table,
    vector_store_table,
    vector_store_type_table,
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


def _fields(table: Table, row: RowMapping) -> dict[str, Any]:
    """A row's columns under the mapped class's attribute names."""
    renamed = _RENAMED.get(table.name, {})
    return {renamed.get(str(key), str(key)): value for key, value in row.items()}


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
        row = self._by_key(action_table, "code", code)
        return None if row is None else self._remember(action_table, row, self._action)

    def agent(self, code: str) -> AgentView | None:
        """The tenant's agent ``code`` with its application, type and goal action, or None."""
        row = self._by_key(agent_table, "code", code)
        return None if row is None else self._remember(agent_table, row, self._agent)

    def model(self, code: str) -> ModelView | None:
        """The tenant's model ``code`` with its provider, or None."""
        row = self._by_key(model_table, "code", code)
        return None if row is None else self._remember(model_table, row, self._model)

    def configuration(self, code: str) -> ConfigurationView | None:
        """The tenant's configuration ``code``, or None."""
        row = self._by_key(configuration_table, "code", code)
        return None if row is None else ConfigurationView(**_fields(configuration_table, row))

    def mcp_clients(self, names: Sequence[str]) -> dict[str, McpClientView]:
        """The tenant's MCP clients among ``names``, by name (absent names are left out)."""
        if not names:
            return {}
        table = mcp_client_table
        rows = self._connection.execute(
            select(table).where(table.c.tenant == self._tenant, table.c.name.in_(sorted(names)))
        ).mappings()
        found = [self._remember(table, row, self._mcp_client) for row in rows]
        return {client.name: client for client in found}

    def collections(self, codes: Sequence[str]) -> dict[str, bool]:
        """Whether each of the tenant's document collections among ``codes`` is active."""
        table = document_collection_table
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

    def _get(self, table: Table, id_: int, build: Callable[[RowMapping], V]) -> V:
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

    def _maybe(self, table: Table, id_: int | None, build: Callable[[RowMapping], V]) -> V | None:
        return None if id_ is None else self._get(table, id_, build)

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
        self, table: Table, column: str, owner: int, order: str = "position"
    ) -> list[dict[str, Any]]:
        rows = self._connection.execute(
            select(table).where(table.c[column] == owner).order_by(table.c[order])
        ).mappings()
        return [_fields(table, row) for row in rows]

    # -- builders ---------------------------------------------------------

    def _type(self, table: Table, id_: int | None) -> TypeView | None:
        return self._maybe(table, id_, lambda row: TypeView(**_fields(table, row)))

    def _provider(self, row: RowMapping) -> ProviderView:
        return ProviderView(**_fields(provider_table, row))

    def _model(self, row: RowMapping) -> ModelView:
        fields = _fields(model_table, row)
        provider = self._get(provider_table, fields["provider_id"], self._provider)
        return ModelView(**fields, provider=provider)

    def _tool(self, row: RowMapping) -> ToolView:
        fields = _fields(tool_table, row)
        return ToolView(**fields, type=self._type(tool_type_table, fields["type_id"]))

    def _mcp_client(self, row: RowMapping) -> McpClientView:
        fields = _fields(mcp_client_table, row)
        return McpClientView(**fields, type=self._type(mcp_client_type_table, fields["type_id"]))

    def _advisor(self, row: RowMapping) -> AdvisorView:
        fields = _fields(advisor_table, row)
        return AdvisorView(**fields, type=self._type(advisor_type_table, fields["type_id"]))

    def _skill(self, row: RowMapping) -> SkillView:
        fields = _fields(skill_table, row)
        id_ = int(fields["id"])
        if id_ in self._building:
            # The catalog refuses cycles when it is written (skill_cycle_issues).
            raise InvalidStateError(f"skill '{fields['code']}' depends on itself")
        self._building.add(id_)
        try:
            parent = self._maybe(skill_table, fields["parent_id"], self._skill)
            dependencies = tuple(
                SkillDependencyView(
                    **link, depends_on=self._get(skill_table, link["depends_on_id"], self._skill)
                )
                for link in self._links(skill_dependency_table, "skill_id", id_)
            )
            tools = tuple(
                SkillToolView(**link, tool=self._get(tool_table, link["tool_id"], self._tool))
                for link in self._links(skill_tool_table, "skill_id", id_)
            )
        finally:
            self._building.discard(id_)
        return SkillView(
            **fields,
            type=self._type(skill_type_table, fields["type_id"]),
            parent=parent,
            dependencies=dependencies,
            tools=tools,
        )

    def _vector_store(self, row: RowMapping) -> VectorStoreView:
        fields = _fields(vector_store_table, row)
        return VectorStoreView(
            **fields, type=self._type(vector_store_type_table, fields["type_id"])
        )

    def _collection(self, row: RowMapping) -> DocumentCollectionView:
        fields = _fields(document_collection_table, row)
        return DocumentCollectionView(
            **fields,
            store=self._get(vector_store_table, fields["store_id"], self._vector_store),
            embedding_model=self._maybe(model_table, fields["embedding_model_id"], self._model),
            qa_model=self._maybe(model_table, fields["qa_model_id"], self._model),
        )

    def _memory_strategy(self, row: RowMapping) -> MemoryStrategyView:
        fields = _fields(memory_strategy_table, row)
        return MemoryStrategyView(
            **fields, type=self._type(memory_strategy_type_table, fields["type_id"])
        )

    def _persona(self, row: RowMapping) -> PersonaView:
        fields = _fields(persona_table, row)
        return PersonaView(**fields, type=self._type(persona_type_table, fields["type_id"]))

    def _action(self, row: RowMapping) -> ActionView:
        fields = _fields(action_table, row)
        id_ = int(fields["id"])
        action_type = self._maybe(
            action_type_table,
            fields["type_id"],
            lambda type_row: ActionTypeView(**_fields(action_type_table, type_row)),
        )
        return ActionView(
            **fields,
            type=action_type,
            model=self._get(model_table, fields["model_id"], self._model),
            configuration=self._get(
                configuration_table,
                fields["configuration_id"],
                lambda c: ConfigurationView(**_fields(configuration_table, c)),
            ),
            persona=self._maybe(persona_table, fields["persona_id"], self._persona),
            memory_strategy=self._maybe(
                memory_strategy_table, fields["memory_strategy_id"], self._memory_strategy
            ),
            schemas=tuple(
                ActionSchemaView(**link)
                for link in self._links(action_schema_table, "action_id", id_, order="id")
            ),
            skills=tuple(
                ActionSkillView(**link, skill=self._get(skill_table, link["skill_id"], self._skill))
                for link in self._links(action_skill_table, "action_id", id_)
            ),
            tools=tuple(
                ActionToolView(**link, tool=self._get(tool_table, link["tool_id"], self._tool))
                for link in self._links(action_tool_table, "action_id", id_)
            ),
            mcp_clients=tuple(
                ActionMcpClientView(
                    **link,
                    mcp_client=self._get(mcp_client_table, link["mcp_client_id"], self._mcp_client),
                )
                for link in self._links(action_mcp_client_table, "action_id", id_)
            ),
            advisors=tuple(
                ActionAdvisorView(
                    **link, advisor=self._get(advisor_table, link["advisor_id"], self._advisor)
                )
                for link in self._links(action_advisor_table, "action_id", id_)
            ),
            collections=tuple(
                ActionCollectionView(
                    **link,
                    collection=self._get(
                        document_collection_table, link["collection_id"], self._collection
                    ),
                )
                for link in self._links(action_collection_table, "action_id", id_)
            ),
        )

    def _agent(self, row: RowMapping) -> AgentView:
        fields = _fields(agent_table, row)
        return AgentView(
            **fields,
            application=self._get(
                application_table,
                fields["application_id"],
                lambda a: ApplicationView(**_fields(application_table, a)),
            ),
            type=self._type(agent_type_table, fields["type_id"]),
            goal_action=self._maybe(action_table, fields["goal_action_id"], self._action),
        )
