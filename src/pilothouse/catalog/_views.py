"""Read-only views of the catalog rows a compiled action is built from.

A turn's first compile used to load the action through the ORM: the mapped
classes, their mapper configuration and seven ORM statements were a large
share of a cold start (``docs/architecture.md``, "Cold start"). The compile
now reads the same rows with Core statements (:mod:`pilothouse.catalog._read`)
into these frozen views. Each view carries its table's columns and the
relationships the mapped class loads eagerly, under the mapped class's own
attribute names, so code written against a row (a prompt contributor reading
``context.action.persona.prompt``) reads a view the same way. Everything
that takes a view also takes the mapped row (``ToolRecord`` and friends are
unions), which is what the catalog's own admin paths hold.

This module imports no SQLAlchemy: a turn that never touches the ORM never
loads it.
"""

from __future__ import annotations

__all__ = [
    "ActionAdvisorView",
    "ActionRecord",
    "ActionCollectionView",
    "ActionMcpClientView",
    "ActionSchemaView",
    "ActionSkillView",
    "ActionToolView",
    "ActionTypeView",
    "ActionView",
    "AdvisorRecord",
    "AdvisorView",
    "AgentRecord",
    "AgentView",
    "ApplicationView",
    "ConfigurationView",
    "DocumentCollectionView",
    "EntityView",
    "McpClientRecord",
    "McpClientView",
    "MemoryStrategyView",
    "ModelRecord",
    "ModelView",
    "PersonaView",
    "ProviderView",
    "SkillDependencyView",
    "SkillRecord",
    "SkillToolView",
    "SkillView",
    "ToolRecord",
    "ToolView",
    "TypeView",
    "VectorStoreView",
]

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, TypeAlias

from pilothouse.catalog._enums import (
    Cardinality,
    ExecutionPolicy,
    FormHint,
    McpTransport,
    MemoryKind,
    ProviderKind,
    SchemaDirection,
    SearchMode,
    ToolKind,
    VectorStoreKind,
)

