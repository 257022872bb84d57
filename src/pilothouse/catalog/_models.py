"""The catalog: every entity an application declares, as typed SQLAlchemy models.

The models are mapped classes declared on the Core tables of
:mod:`pilothouse.catalog._tables` (the schema is there); this module imports
SQLAlchemy's ORM, which a turn on the store's fast path does not need.

Every row belongs to a tenant, carries a business key (``code``; MCP clients
use ``name``) unique within that tenant, an active flag, a version used for
optimistic concurrency, and who changed it when. Secrets are only ever stored
as ``@secrets(NAME)`` references.
"""

from __future__ import annotations

__all__ = [
    "ADHOC_ACTION",
    "CODE_LENGTHS",
    "DEFAULT_RELEASE",
    "DIRECT_TOOL_ACTION",
    "RESERVED_ACTION_CODES",
    "Action",
    "ActionAdvisor",
    "ActionCollection",
    "ActionMcpClient",
    "ActionSchema",
    "ActionSkill",
    "ActionTool",
    "ActionType",
    "Advisor",
    "AdvisorType",
    "Agent",
    "AgentType",
    "Application",
    "Budget",
    "CatalogEntity",
    "CatalogRevision",
    "Configuration",
    "DocumentCollection",
    "McpClient",
    "McpClientType",
    "MemoryStrategy",
    "MemoryStrategyType",
    "Model",
    "Persona",
    "PersonaType",
    "Provider",
    "Skill",
    "SkillDependency",
    "SkillTool",
    "SkillType",
    "Tool",
    "ToolType",
    "VectorStore",
    "VectorStoreType",
]

from datetime import date, datetime
from decimal import Decimal
from typing import Any, ClassVar

