"""The registry of catalog kinds and the one conversion between specs and rows.

Each :class:`CatalogKind` ties a YAML/API kind name (``actions``) to its
SQLAlchemy model and its pydantic spec, and declares how the spec's business
key references map onto relationships and link rows. The importer, the
exporter and the repository all convert through :meth:`CatalogKind.to_spec`
and :meth:`CatalogKind.apply`, so the three can never disagree on a field.
"""

from __future__ import annotations

__all__ = ["KINDS", "CatalogKind", "Link", "Ref", "Resolve", "catalog_kind"]

import copy
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from pilothouse.catalog._budgets import BudgetSpec
from pilothouse.catalog._enums import ModelCapability
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
    Budget,
    CatalogEntity,
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
from pilothouse.catalog._spec import (
    ActionAdvisorSpec,
    ActionSpec,
    ActionTypeSpec,
    AdvisorSpec,
    AdvisorTypeSpec,
    AgentSpec,
    AgentTypeSpec,
    ApplicationSpec,
    CatalogSpec,
    ConfigurationSpec,
    DocumentCollectionSpec,
    McpClientSpec,
    McpClientTypeSpec,
    MemoryStrategySpec,
    MemoryStrategyTypeSpec,
    ModelSpec,
    PersonaSpec,
    PersonaTypeSpec,
    ProviderSpec,
    SkillSpec,
    SkillToolSpec,
    SkillTypeSpec,
    ToolSpec,
    ToolTypeSpec,
    VectorStoreSpec,
    VectorStoreTypeSpec,
)
from pilothouse.catalog._virtual import (
    VirtualServer,
    VirtualServerAction,
    VirtualServerAgent,
    VirtualServerSpec,
    VirtualServerTool,
    split_operation,
)
from pilothouse.store._base import Base

Resolve = Callable[[str, str], CatalogEntity]
"""Finds the row of ``(kind name, business key)`` among the tenant's rows."""

Location = tuple[str | int, ...]
"""A path to a value inside a spec: ``("advisors", 0)``."""


@dataclass(frozen=True)
class Ref:
    """A single reference: spec field ``field`` holds the key of a ``target`` row.

    The ORM relationship has the same name as the spec field and its foreign
    key column is ``<field>_id``.
    """

    field: str
    target: str

    @property
    def fk(self) -> str:
        """The foreign key column on the referring row."""
        return f"{self.field}_id"


@dataclass(frozen=True)
class Link:
    """An ordered list of references, stored as link rows.

    Attributes:
        field: the spec field (a list of keys).
        target: the kind the keys belong to.
        collection: the owner's relationship holding the link rows.
        link_model: the link row class.
        target_attr: the link row's relationship to the target row.
        owner_fk: the link row's column pointing at the owner.
        target_fk: the link row's column pointing at the target.
        with_order: whether each item also carries an ``order`` (advisors).
    """

    field: str
    target: str
    collection: str
    link_model: type[Base]
    target_attr: str
    owner_fk: str
    target_fk: str
    with_order: bool = False