if TYPE_CHECKING:
    from pilothouse.catalog._models import Action, Advisor, Agent, McpClient, Model, Skill, Tool


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class EntityView:
    """Columns every catalog entity has (``CatalogEntity``).

    Attributes:
        id: the row's id.
        tenant: the tenant it belongs to.
        active: whether it may be used.
        version: its optimistic-concurrency version.
        updated_at: when it last changed.
        updated_by: who changed it.
    """

    id: int
    tenant: str
    active: bool
    version: int
    updated_at: datetime
    updated_by: str


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class TypeView(EntityView):
    """A classification row (persona type, skill type, tool type, ...)."""

    code: str
    name: str
    description: str | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionTypeView(TypeView):
    """An action type, with the constraint prompt it adds to its actions."""

    constraint_prompt: str | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ProviderView(EntityView):
    """A model vendor or server (``Provider``); ``api_key`` is a secret reference."""

    code: str
    name: str
    kind: ProviderKind
    base_url: str | None
    api_key: str | None
    headers: dict[str, Any]
    settings: dict[str, Any]
    description: str | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ModelView(EntityView):
    """One model of a provider (``Model``), with its provider."""

    code: str
    provider_id: int
    model_name: str
    knowledge_cutoff: date | None
    input_price: Decimal | None
    output_price: Decimal | None
    capabilities: list[Any]
    context_window: int | None
    description: str | None
    dimension: int | None
    max_input_tokens: int | None
    query_prefix: str | None
    document_prefix: str | None
    provider: ProviderView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ConfigurationView(EntityView):
    """Sampling parameters and limits of a model call (``Configuration``)."""

    code: str
    name: str
    temperature: float | None
    top_p: float | None
    top_k: int | None
    max_tokens: int
    stop: list[Any]
    presence_penalty: float | None
    frequency_penalty: float | None
    retry_count: int
    retry_delay: float


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class PersonaView(EntityView):
    """A reusable voice or role prompt (``Persona``)."""

    code: str
    name: str
    type_id: int | None
    prompt: str
    type: TypeView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ToolView(EntityView):
    """A catalog tool (``Tool``)."""

    code: str
    name: str
    type_id: int | None
    kind: ToolKind
    implementation: str | None
    description: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    policy: ExecutionPolicy
    settings: dict[str, Any]
    release: str
    type: TypeView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SkillToolView:
    """A tool linked to a skill (``SkillTool``)."""

    skill_id: int
    tool_id: int
    position: int
    access_level: str
    tool: ToolView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SkillView(EntityView):
    """A skill (``Skill``) with its parent, dependencies and tools."""

    code: str
    name: str
    type_id: int | None
    description: str | None
    prompt: str
    parent_id: int | None
    execution: str
    release: str
    type: TypeView | None
    parent: SkillView | None
    dependencies: tuple[SkillDependencyView, ...]
    tools: tuple[SkillToolView, ...]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class SkillDependencyView:
    """A skill another skill depends on (``SkillDependency``)."""

    skill_id: int
    depends_on_id: int
    position: int
    depends_on: SkillView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class McpClientView(EntityView):
    """An MCP server the catalog names (``McpClient``); its key is ``name``."""

    name: str
    type_id: int | None
    transport: McpTransport
    command: str | None
    args: list[Any]
    env: dict[str, Any]
    url: str | None
    headers: dict[str, Any]
    confidential_headers: list[Any]
    description: str | None
    input_schema: dict[str, Any] | None
    output_schema: dict[str, Any] | None
    type: TypeView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AdvisorView(EntityView):
    """An advisor around model calls (``Advisor``)."""

    code: str
    name: str
    type_id: int | None
    implementation: str
    default_order: int
    settings: dict[str, Any]
    type: TypeView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class VectorStoreView(EntityView):
    """Where a document collection's vectors live (``VectorStore``)."""

    code: str
    name: str
    type_id: int | None
    kind: VectorStoreKind
    connection: str | None
    default_collection: str | None
    settings: dict[str, Any]
    type: TypeView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DocumentCollectionView(EntityView):
    """A document collection retrieval searches (``DocumentCollection``)."""

    code: str
    name: str
    store_id: int
    collection_name: str
    similarity_threshold: float
    top_k: int
    embedding_model_id: int | None
    chunk_size: int | None
    chunk_overlap: int
    search_mode: SearchMode
    qa_model_id: int | None
    rerank: bool
    rerank_candidates: int
    store: VectorStoreView
    embedding_model: ModelView | None
    qa_model: ModelView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class MemoryStrategyView(EntityView):
    """How a conversation's history is kept (``MemoryStrategy``)."""

    code: str
    name: str
    type_id: int | None
    kind: MemoryKind
    window_size: int
    token_budget: int | None
    settings: dict[str, Any]
    type: TypeView | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionSchemaView:
    """An action's input or output schema (``ActionSchema``)."""

    id: int
    action_id: int
    direction: SchemaDirection
    cardinality: Cardinality
    json_schema: dict[str, Any]
    hint: FormHint | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionSkillView:
    """A skill linked to an action (``ActionSkill``)."""

    action_id: int
    skill_id: int
    position: int
    skill: SkillView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionToolView:
    """A tool linked to an action (``ActionTool``)."""

    action_id: int
    tool_id: int
    position: int
    tool: ToolView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionMcpClientView:
    """An MCP client linked to an action (``ActionMcpClient``)."""

    action_id: int
    mcp_client_id: int
    position: int
    mcp_client: McpClientView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionAdvisorView:
    """An advisor linked to an action (``ActionAdvisor``), with its order there."""

    action_id: int
    advisor_id: int
    order: int | None
    position: int
    advisor: AdvisorView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionCollectionView:
    """A document collection linked to an action (``ActionCollection``)."""

    action_id: int
    collection_id: int
    position: int
    collection: DocumentCollectionView


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ActionView(EntityView):
    """An action (``Action``) with everything its compile reads."""

    code: str
    name: str
    goal_description: str | None
    type_id: int | None
    model_id: int
    configuration_id: int
    persona_id: int | None
    memory_strategy_id: int | None
    prompt: str
    audit: bool | None
    question_timeout: int
    ask_user: bool
    progressive_disclosure: bool
    type: ActionTypeView | None
    model: ModelView
    configuration: ConfigurationView
    persona: PersonaView | None
    memory_strategy: MemoryStrategyView | None
    schemas: tuple[ActionSchemaView, ...]
    skills: tuple[ActionSkillView, ...]
    tools: tuple[ActionToolView, ...]
    mcp_clients: tuple[ActionMcpClientView, ...]
    advisors: tuple[ActionAdvisorView, ...]
    collections: tuple[ActionCollectionView, ...]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ApplicationView(EntityView):
    """The application an agent belongs to (``Application``)."""

    code: str
    name: str
    system_prompt: str | None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class AgentView(EntityView):
    """An agent (``Agent``) with its application, type and goal action."""

    code: str
    name: str
    application_id: int
    type_id: int | None
    prompt: str | None
    goal_action_id: int | None
    application: ApplicationView
    type: TypeView | None
    goal_action: ActionView | None


# What code that reads a row takes: the view a compile reads, or the mapped
# row the catalog's admin paths hold (both have the same attribute names).
# Strings, so that this module imports no SQLAlchemy at run time.
ToolRecord: TypeAlias = "Tool | ToolView"
McpClientRecord: TypeAlias = "McpClient | McpClientView"
ModelRecord: TypeAlias = "Model | ModelView"
AdvisorRecord: TypeAlias = "Advisor | AdvisorView"
ActionRecord: TypeAlias = "Action | ActionView"
AgentRecord: TypeAlias = "Agent | AgentView"
SkillRecord: TypeAlias = "Skill | SkillView"