from sqlalchemy.orm import Mapped, column_property, declared_attr, relationship

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
from pilothouse.catalog._lengths import CODE, MCP_NAME, SHORT_CODE, TYPE_CODE
from pilothouse.catalog._reserved import ADHOC_ACTION, DIRECT_TOOL_ACTION, RESERVED_ACTION_CODES
from pilothouse.catalog._tables import (
    DEFAULT_RELEASE,
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
    budget_table,
    catalog_revision_table,
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
from pilothouse.store._base import Base


class CatalogRevision(Base):
    """The catalog version of one tenant, bumped by every catalog write.

    Compiled actions are cached per revision, so a turn never re-reads a
    catalog that has not changed.
    """

    __table__ = catalog_revision_table

    tenant: Mapped[str]
    revision: Mapped[int]
    updated_at: Mapped[datetime]


class CatalogEntity(Base):
    """Columns and rules every catalog row shares."""

    __abstract__ = True
    key_field: ClassVar[str] = "code"
    key_length: ClassVar[int] = CODE
    entity_name: ClassVar[str] = "entity"

    id: Mapped[int]
    tenant: Mapped[str]
    active: Mapped[bool]
    version: Mapped[int]
    updated_at: Mapped[datetime]
    updated_by: Mapped[str]

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:
        # SQLAlchemy checks the version in every UPDATE's WHERE clause, so a
        # write that raced a newer one fails instead of silently winning.
        return {"version_id_col": cls.__table__.c.version}

    @property
    def key(self) -> str:
        """The business key (``code``, or ``name`` for MCP clients)."""
        value: str = getattr(self, self.key_field)
        return value


class _TypeEntity(CatalogEntity):
    """A classification row (persona type, skill type, ...): code, name, description."""

    __abstract__ = True
    key_length = TYPE_CODE

    code: Mapped[str]
    name: Mapped[str]
    description: Mapped[str | None]


class Provider(CatalogEntity):
    """A model vendor or server and how to reach it."""

    __table__ = provider_table
    entity_name = "provider"
    key_length = TYPE_CODE

    code: Mapped[str]
    name: Mapped[str]
    kind: Mapped[ProviderKind]
    base_url: Mapped[str | None]
    api_key: Mapped[str | None]
    """A ``@secrets(NAME)`` reference, never a key."""
    headers: Mapped[dict[str, Any]]
    settings: Mapped[dict[str, Any]]
    description: Mapped[str | None]

    models: Mapped[list[Model]] = relationship(back_populates="provider", lazy="raise")


class Model(CatalogEntity):
    """One model of a provider with its capabilities and prices."""

    __table__ = model_table
    entity_name = "model"

    code: Mapped[str]
    provider_id: Mapped[int]
    model_name: Mapped[str]
    knowledge_cutoff: Mapped[date | None]
    input_price: Mapped[Decimal | None]
    """Price per million input tokens."""
    output_price: Mapped[Decimal | None]
    """Price per million output tokens."""
    capabilities: Mapped[list[Any]]
    """Capability codes: FC, VI, SR, JM, EM, AU."""
    context_window: Mapped[int | None]
    description: Mapped[str | None]
    dimension: Mapped[int | None]
    """Length of the vectors an embedding (``EM``) model returns."""
    max_input_tokens: Mapped[int | None]
    """Most tokens an embedding model reads per text; chunks are cut to fit."""
    query_prefix: Mapped[str | None]
    """Put before every query an embedding model embeds (BGE, E5 expect one)."""
    document_prefix: Mapped[str | None]
    """Put before every document chunk an embedding model embeds."""

    provider: Mapped[Provider] = relationship(back_populates="models", lazy="joined")


class Configuration(CatalogEntity):
    """Sampling parameters and limits of a model call."""

    __table__ = configuration_table
    entity_name = "configuration"
    key_length = TYPE_CODE

    code: Mapped[str]
    name: Mapped[str]
    temperature: Mapped[float | None]
    top_p: Mapped[float | None]
    top_k: Mapped[int | None]
    max_tokens: Mapped[int]
    stop: Mapped[list[Any]]
    presence_penalty: Mapped[float | None]
    frequency_penalty: Mapped[float | None]
    retry_count: Mapped[int]
    retry_delay: Mapped[float]
    """Base delay in seconds before the first retry."""


class PersonaType(_TypeEntity):
    """A family of personas."""

    __table__ = persona_type_table
    entity_name = "persona type"


class Persona(CatalogEntity):
    """A reusable voice or role prompt."""

    __table__ = persona_table
    entity_name = "persona"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    type_id: Mapped[int | None]
    prompt: Mapped[str]

    type: Mapped[PersonaType | None] = relationship(lazy="joined")


class SkillType(_TypeEntity):
    """A family of skills."""

    __table__ = skill_type_table
    entity_name = "skill type"


class Skill(CatalogEntity):
    """A reusable capability prompt that may own tools and depend on skills."""

    __table__ = skill_table
    entity_name = "skill"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    type_id: Mapped[int | None]
    description: Mapped[str | None]
    prompt: Mapped[str]
    parent_id: Mapped[int | None]
    execution: Mapped[str]
    """``local``, or ``event``: the skill's tools run on event workers (docs/events.md)."""
    release: Mapped[str]
    """genai-4j's ``skill_t.version``: a semantic version, recorded with each use."""

    type: Mapped[SkillType | None] = relationship(lazy="joined")
    parent: Mapped[Skill | None] = relationship(remote_side="Skill.id", lazy="selectin")
    dependencies: Mapped[list[SkillDependency]] = relationship(
        foreign_keys="SkillDependency.skill_id",
        cascade="all, delete-orphan",
        lazy="selectin",
        order_by="SkillDependency.position",
    )
    tools: Mapped[list[SkillTool]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="SkillTool.position"
    )


class SkillDependency(Base):
    """Skill A depends on skill B: activating A also activates B."""

    __table__ = skill_dependency_table

    skill_id: Mapped[int]
    depends_on_id: Mapped[int]
    position: Mapped[int]

    depends_on: Mapped[Skill] = relationship(
        foreign_keys=[skill_dependency_table.c.depends_on_id], lazy="joined"
    )


class SkillTool(Base):
    """A tool owned by a skill (loaded when the skill is activated)."""

    __table__ = skill_tool_table

    skill_id: Mapped[int]
    tool_id: Mapped[int]
    position: Mapped[int]
    access_level: Mapped[str]
    """genai-4j's skill-tool access: ``read``; ``write`` and ``execute`` need the authorizer."""

    tool: Mapped[Tool] = relationship(lazy="joined")


class ToolType(_TypeEntity):
    """A family of tools."""

    __table__ = tool_type_table
    entity_name = "tool type"


class Tool(CatalogEntity):
    """Something the model can call."""

    __table__ = tool_table
    entity_name = "tool"

    code: Mapped[str]
    name: Mapped[str]
    """The function name the model sees."""
    type_id: Mapped[int | None]
    kind: Mapped[ToolKind]
    implementation: Mapped[str | None]
    """Dotted path, OpenAPI operation, MCP client + tool, or script source, by kind."""
    description: Mapped[str | None]
    input_schema: Mapped[dict[str, Any]]
    output_schema: Mapped[dict[str, Any] | None]
    policy: Mapped[ExecutionPolicy]
    settings: Mapped[dict[str, Any]]
    """Kind-specific settings (REST method/URL/headers, timeout, ...)."""
    release: Mapped[str]
    """genai-4j's ``tool_t.version``: a semantic version, recorded with each call."""

    type: Mapped[ToolType | None] = relationship(lazy="joined")


class McpClientType(_TypeEntity):
    """A family of MCP clients."""

    __table__ = mcp_client_type_table
    entity_name = "mcp client type"


class McpClient(CatalogEntity):
    """A connection to an MCP server."""

    __table__ = mcp_client_table
    entity_name = "mcp client"
    key_field = "name"
    key_length = MCP_NAME

    name: Mapped[str]
    type_id: Mapped[int | None]
    transport: Mapped[McpTransport]
    command: Mapped[str | None]
    args: Mapped[list[Any]]
    env: Mapped[dict[str, Any]]
    url: Mapped[str | None]
    headers: Mapped[dict[str, Any]]
    confidential_headers: Mapped[list[Any]]
    """Header names whose values are secret: never shown or logged."""
    description: Mapped[str | None]
    input_schema: Mapped[dict[str, Any] | None]
    """Seed 000's ``llmSchemaInput``: the request payload, shown in the system prompt."""
    output_schema: Mapped[dict[str, Any] | None]
    """Seed 000's ``llmSchemaOutput``: the response payload, shown in the system prompt."""

    type: Mapped[McpClientType | None] = relationship(lazy="joined")


class AdvisorType(_TypeEntity):
    """A family of advisors."""

    __table__ = advisor_type_table
    entity_name = "advisor type"


class Advisor(CatalogEntity):
    """An interceptor around the model call."""

    __table__ = advisor_table
    entity_name = "advisor"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    type_id: Mapped[int | None]
    implementation: Mapped[str]
    """A built-in advisor name or a ``package.module:callable`` reference."""
    default_order: Mapped[int]
    settings: Mapped[dict[str, Any]]

    type: Mapped[AdvisorType | None] = relationship(lazy="joined")


class VectorStoreType(_TypeEntity):
    """A family of vector stores."""

    __table__ = vector_store_type_table
    entity_name = "vector store type"


class VectorStore(CatalogEntity):
    """Where RAG chunks live."""

    __table__ = vector_store_table
    entity_name = "vector store"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    type_id: Mapped[int | None]
    kind: Mapped[VectorStoreKind]
    connection: Mapped[str | None]
    """The pgvector database's URL, without its password (that goes in settings)."""
    default_collection: Mapped[str | None]
    settings: Mapped[dict[str, Any]]
    """Kind-specific settings: index parameters, table layout, password reference."""

    type: Mapped[VectorStoreType | None] = relationship(lazy="joined")


class DocumentCollection(CatalogEntity):
    """A named set of chunks in a vector store, with retrieval defaults."""

    __table__ = document_collection_table
    entity_name = "document collection"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    store_id: Mapped[int]
    collection_name: Mapped[str]
    similarity_threshold: Mapped[float]
    top_k: Mapped[int]
    embedding_model_id: Mapped[int | None]
    """None: the packaged local all-MiniLM-L6-v2."""
    chunk_size: Mapped[int | None]
    """Tokens per chunk; None: 512, bounded by the embedding model's limit."""
    chunk_overlap: Mapped[int]
    search_mode: Mapped[SearchMode]
    qa_model_id: Mapped[int | None]
    """The chat model that answers from this collection by default (Vantiq's Q&A LLM)."""
    rerank: Mapped[bool]
    """Reorder the fused candidates by the ``qa_model``'s relevance scores."""
    rerank_candidates: Mapped[int]
    """How many fused candidates the reranking model scores."""

    store: Mapped[VectorStore] = relationship(lazy="joined")
    embedding_model: Mapped[Model | None] = relationship(
        lazy="joined", foreign_keys=[document_collection_table.c.embedding_model_id]
    )
    qa_model: Mapped[Model | None] = relationship(
        lazy="joined", foreign_keys=[document_collection_table.c.qa_model_id]
    )


class MemoryStrategyType(_TypeEntity):
    """A family of memory strategies."""

    __table__ = memory_strategy_type_table
    entity_name = "memory strategy type"


class MemoryStrategy(CatalogEntity):
    """How much chat history a turn sees."""

    __table__ = memory_strategy_table
    entity_name = "memory strategy"
    key_length = TYPE_CODE

    code: Mapped[str]
    name: Mapped[str]
    type_id: Mapped[int | None]
    kind: Mapped[MemoryKind]
    window_size: Mapped[int]
    token_budget: Mapped[int | None]
    settings: Mapped[dict[str, Any]]
    """A ``SCOPED`` strategy's retrieval and extraction settings (``ScopedMemorySettings``)."""

    type: Mapped[MemoryStrategyType | None] = relationship(lazy="joined")


class ActionType(_TypeEntity):
    """A family of actions; adds a constraint prompt to each of them."""

    __table__ = action_type_table
    entity_name = "action type"

    constraint_prompt: Mapped[str | None]


class Action(CatalogEntity):
    """A repeatable LLM task: model, configuration, prompts, schemas and tools."""

    __table__ = action_table
    entity_name = "action"

    code: Mapped[str]
    name: Mapped[str]
    goal_description: Mapped[str | None]
    type_id: Mapped[int | None]
    model_id: Mapped[int]
    configuration_id: Mapped[int]
    persona_id: Mapped[int | None]
    memory_strategy_id: Mapped[int | None]
    prompt: Mapped[str]
    audit: Mapped[bool | None]
    """Record the audit timeline: None follows the deployment default."""
    question_timeout: Mapped[int]
    """Seconds a conversation may wait for answers before it ends ``TE``."""
    ask_user: Mapped[bool]
    """Offer the built-in AskUserQuestion tool in this action's conversations."""
    progressive_disclosure: Mapped[bool]
    """Skills as descriptions first, instructions and tools after ``use_skill``.

    False (seed 000): each skill's prompt is in the system prompt as
    ``Your skill: <prompt>.`` and its tools are offered from the start.
    """

    type: Mapped[ActionType | None] = relationship(lazy="joined")
    model: Mapped[Model] = relationship(lazy="joined")
    configuration: Mapped[Configuration] = relationship(lazy="joined")
    persona: Mapped[Persona | None] = relationship(lazy="joined")
    memory_strategy: Mapped[MemoryStrategy | None] = relationship(lazy="joined")
    schemas: Mapped[list[ActionSchema]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ActionSchema.id"
    )
    skills: Mapped[list[ActionSkill]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ActionSkill.position"
    )
    tools: Mapped[list[ActionTool]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ActionTool.position"
    )
    mcp_clients: Mapped[list[ActionMcpClient]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ActionMcpClient.position"
    )
    advisors: Mapped[list[ActionAdvisor]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ActionAdvisor.position"
    )
    collections: Mapped[list[ActionCollection]] = relationship(
        cascade="all, delete-orphan", lazy="selectin", order_by="ActionCollection.position"
    )

    def get_input_schemas(self) -> list[ActionSchema]:
        """Return the schemas the action consumes: input (``I``) and memory (``M``).

        Seed 000's ``LlmAction.getInputSchemas()``; empty when it has none.
        """
        return [s for s in self.schemas if s.direction is not SchemaDirection.OUTPUT]

    def get_output_agent_schema(self) -> ActionSchema:
        """Return the action's one output (``O``) schema.

        Seed 000's ``LlmAction.getOutputAgentSchema()``: for callers that
        require a structured output.

        Raises:
            InvalidStateError: the action has no output schema, or more than one.
        """
        outputs = [s for s in self.schemas if s.direction is SchemaDirection.OUTPUT]
        if len(outputs) != 1:
            from pilothouse.errors import InvalidStateError

            found = "no output schema" if not outputs else f"{len(outputs)} output schemas"
            raise InvalidStateError(
                f"action '{self.code}' has {found}; exactly one is required here "
                "(schemas.output in the catalog)"
            )
        return outputs[0]


class ActionSchema(Base):
    """A JSON schema of an action's input, output or memory, item or list."""

    __table__ = action_schema_table

    id: Mapped[int]
    action_id: Mapped[int]
    direction: Mapped[SchemaDirection]
    cardinality: Mapped[Cardinality]
    # The column is named schema; the attribute is not, so as not to read as a
    # SQL schema (declared here: the table keeps the column's own name).
    json_schema: Mapped[dict[str, Any]] = column_property(action_schema_table.c.schema)
    hint: Mapped[FormHint | None]


class ActionSkill(Base):
    """A skill an action may use."""

    __table__ = action_skill_table

    action_id: Mapped[int]
    skill_id: Mapped[int]
    position: Mapped[int]

    skill: Mapped[Skill] = relationship(lazy="joined")


class ActionTool(Base):
    """A tool an action loads directly."""

    __table__ = action_tool_table

    action_id: Mapped[int]
    tool_id: Mapped[int]
    position: Mapped[int]

    tool: Mapped[Tool] = relationship(lazy="joined")


class ActionMcpClient(Base):
    """An MCP server whose tools an action may call."""

    __table__ = action_mcp_client_table

    action_id: Mapped[int]
    mcp_client_id: Mapped[int]
    position: Mapped[int]

    mcp_client: Mapped[McpClient] = relationship(lazy="joined")


class ActionAdvisor(Base):
    """An advisor around an action's model calls; ``order`` overrides its default."""

    __table__ = action_advisor_table

    action_id: Mapped[int]
    advisor_id: Mapped[int]
    order: Mapped[int | None] = column_property(action_advisor_table.c.advisor_order)
    position: Mapped[int]

    advisor: Mapped[Advisor] = relationship(lazy="joined")


class ActionCollection(Base):
    """A document collection an action retrieves from."""

    __table__ = action_collection_table

    action_id: Mapped[int]
    collection_id: Mapped[int]
    position: Mapped[int]

    collection: Mapped[DocumentCollection] = relationship(lazy="joined")


class Application(CatalogEntity):
    """A business application; its system prompt is shared by its agents."""

    __table__ = application_table
    entity_name = "application"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    system_prompt: Mapped[str | None]


class AgentType(_TypeEntity):
    """A family of agents."""

    __table__ = agent_type_table
    entity_name = "agent type"


class Agent(CatalogEntity):
    """An agent of an application, with its own prompt and goal action."""

    __table__ = agent_table
    entity_name = "agent"
    key_length = SHORT_CODE

    code: Mapped[str]
    name: Mapped[str]
    application_id: Mapped[int]
    type_id: Mapped[int | None]
    prompt: Mapped[str | None]
    goal_action_id: Mapped[int | None]

    application: Mapped[Application] = relationship(lazy="joined")
    type: Mapped[AgentType | None] = relationship(lazy="joined")
    goal_action: Mapped[Action | None] = relationship(lazy="joined")


class Budget(CatalogEntity):
    """A spending limit: money, tokens or turns per period for a scope."""

    __table__ = budget_table
    entity_name = "budget"

    code: Mapped[str]
    name: Mapped[str]
    scope: Mapped[str]
    match: Mapped[str | None]
    model_id: Mapped[int | None]
    provider_id: Mapped[int | None]
    period: Mapped[str]
    timezone: Mapped[str]
    money: Mapped[Decimal | None]
    input_tokens: Mapped[int | None]
    output_tokens: Mapped[int | None]
    turns: Mapped[int | None]
    on_limit: Mapped[str]
    downgrade_to_id: Mapped[int | None]
    thresholds: Mapped[list[Any]]

    model: Mapped[Model | None] = relationship(
        foreign_keys=[budget_table.c.model_id], lazy="joined"
    )
    provider: Mapped[Provider | None] = relationship(lazy="joined")
    downgrade_to: Mapped[Model | None] = relationship(
        foreign_keys=[budget_table.c.downgrade_to_id], lazy="joined"
    )


CODE_LENGTHS: dict[str, int] = {
    cls.entity_name: cls.key_length
    for cls in (
        Provider,
        Model,
        Configuration,
        PersonaType,
        Persona,
        SkillType,
        Skill,
        ToolType,
        Tool,
        McpClientType,
        McpClient,
        AdvisorType,
        Advisor,
        VectorStoreType,
        VectorStore,
        DocumentCollection,
        MemoryStrategyType,
        MemoryStrategy,
        ActionType,
        Action,
        Application,
        AgentType,
        Agent,
        Budget,
    )
}
"""Maximum length of each entity's business key, by entity name."""