@dataclass(frozen=True)
class CatalogKind:
    """One kind of catalog entity: its name, model, spec and references."""

    name: str
    model: type[CatalogEntity]
    spec: type[CatalogSpec]
    refs: tuple[Ref, ...] = ()
    links: tuple[Link, ...] = ()
    scalars: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        special = {r.field for r in self.refs} | {lk.field for lk in self.links} | {"schemas"}
        names = tuple(n for n in self.spec.model_fields if n not in special)
        object.__setattr__(self, "scalars", names)

    @property
    def entity_name(self) -> str:
        """The singular readable name used in messages, e.g. ``mcp client``."""
        return self.model.entity_name

    @property
    def key_field(self) -> str:
        """The business key field, ``code`` or ``name``."""
        return self.model.key_field

    @property
    def key_length(self) -> int:
        """The longest business key this kind accepts."""
        return self.model.key_length

    def key_column(self) -> Any:
        """The mapped column of the business key, for queries."""
        return getattr(self.model, self.key_field)

    def references(self, spec: CatalogSpec) -> list[tuple[Location, str, str]]:
        """List every reference a spec makes.

        Args:
            spec: a spec of this kind.

        Returns:
            ``(location, target kind name, key)`` triples, in field order.
        """
        found: list[tuple[Location, str, str]] = []
        for ref in self.refs:
            key: str | None = getattr(spec, ref.field)
            if key is not None:
                found.append(((ref.field,), ref.target, key))
        for link in self.links:
            for index, key in enumerate(_link_keys(spec, link)):
                found.append(((link.field, index), link.target, key))
        if self.name == "memory_strategies":
            found += _memory_references(cast(dict[str, Any], getattr(spec, "settings", {})))
        if isinstance(spec, VirtualServerSpec):
            # A single operation names its gateway row: a tool like any other.
            for index, member in enumerate(spec.operations):
                found.append((("operations", index), "tools", split_operation(member)[0]))
        return found

    def to_spec(self, row: CatalogEntity, keys: Callable[[str], str] = str) -> CatalogSpec:
        """Read a stored row back into its spec.

        Args:
            row: a row of this kind, with its relationships loaded.
            keys: what to write for each key (its own and the ones it refers
                to); the key itself by default.

        Returns:
            The spec that, applied to an empty row, reproduces ``row``.
        """
        data: dict[str, Any] = {name: getattr(row, name) for name in self.scalars}
        data[self.key_field] = keys(data[self.key_field])
        for ref in self.refs:
            target: CatalogEntity | None = getattr(row, ref.field)
            data[ref.field] = None if target is None else keys(target.key)
        for link in self.links:
            items: list[Any] = []
            for link_row in getattr(row, link.collection):
                key = keys(getattr(link_row, link.target_attr).key)
                if link.with_order:
                    items.append({"advisor": key, "order": link_row.order})
                elif isinstance(link_row, SkillTool):
                    items.append({"tool": key, "access": link_row.access_level})
                else:
                    items.append(key)
            data[link.field] = items
        if isinstance(row, Action):
            data["schemas"] = {
                _DIRECTION_FIELD[s.direction]: {
                    "cardinality": s.cardinality,
                    "hint": s.hint,
                    "schema": s.json_schema,
                }
                for s in row.schemas
            }
        return self.spec.model_validate(data)

    def apply(self, row: CatalogEntity, spec: CatalogSpec, resolve: Resolve) -> None:
        """Make ``row`` match ``spec`` exactly, link rows included.

        Fields that already match are left alone, so an unchanged spec writes
        nothing. The caller sets ``updated_by``/``updated_at``.

        Args:
            row: the row to change (new or loaded, with relationships).
            spec: a validated spec of this kind.
            resolve: finds referenced rows by kind name and key.
        """
        for name in self.scalars:
            value: Any = getattr(spec, name)
            if name == "capabilities":
                value = [ModelCapability(c).value for c in value]
            elif isinstance(value, dict | list):
                # The row must not share a mutable value with the spec.
                value = _copy(value)
            if getattr(row, name, None) != value:
                setattr(row, name, value)
        for ref in self.refs:
            key: str | None = getattr(spec, ref.field)
            target = None if key is None else resolve(ref.target, key)
            if getattr(row, ref.field, None) is not target:
                setattr(row, ref.field, target)
        for link in self.links:
            _sync_links(row, spec, link, resolve)
        if isinstance(row, Action):
            assert isinstance(spec, ActionSpec)
            _sync_schemas(row, spec)


def _copy(value: Any) -> Any:
    return copy.deepcopy(value)


def _item_key(item: Any) -> str:
    if isinstance(item, ActionAdvisorSpec):
        return item.advisor
    if isinstance(item, SkillToolSpec):
        return item.tool
    return str(item)


def _link_keys(spec: CatalogSpec, link: Link) -> list[str]:
    items: list[Any] = getattr(spec, link.field)
    return [_item_key(item) for item in items]


