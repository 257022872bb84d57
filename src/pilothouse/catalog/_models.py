"""The catalog: every entity an application declares, as typed SQLAlchemy models.

Every row belongs to a tenant, carries a business key (``code``; MCP clients
use ``name``) unique within that tenant, an active flag, a version used for
optimistic concurrency, and who changed it when. Secrets are only ever stored
as ``@secrets(NAME)`` references.
"""

from __future__ import annotations

__all__ = [
    "ADHOC_ACTION",
    "CODE_LENGTHS",
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

from sqlalchemy import (
    Boolean,
    Date,
    Float,
    ForeignKey,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, declared_attr, mapped_column, relationship

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
from pilothouse.catalog._lengths import (
    CODE,
    MCP_NAME,
    RELEASE_LENGTH,
    SHORT_CODE,
    TENANT_LENGTH,
    TYPE_CODE,
)
from pilothouse.store._base import Base, utcnow
from pilothouse.store._types import UtcDateTime, coded_enum

DEFAULT_RELEASE = "1.0.0"
"""genai-4j's default version of skills and tools (seed 002)."""


class CatalogRevision(Base):
    """The catalog version of one tenant, bumped by every catalog write.

    Compiled actions are cached per revision, so a turn never re-reads a
    catalog that has not changed.
    """

    __tablename__ = "catalog_revision"

    tenant: Mapped[str] = mapped_column(String(TENANT_LENGTH), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, default=0)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)


class CatalogEntity(Base):
    """Columns and rules every catalog row shares."""

    __abstract__ = True
    key_field: ClassVar[str] = "code"
    key_length: ClassVar[int] = CODE
    entity_name: ClassVar[str] = "entity"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(TENANT_LENGTH), default="default", index=True)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)
    updated_by: Mapped[str] = mapped_column(String(64), default="pilothouse")

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:
        # SQLAlchemy checks the version in every UPDATE's WHERE clause, so a
        # write that raced a newer one fails instead of silently winning.
        return {"version_id_col": cls.version}

    @declared_attr.directive
    def __table_args__(cls) -> tuple[Any, ...]:
        return (UniqueConstraint("tenant", cls.key_field),)

    @property
    def key(self) -> str:
        """The business key (``code``, or ``name`` for MCP clients)."""
        value: str = getattr(self, self.key_field)
        return value