def _sync_links(row: CatalogEntity, spec: CatalogSpec, link: Link, resolve: Resolve) -> None:
    current: list[Any] = getattr(row, link.collection)
    items: list[Any] = getattr(spec, link.field)
    # Keep the link rows of targets that stay (updating position in place)
    # rather than delete and re-insert rows with the same primary key.
    by_target = {id(getattr(lr, link.target_attr)): lr for lr in current}
    wanted: list[Any] = []
    for position, item in enumerate(items):
        key = _item_key(item)
        target = resolve(link.target, key)
        link_row: Any = by_target.pop(id(target), None)
        if link_row is None:
            link_row = link.link_model(**{link.target_attr: target})
        if getattr(link_row, "position", None) != position:
            link_row.position = position
        if link.with_order and isinstance(item, ActionAdvisorSpec) and link_row.order != item.order:
            link_row.order = item.order
        if isinstance(item, SkillToolSpec) and link_row.access_level != item.access:
            link_row.access_level = item.access
        wanted.append(link_row)
    if [id(x) for x in current] != [id(x) for x in wanted]:
        setattr(row, link.collection, wanted)


_DIRECTION_FIELD = {"I": "input", "O": "output", "M": "memory"}


def _sync_schemas(row: Action, spec: ActionSpec) -> None:
    current = {s.direction: s for s in row.schemas}
    wanted: list[ActionSchema] = []
    for direction, schema in spec.schemas.items():
        stored = current.pop(direction, None) or ActionSchema(direction=direction)
        if stored.cardinality != schema.cardinality:
            stored.cardinality = schema.cardinality
        if stored.hint != schema.hint:
            stored.hint = schema.hint
        if stored.json_schema != schema.json_schema:
            stored.json_schema = copy.deepcopy(schema.json_schema)
        wanted.append(stored)
    if [id(x) for x in row.schemas] != [id(x) for x in wanted]:
        row.schemas = wanted


def _type_kind(name: str, model: type[CatalogEntity], spec: type[CatalogSpec]) -> CatalogKind:
    return CatalogKind(name, model, spec)


def _links(owner: str, *links: tuple[str, str, type[Base], str]) -> tuple[Link, ...]:
    return tuple(
        Link(
            field=f,
            target=target,
            collection=f,
            link_model=cls,
            target_attr=attr,
            owner_fk=f"{owner}_id",
            target_fk=f"{attr}_id",
            with_order=cls is ActionAdvisor,
        )
        for f, target, cls, attr in links
    )


_KIND_LIST: Sequence[CatalogKind] = (
    CatalogKind("providers", Provider, ProviderSpec),
    CatalogKind("models", Model, ModelSpec, refs=(Ref("provider", "providers"),)),
    CatalogKind("configurations", Configuration, ConfigurationSpec),
    _type_kind("persona_types", PersonaType, PersonaTypeSpec),
    CatalogKind("personas", Persona, PersonaSpec, refs=(Ref("type", "persona_types"),)),
    _type_kind("tool_types", ToolType, ToolTypeSpec),
    CatalogKind("tools", Tool, ToolSpec, refs=(Ref("type", "tool_types"),)),
    _type_kind("skill_types", SkillType, SkillTypeSpec),
    CatalogKind(
        "skills",
        Skill,
        SkillSpec,
        refs=(Ref("type", "skill_types"), Ref("parent", "skills")),
        links=(
            Link(
                "depends_on",
                "skills",
                "dependencies",
                SkillDependency,
                "depends_on",
                "skill_id",
                "depends_on_id",
            ),
            Link("tools", "tools", "tools", SkillTool, "tool", "skill_id", "tool_id"),
        ),
    ),
    _type_kind("mcp_client_types", McpClientType, McpClientTypeSpec),
    CatalogKind("mcp_clients", McpClient, McpClientSpec, refs=(Ref("type", "mcp_client_types"),)),
    _type_kind("advisor_types", AdvisorType, AdvisorTypeSpec),
    CatalogKind("advisors", Advisor, AdvisorSpec, refs=(Ref("type", "advisor_types"),)),
    _type_kind("vector_store_types", VectorStoreType, VectorStoreTypeSpec),
    CatalogKind(
        "vector_stores", VectorStore, VectorStoreSpec, refs=(Ref("type", "vector_store_types"),)
    ),
    CatalogKind(
        "document_collections",
        DocumentCollection,
        DocumentCollectionSpec,
        refs=(
            Ref("store", "vector_stores"),
            Ref("embedding_model", "models"),
            Ref("qa_model", "models"),
        ),
    ),
    _type_kind("memory_strategy_types", MemoryStrategyType, MemoryStrategyTypeSpec),
    CatalogKind(
        "memory_strategies",
        MemoryStrategy,
        MemoryStrategySpec,
        refs=(Ref("type", "memory_strategy_types"),),
    ),
    _type_kind("action_types", ActionType, ActionTypeSpec),
    CatalogKind(
        "actions",
        Action,
        ActionSpec,
        refs=(
            Ref("type", "action_types"),
            Ref("model", "models"),
            Ref("configuration", "configurations"),
            Ref("persona", "personas"),
            Ref("memory_strategy", "memory_strategies"),
        ),
        links=_links(
            "action",
            ("skills", "skills", ActionSkill, "skill"),
            ("tools", "tools", ActionTool, "tool"),
            ("mcp_clients", "mcp_clients", ActionMcpClient, "mcp_client"),
            ("advisors", "advisors", ActionAdvisor, "advisor"),
            ("collections", "document_collections", ActionCollection, "collection"),
        ),
    ),
    CatalogKind("applications", Application, ApplicationSpec),
    _type_kind("agent_types", AgentType, AgentTypeSpec),
    CatalogKind(
        "agents",
        Agent,
        AgentSpec,
        refs=(
            Ref("application", "applications"),
            Ref("type", "agent_types"),
            Ref("goal_action", "actions"),
        ),
    ),
    CatalogKind(
        "budgets",
        Budget,
        BudgetSpec,
        refs=(
            Ref("model", "models"),
            Ref("provider", "providers"),
            Ref("downgrade_to", "models"),
        ),
    ),
    CatalogKind(
        "virtual_servers",
        VirtualServer,
        VirtualServerSpec,
        links=(
            Link(
                "actions",
                "actions",
                "actions",
                VirtualServerAction,
                "action",
                "virtual_server_id",
                "action_id",
            ),
            Link(
                "agents",
                "agents",
                "agents",
                VirtualServerAgent,
                "agent",
                "virtual_server_id",
                "agent_id",
            ),
            Link(
                "tools", "tools", "tools", VirtualServerTool, "tool", "virtual_server_id", "tool_id"
            ),
        ),
    ),
)

KINDS: dict[str, CatalogKind] = {kind.name: kind for kind in _KIND_LIST}
"""Every catalog kind by name, in dependency order (referenced kinds first)."""


def catalog_kind(kind: str | CatalogKind) -> CatalogKind:
    """Look a kind up by name.

    Args:
        kind: a kind name such as ``actions``, or a kind (returned as is).

    Returns:
        The kind.

    Raises:
        KeyError: with a message suggesting the closest kind name.
    """
    if isinstance(kind, CatalogKind):
        return kind
    try:
        return KINDS[kind]
    except KeyError:
        raise KeyError(f"unknown kind {kind!r}{suggest(kind, KINDS)}") from None


def suggest(word: str, choices: Sequence[str] | dict[str, Any]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _memory_references(settings: dict[str, Any]) -> list[tuple[Location, str, str]]:
    """The codes a scoped memory strategy's settings name: collections and a model.

    They live in the settings' JSON (no foreign key), so the catalog checks
    them as references: a missing one is refused when written, not found by
    the first turn.
    """
    found: list[tuple[Location, str, str]] = []
    collections = settings.get("organization_collections")
    if isinstance(collections, list):
        for index, code in enumerate(cast(list[Any], collections)):
            if isinstance(code, str):
                found.append(
                    (("settings", "organization_collections", index), "document_collections", code)
                )
    model = settings.get("extraction_model")
    if isinstance(model, str):
        found.append((("settings", "extraction_model"), "models", model))
    return found