class _TypeEntity(CatalogEntity):
    """A classification row (persona type, skill type, ...): code, name, description."""

    __abstract__ = True
    key_length = TYPE_CODE

    code: Mapped[str] = mapped_column(String(TYPE_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    description: Mapped[str | None] = mapped_column(Text)


class Provider(CatalogEntity):
    """A model vendor or server and how to reach it."""

    __tablename__ = "provider"
    entity_name = "provider"
    key_length = TYPE_CODE

    code: Mapped[str] = mapped_column(String(TYPE_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    kind: Mapped[ProviderKind] = mapped_column(coded_enum(ProviderKind, "provider_kind"))
    base_url: Mapped[str | None] = mapped_column(String(512))
    api_key: Mapped[str | None] = mapped_column(String(256))
    """A ``@secrets(NAME)`` reference, never a key."""
    headers: Mapped[dict[str, Any]] = mapped_column(default=dict)
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    description: Mapped[str | None] = mapped_column(Text)

    models: Mapped[list[Model]] = relationship(back_populates="provider", lazy="raise")


class Model(CatalogEntity):
    """One model of a provider with its capabilities and prices."""

    __tablename__ = "model"
    entity_name = "model"

    code: Mapped[str] = mapped_column(String(CODE))
    provider_id: Mapped[int] = mapped_column(ForeignKey("provider.id", ondelete="RESTRICT"))
    model_name: Mapped[str] = mapped_column(String(256))
    knowledge_cutoff: Mapped[date | None] = mapped_column(Date)
    input_price: Mapped[Decimal | None] = mapped_column(Numeric(18, 6))
    """Price per million input tokens."""
    output_price: Mapped[Decimal | None] = mapped_column(Numeric(18, 6))
    """Price per million output tokens."""
    capabilities: Mapped[list[Any]] = mapped_column(default=list)
    """Capability codes: FC, VI, SR, JM, EM, AU."""
    context_window: Mapped[int | None] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    dimension: Mapped[int | None] = mapped_column(Integer)
    """Length of the vectors an embedding (``EM``) model returns."""
    max_input_tokens: Mapped[int | None] = mapped_column(Integer)
    """Most tokens an embedding model reads per text; chunks are cut to fit."""
    query_prefix: Mapped[str | None] = mapped_column(Text)
    """Put before every query an embedding model embeds (BGE, E5 expect one)."""
    document_prefix: Mapped[str | None] = mapped_column(Text)
    """Put before every document chunk an embedding model embeds."""

    provider: Mapped[Provider] = relationship(back_populates="models", lazy="joined")


class Configuration(CatalogEntity):
    """Sampling parameters and limits of a model call."""

    __tablename__ = "configuration"
    entity_name = "configuration"
    key_length = TYPE_CODE

    code: Mapped[str] = mapped_column(String(TYPE_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    temperature: Mapped[float | None] = mapped_column(Float)
    top_p: Mapped[float | None] = mapped_column(Float)
    top_k: Mapped[int | None] = mapped_column(Integer)
    max_tokens: Mapped[int] = mapped_column(Integer)
    stop: Mapped[list[Any]] = mapped_column(default=list)
    presence_penalty: Mapped[float | None] = mapped_column(Float)
    frequency_penalty: Mapped[float | None] = mapped_column(Float)
    retry_count: Mapped[int] = mapped_column(Integer, default=2)
    retry_delay: Mapped[float] = mapped_column(Float, default=1.0)
    """Base delay in seconds before the first retry."""


class PersonaType(_TypeEntity):
    """A family of personas."""

    __tablename__ = "persona_type"
    entity_name = "persona type"


class Persona(CatalogEntity):
    """A reusable voice or role prompt."""

    __tablename__ = "persona"
    entity_name = "persona"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    type_id: Mapped[int | None] = mapped_column(ForeignKey("persona_type.id"))
    prompt: Mapped[str] = mapped_column(Text)

    type: Mapped[PersonaType | None] = relationship(lazy="joined")


class SkillType(_TypeEntity):
    """A family of skills."""

    __tablename__ = "skill_type"
    entity_name = "skill type"


class Skill(CatalogEntity):
    """A reusable capability prompt that may own tools and depend on skills."""

    __tablename__ = "skill"
    entity_name = "skill"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    type_id: Mapped[int | None] = mapped_column(ForeignKey("skill_type.id"))
    description: Mapped[str | None] = mapped_column(Text)
    prompt: Mapped[str] = mapped_column(Text)
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("skill.id"))
    execution: Mapped[str] = mapped_column(String(16), default="local")
    """``local``, or ``event``: the skill's tools run on event workers (docs/events.md)."""
    release: Mapped[str] = mapped_column(String(RELEASE_LENGTH), default=DEFAULT_RELEASE)
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

    __tablename__ = "skill_dependency"

    skill_id: Mapped[int] = mapped_column(
        ForeignKey("skill.id", ondelete="CASCADE"), primary_key=True
    )
    depends_on_id: Mapped[int] = mapped_column(ForeignKey("skill.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)

    depends_on: Mapped[Skill] = relationship(foreign_keys=[depends_on_id], lazy="joined")


class SkillTool(Base):
    """A tool owned by a skill (loaded when the skill is activated)."""

    __tablename__ = "skill_tool"

    skill_id: Mapped[int] = mapped_column(
        ForeignKey("skill.id", ondelete="CASCADE"), primary_key=True
    )
    tool_id: Mapped[int] = mapped_column(ForeignKey("tool.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    access_level: Mapped[str] = mapped_column(String(16), default="read")
    """genai-4j's skill-tool access: ``read``; ``write`` and ``execute`` need the authorizer."""

    tool: Mapped[Tool] = relationship(lazy="joined")


class ToolType(_TypeEntity):
    """A family of tools."""

    __tablename__ = "tool_type"
    entity_name = "tool type"


class Tool(CatalogEntity):
    """Something the model can call."""

    __tablename__ = "tool"
    entity_name = "tool"

    code: Mapped[str] = mapped_column(String(CODE))
    name: Mapped[str] = mapped_column(String(64))
    """The function name the model sees."""
    type_id: Mapped[int | None] = mapped_column(ForeignKey("tool_type.id"))
    kind: Mapped[ToolKind] = mapped_column(coded_enum(ToolKind, "tool_kind"))
    implementation: Mapped[str | None] = mapped_column(Text)
    """Dotted path, OpenAPI operation, MCP client + tool, or script source, by kind."""
    description: Mapped[str | None] = mapped_column(Text)
    input_schema: Mapped[dict[str, Any]] = mapped_column(default=dict)
    output_schema: Mapped[dict[str, Any] | None] = mapped_column()
    policy: Mapped[ExecutionPolicy] = mapped_column(
        coded_enum(ExecutionPolicy, "execution_policy"), default=ExecutionPolicy.ALLOW
    )
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Kind-specific settings (REST method/URL/headers, timeout, ...)."""
    release: Mapped[str] = mapped_column(String(RELEASE_LENGTH), default=DEFAULT_RELEASE)
    """genai-4j's ``tool_t.version``: a semantic version, recorded with each call."""

    type: Mapped[ToolType | None] = relationship(lazy="joined")


class McpClientType(_TypeEntity):
    """A family of MCP clients."""

    __tablename__ = "mcp_client_type"
    entity_name = "mcp client type"


class McpClient(CatalogEntity):
    """A connection to an MCP server."""

    __tablename__ = "mcp_client"
    entity_name = "mcp client"
    key_field = "name"
    key_length = MCP_NAME

    name: Mapped[str] = mapped_column(String(MCP_NAME))
    type_id: Mapped[int | None] = mapped_column(ForeignKey("mcp_client_type.id"))
    transport: Mapped[McpTransport] = mapped_column(coded_enum(McpTransport, "mcp_transport"))
    command: Mapped[str | None] = mapped_column(String(512))
    args: Mapped[list[Any]] = mapped_column(default=list)
    env: Mapped[dict[str, Any]] = mapped_column(default=dict)
    url: Mapped[str | None] = mapped_column(String(512))
    headers: Mapped[dict[str, Any]] = mapped_column(default=dict)
    confidential_headers: Mapped[list[Any]] = mapped_column(default=list)
    """Header names whose values are secret: never shown or logged."""
    description: Mapped[str | None] = mapped_column(Text)
    input_schema: Mapped[dict[str, Any] | None] = mapped_column()
    """Seed 000's ``llmSchemaInput``: the request payload, shown in the system prompt."""
    output_schema: Mapped[dict[str, Any] | None] = mapped_column()
    """Seed 000's ``llmSchemaOutput``: the response payload, shown in the system prompt."""

    type: Mapped[McpClientType | None] = relationship(lazy="joined")


class AdvisorType(_TypeEntity):
    """A family of advisors."""

    __tablename__ = "advisor_type"
    entity_name = "advisor type"


class Advisor(CatalogEntity):
    """An interceptor around the model call."""

    __tablename__ = "advisor"
    entity_name = "advisor"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    type_id: Mapped[int | None] = mapped_column(ForeignKey("advisor_type.id"))
    implementation: Mapped[str] = mapped_column(String(512))
    """A built-in advisor name or a ``package.module:callable`` reference."""
    default_order: Mapped[int] = mapped_column(Integer, default=0)
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)

    type: Mapped[AdvisorType | None] = relationship(lazy="joined")


class VectorStoreType(_TypeEntity):
    """A family of vector stores."""

    __tablename__ = "vector_store_type"
    entity_name = "vector store type"


class VectorStore(CatalogEntity):
    """Where RAG chunks live."""

    __tablename__ = "vector_store"
    entity_name = "vector store"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    type_id: Mapped[int | None] = mapped_column(ForeignKey("vector_store_type.id"))
    kind: Mapped[VectorStoreKind] = mapped_column(
        coded_enum(VectorStoreKind, "vector_store_kind"), default=VectorStoreKind.EMBEDDED
    )
    connection: Mapped[str | None] = mapped_column(String(512))
    """The pgvector database's URL, without its password (that goes in settings)."""
    default_collection: Mapped[str | None] = mapped_column(String(128))
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict)
    """Kind-specific settings: index parameters, table layout, password reference."""

    type: Mapped[VectorStoreType | None] = relationship(lazy="joined")


class DocumentCollection(CatalogEntity):
    """A named set of chunks in a vector store, with retrieval defaults."""

    __tablename__ = "document_collection"
    entity_name = "document collection"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    store_id: Mapped[int] = mapped_column(ForeignKey("vector_store.id"))
    collection_name: Mapped[str] = mapped_column(String(128))
    similarity_threshold: Mapped[float] = mapped_column(Float, default=0.0)
    top_k: Mapped[int] = mapped_column(Integer, default=4)
    embedding_model_id: Mapped[int | None] = mapped_column(ForeignKey("model.id"))
    """None: the packaged local all-MiniLM-L6-v2."""
    chunk_size: Mapped[int | None] = mapped_column(Integer)
    """Tokens per chunk; None: 512, bounded by the embedding model's limit."""
    chunk_overlap: Mapped[int] = mapped_column(Integer, default=50)
    search_mode: Mapped[SearchMode] = mapped_column(
        coded_enum(SearchMode, "search_mode"), default=SearchMode.HYBRID
    )
    qa_model_id: Mapped[int | None] = mapped_column(ForeignKey("model.id"))
    """The chat model that answers from this collection by default (Vantiq's Q&A LLM)."""

    store: Mapped[VectorStore] = relationship(lazy="joined")
    embedding_model: Mapped[Model | None] = relationship(
        lazy="joined", foreign_keys=[embedding_model_id]
    )
    qa_model: Mapped[Model | None] = relationship(lazy="joined", foreign_keys=[qa_model_id])


class MemoryStrategyType(_TypeEntity):
    """A family of memory strategies."""

    __tablename__ = "memory_strategy_type"
    entity_name = "memory strategy type"


class MemoryStrategy(CatalogEntity):
    """How much chat history a turn sees."""

    __tablename__ = "memory_strategy"
    entity_name = "memory strategy"
    key_length = TYPE_CODE

    code: Mapped[str] = mapped_column(String(TYPE_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    type_id: Mapped[int | None] = mapped_column(ForeignKey("memory_strategy_type.id"))
    kind: Mapped[MemoryKind] = mapped_column(coded_enum(MemoryKind, "memory_kind"))
    window_size: Mapped[int] = mapped_column(Integer, default=20)
    token_budget: Mapped[int | None] = mapped_column(Integer)
    settings: Mapped[dict[str, Any]] = mapped_column(default=dict, server_default="{}")
    """A ``SCOPED`` strategy's retrieval and extraction settings (``ScopedMemorySettings``)."""

    type: Mapped[MemoryStrategyType | None] = relationship(lazy="joined")


class ActionType(_TypeEntity):
    """A family of actions; adds a constraint prompt to each of them."""

    __tablename__ = "action_type"
    entity_name = "action type"

    constraint_prompt: Mapped[str | None] = mapped_column(Text)


class Action(CatalogEntity):
    """A repeatable LLM task: model, configuration, prompts, schemas and tools."""

    __tablename__ = "action"
    entity_name = "action"

    code: Mapped[str] = mapped_column(String(CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    goal_description: Mapped[str | None] = mapped_column(Text)
    type_id: Mapped[int | None] = mapped_column(ForeignKey("action_type.id"))
    model_id: Mapped[int] = mapped_column(ForeignKey("model.id"))
    configuration_id: Mapped[int] = mapped_column(ForeignKey("configuration.id"))
    persona_id: Mapped[int | None] = mapped_column(ForeignKey("persona.id"))
    memory_strategy_id: Mapped[int | None] = mapped_column(ForeignKey("memory_strategy.id"))
    prompt: Mapped[str] = mapped_column(Text)
    audit: Mapped[bool | None] = mapped_column(Boolean)
    """Record the audit timeline: None follows the deployment default."""
    question_timeout: Mapped[int] = mapped_column(Integer, default=300)
    """Seconds a conversation may wait for answers before it ends ``TE``."""
    ask_user: Mapped[bool] = mapped_column(Boolean, default=True)
    """Offer the built-in AskUserQuestion tool in this action's conversations."""
    progressive_disclosure: Mapped[bool] = mapped_column(Boolean, default=False)
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

    __tablename__ = "action_schema"
    __table_args__ = (UniqueConstraint("action_id", "direction"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    action_id: Mapped[int] = mapped_column(ForeignKey("action.id", ondelete="CASCADE"))
    direction: Mapped[SchemaDirection] = mapped_column(
        coded_enum(SchemaDirection, "schema_direction")
    )
    cardinality: Mapped[Cardinality] = mapped_column(
        coded_enum(Cardinality, "cardinality"), default=Cardinality.ITEM
    )
    json_schema: Mapped[dict[str, Any]] = mapped_column("schema", default=dict)
    hint: Mapped[FormHint | None] = mapped_column(coded_enum(FormHint, "form_hint"))


class ActionSkill(Base):
    """A skill an action may use."""

    __tablename__ = "action_skill"

    action_id: Mapped[int] = mapped_column(
        ForeignKey("action.id", ondelete="CASCADE"), primary_key=True
    )
    skill_id: Mapped[int] = mapped_column(ForeignKey("skill.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)

    skill: Mapped[Skill] = relationship(lazy="joined")


class ActionTool(Base):
    """A tool an action loads directly."""

    __tablename__ = "action_tool"

    action_id: Mapped[int] = mapped_column(
        ForeignKey("action.id", ondelete="CASCADE"), primary_key=True
    )
    tool_id: Mapped[int] = mapped_column(ForeignKey("tool.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)

    tool: Mapped[Tool] = relationship(lazy="joined")


class ActionMcpClient(Base):
    """An MCP server whose tools an action may call."""

    __tablename__ = "action_mcp_client"

    action_id: Mapped[int] = mapped_column(
        ForeignKey("action.id", ondelete="CASCADE"), primary_key=True
    )
    mcp_client_id: Mapped[int] = mapped_column(ForeignKey("mcp_client.id"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, default=0)

    mcp_client: Mapped[McpClient] = relationship(lazy="joined")


class ActionAdvisor(Base):
    """An advisor around an action's model calls; ``order`` overrides its default."""

    __tablename__ = "action_advisor"

    action_id: Mapped[int] = mapped_column(
        ForeignKey("action.id", ondelete="CASCADE"), primary_key=True
    )
    advisor_id: Mapped[int] = mapped_column(ForeignKey("advisor.id"), primary_key=True)
    order: Mapped[int | None] = mapped_column("advisor_order", Integer)
    position: Mapped[int] = mapped_column(Integer, default=0)

    advisor: Mapped[Advisor] = relationship(lazy="joined")


class ActionCollection(Base):
    """A document collection an action retrieves from."""

    __tablename__ = "action_collection"

    action_id: Mapped[int] = mapped_column(
        ForeignKey("action.id", ondelete="CASCADE"), primary_key=True
    )
    collection_id: Mapped[int] = mapped_column(
        ForeignKey("document_collection.id"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer, default=0)

    collection: Mapped[DocumentCollection] = relationship(lazy="joined")


class Application(CatalogEntity):
    """A business application; its system prompt is shared by its agents."""

    __tablename__ = "application"
    entity_name = "application"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    system_prompt: Mapped[str | None] = mapped_column(Text)


class AgentType(_TypeEntity):
    """A family of agents."""

    __tablename__ = "agent_type"
    entity_name = "agent type"


class Agent(CatalogEntity):
    """An agent of an application, with its own prompt and goal action."""

    __tablename__ = "agent"
    entity_name = "agent"
    key_length = SHORT_CODE

    code: Mapped[str] = mapped_column(String(SHORT_CODE))
    name: Mapped[str] = mapped_column(String(128), default="")
    application_id: Mapped[int] = mapped_column(ForeignKey("application.id"))
    type_id: Mapped[int | None] = mapped_column(ForeignKey("agent_type.id"))
    prompt: Mapped[str | None] = mapped_column(Text)
    goal_action_id: Mapped[int | None] = mapped_column(ForeignKey("action.id"))

    application: Mapped[Application] = relationship(lazy="joined")
    type: Mapped[AgentType | None] = relationship(lazy="joined")
    goal_action: Mapped[Action | None] = relationship(lazy="joined")


ADHOC_ACTION = "INVOKE"
"""The action code of every ad-hoc run's conversation (reserved)."""
DIRECT_TOOL_ACTION = "TOOLCALL"
"""The action code of every conversation that records a direct tool call (reserved)."""
RESERVED_ACTION_CODES: dict[str, str] = {
    ADHOC_ACTION: "the conversations of ad-hoc runs (/v1/invoke, run_adhoc)",
    DIRECT_TOOL_ACTION: "the conversations of direct tool calls (call_tool, MCP catalog tools)",
}
"""Action codes the runtime records its own conversations under, with what uses each."""

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
    )
}
"""Maximum length of each entity's business key, by entity name."""
