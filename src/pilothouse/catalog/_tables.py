"""The catalog's tables as Core tables, in modules that do not import the ORM.

A turn's catalog checks and reads are Core statements on these tables, so a
first turn does not import SQLAlchemy's ORM; the entities of
:mod:`pilothouse.catalog._models` are mapped classes declared on them.

Every entity table ends with the columns all entities share (see
:func:`_entity_table`), after its own, and a classification table starts with
code, name and description (:func:`_type_table`): the column order the
declarative models gave them, which the migrations created.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_RELEASE",
    "action_advisor_table",
    "action_collection_table",
    "action_mcp_client_table",
    "action_schema_table",
    "action_skill_table",
    "action_table",
    "action_tool_table",
    "action_type_table",
    "advisor_table",
    "advisor_type_table",
    "agent_table",
    "agent_type_table",
    "application_table",
    "budget_table",
    "catalog_revision_table",
    "configuration_table",
    "document_collection_table",
    "mcp_client_table",
    "mcp_client_type_table",
    "memory_strategy_table",
    "memory_strategy_type_table",
    "model_table",
    "persona_table",
    "persona_type_table",
    "provider_table",
    "skill_dependency_table",
    "skill_table",
    "skill_tool_table",
    "skill_type_table",
    "tool_table",
    "tool_type_table",
    "vector_store_table",
    "vector_store_type_table",
    "virtual_server_action_table",
    "virtual_server_agent_table",
    "virtual_server_table",
    "virtual_server_tool_table",
]

from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Date,
    Float,
    ForeignKey,
    Integer,
    Numeric,
    String,
    Table,
    Text,
    UniqueConstraint,
)

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
from pilothouse.store._base import utcnow
from pilothouse.store._tables import metadata
from pilothouse.store._types import UtcDateTime, coded_enum

DEFAULT_RELEASE = "1.0.0"
"""genai-4j's default version of skills and tools (seed 002)."""


def _entity_table(name: str, *columns: Column[Any], key: str = "code") -> Table:
    """A catalog entity's table: its own columns, then those every entity shares.

    Every row belongs to a tenant, carries a business key (``key``) unique
    within that tenant, an active flag, a version used for optimistic
    concurrency, and who changed it when.
    """
    return Table(
        name,
        metadata,
        *columns,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("tenant", String(TENANT_LENGTH), default="default", index=True, nullable=False),
        Column("active", Boolean, default=True, nullable=False),
        Column("version", Integer, nullable=False),
        Column("updated_at", UtcDateTime, default=utcnow, onupdate=utcnow, nullable=False),
        Column("updated_by", String(64), default="pilothouse", nullable=False),
        UniqueConstraint("tenant", key),
    )


def _type_table(name: str, *columns: Column[Any]) -> Table:
    """A classification table (persona type, skill type, ...): code, name, description."""
    return _entity_table(
        name,
        *columns,
        Column("code", String(TYPE_CODE), nullable=False),
        Column("name", String(128), default="", nullable=False),
        Column("description", Text),
    )


catalog_revision_table = Table(
    "catalog_revision",
    metadata,
    Column("tenant", String(TENANT_LENGTH), primary_key=True),
    Column("revision", Integer, default=0, nullable=False),
    Column("updated_at", UtcDateTime, default=utcnow, nullable=False),
)

provider_table = _entity_table(
    "provider",
    Column("code", String(TYPE_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("kind", coded_enum(ProviderKind, "provider_kind"), nullable=False),
    Column("base_url", String(512)),
    Column("api_key", String(256)),
    Column("headers", JSON, default=dict, nullable=False),
    Column("settings", JSON, default=dict, nullable=False),
    Column("description", Text),
)

model_table = _entity_table(
    "model",
    Column("code", String(CODE), nullable=False),
    Column("provider_id", Integer, ForeignKey("provider.id", ondelete="RESTRICT"), nullable=False),
    Column("model_name", String(256), nullable=False),
    Column("knowledge_cutoff", Date),
    Column("input_price", Numeric(18, 6)),
    Column("output_price", Numeric(18, 6)),
    Column("capabilities", JSON, default=list, nullable=False),
    Column("context_window", Integer),
    Column("description", Text),
    Column("dimension", Integer),
    Column("max_input_tokens", Integer),
    Column("query_prefix", Text),
    Column("document_prefix", Text),
)

configuration_table = _entity_table(
    "configuration",
    Column("code", String(TYPE_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("temperature", Float),
    Column("top_p", Float),
    Column("top_k", Integer),
    Column("max_tokens", Integer, nullable=False),
    Column("stop", JSON, default=list, nullable=False),
    Column("presence_penalty", Float),
    Column("frequency_penalty", Float),
    Column("retry_count", Integer, default=2, nullable=False),
    Column("retry_delay", Float, default=1.0, nullable=False),
)

persona_type_table = _type_table(
    "persona_type",
)

persona_table = _entity_table(
    "persona",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("type_id", Integer, ForeignKey("persona_type.id")),
    Column("prompt", Text, nullable=False),
)

skill_type_table = _type_table(
    "skill_type",
)

skill_table = _entity_table(
    "skill",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("type_id", Integer, ForeignKey("skill_type.id")),
    Column("description", Text),
    Column("prompt", Text, nullable=False),
    Column("parent_id", Integer, ForeignKey("skill.id")),
    Column("execution", String(16), default="local", nullable=False),
    Column("release", String(RELEASE_LENGTH), default=DEFAULT_RELEASE, nullable=False),
)

skill_dependency_table = Table(
    "skill_dependency",
    metadata,
    Column("skill_id", Integer, ForeignKey("skill.id", ondelete="CASCADE"), primary_key=True),
    Column("depends_on_id", Integer, ForeignKey("skill.id"), primary_key=True),
    Column("position", Integer, default=0, nullable=False),
)

skill_tool_table = Table(
    "skill_tool",
    metadata,
    Column("skill_id", Integer, ForeignKey("skill.id", ondelete="CASCADE"), primary_key=True),
    Column("tool_id", Integer, ForeignKey("tool.id"), primary_key=True),
    Column("position", Integer, default=0, nullable=False),
    Column("access_level", String(16), default="read", nullable=False),
)

tool_type_table = _type_table(
    "tool_type",
)

tool_table = _entity_table(
    "tool",
    Column("code", String(CODE), nullable=False),
    Column("name", String(64), nullable=False),
    Column("type_id", Integer, ForeignKey("tool_type.id")),
    Column("kind", coded_enum(ToolKind, "tool_kind"), nullable=False),
    Column("implementation", Text),
    Column("description", Text),
    Column("input_schema", JSON, default=dict, nullable=False),
    Column("output_schema", JSON),
    Column(
        "policy",
        coded_enum(ExecutionPolicy, "execution_policy"),
        default=ExecutionPolicy.ALLOW,
        nullable=False,
    ),
    Column("settings", JSON, default=dict, nullable=False),
    Column("release", String(RELEASE_LENGTH), default=DEFAULT_RELEASE, nullable=False),
)

mcp_client_type_table = _type_table(
    "mcp_client_type",
)

mcp_client_table = _entity_table(
    "mcp_client",
    Column("name", String(MCP_NAME), nullable=False),
    Column("type_id", Integer, ForeignKey("mcp_client_type.id")),
    Column("transport", coded_enum(McpTransport, "mcp_transport"), nullable=False),
    Column("command", String(512)),
    Column("args", JSON, default=list, nullable=False),
    Column("env", JSON, default=dict, nullable=False),
    Column("url", String(512)),
    Column("headers", JSON, default=dict, nullable=False),
    Column("confidential_headers", JSON, default=list, nullable=False),
    Column("description", Text),
    Column("input_schema", JSON),
    Column("output_schema", JSON),
    key="name",
)

advisor_type_table = _type_table(
    "advisor_type",
)

advisor_table = _entity_table(
    "advisor",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("type_id", Integer, ForeignKey("advisor_type.id")),
    Column("implementation", String(512), nullable=False),
    Column("default_order", Integer, default=0, nullable=False),
    Column("settings", JSON, default=dict, nullable=False),
)

vector_store_type_table = _type_table(
    "vector_store_type",
)

vector_store_table = _entity_table(
    "vector_store",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("type_id", Integer, ForeignKey("vector_store_type.id")),
    Column(
        "kind",
        coded_enum(VectorStoreKind, "vector_store_kind"),
        default=VectorStoreKind.EMBEDDED,
        nullable=False,
    ),
    Column("connection", String(512)),
    Column("default_collection", String(128)),
    Column("settings", JSON, default=dict, nullable=False),
)

document_collection_table = _entity_table(
    "document_collection",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("store_id", Integer, ForeignKey("vector_store.id"), nullable=False),
    Column("collection_name", String(128), nullable=False),
    Column("similarity_threshold", Float, default=0.0, nullable=False),
    Column("top_k", Integer, default=4, nullable=False),
    Column("embedding_model_id", Integer, ForeignKey("model.id")),
    Column("chunk_size", Integer),
    Column("chunk_overlap", Integer, default=50, nullable=False),
    Column(
        "search_mode",
        coded_enum(SearchMode, "search_mode"),
        default=SearchMode.HYBRID,
        nullable=False,
    ),
    Column("qa_model_id", Integer, ForeignKey("model.id")),
    Column("rerank", Boolean, default=False, nullable=False),
    Column("rerank_candidates", Integer, default=10, nullable=False),
)

memory_strategy_type_table = _type_table(
    "memory_strategy_type",
)

memory_strategy_table = _entity_table(
    "memory_strategy",
    Column("code", String(TYPE_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("type_id", Integer, ForeignKey("memory_strategy_type.id")),
    Column("kind", coded_enum(MemoryKind, "memory_kind"), nullable=False),
    Column("window_size", Integer, default=20, nullable=False),
    Column("token_budget", Integer),
    Column("settings", JSON, default=dict, server_default="{}", nullable=False),
)

action_type_table = _type_table(
    "action_type",
    Column("constraint_prompt", Text),
)

action_table = _entity_table(
    "action",
    Column("code", String(CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("goal_description", Text),
    Column("type_id", Integer, ForeignKey("action_type.id")),
    Column("model_id", Integer, ForeignKey("model.id"), nullable=False),
    Column("configuration_id", Integer, ForeignKey("configuration.id"), nullable=False),
    Column("persona_id", Integer, ForeignKey("persona.id")),
    Column("memory_strategy_id", Integer, ForeignKey("memory_strategy.id")),
    Column("prompt", Text, nullable=False),
    Column("audit", Boolean),
    Column("question_timeout", Integer, default=300, nullable=False),
    Column("ask_user", Boolean, default=True, nullable=False),
    Column("progressive_disclosure", Boolean, default=False, nullable=False),
)

action_schema_table = Table(
    "action_schema",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("action_id", Integer, ForeignKey("action.id", ondelete="CASCADE"), nullable=False),
    Column("direction", coded_enum(SchemaDirection, "schema_direction"), nullable=False),
    Column(
        "cardinality",
        coded_enum(Cardinality, "cardinality"),
        default=Cardinality.ITEM,
        nullable=False,
    ),
    Column("schema", JSON, default=dict, nullable=False),
    Column("hint", coded_enum(FormHint, "form_hint")),
    UniqueConstraint("action_id", "direction"),
)

action_skill_table = Table(
    "action_skill",
    metadata,
    Column("action_id", Integer, ForeignKey("action.id", ondelete="CASCADE"), primary_key=True),
    Column("skill_id", Integer, ForeignKey("skill.id"), primary_key=True),
    Column("position", Integer, default=0, nullable=False),
)

action_tool_table = Table(
    "action_tool",
    metadata,
    Column("action_id", Integer, ForeignKey("action.id", ondelete="CASCADE"), primary_key=True),
    Column("tool_id", Integer, ForeignKey("tool.id"), primary_key=True),
    Column("position", Integer, default=0, nullable=False),
)

action_mcp_client_table = Table(
    "action_mcp_client",
    metadata,
    Column("action_id", Integer, ForeignKey("action.id", ondelete="CASCADE"), primary_key=True),
    Column("mcp_client_id", Integer, ForeignKey("mcp_client.id"), primary_key=True),
    Column("position", Integer, default=0, nullable=False),
)

action_advisor_table = Table(
    "action_advisor",
    metadata,
    Column("action_id", Integer, ForeignKey("action.id", ondelete="CASCADE"), primary_key=True),
    Column("advisor_id", Integer, ForeignKey("advisor.id"), primary_key=True),
    Column("advisor_order", Integer),
    Column("position", Integer, default=0, nullable=False),
)

action_collection_table = Table(
    "action_collection",
    metadata,
    Column("action_id", Integer, ForeignKey("action.id", ondelete="CASCADE"), primary_key=True),
    Column("collection_id", Integer, ForeignKey("document_collection.id"), primary_key=True),
    Column("position", Integer, default=0, nullable=False),
)

application_table = _entity_table(
    "application",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("system_prompt", Text),
)

agent_type_table = _type_table(
    "agent_type",
)

agent_table = _entity_table(
    "agent",
    Column("code", String(SHORT_CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("application_id", Integer, ForeignKey("application.id"), nullable=False),
    Column("type_id", Integer, ForeignKey("agent_type.id")),
    Column("prompt", Text),
    Column("goal_action_id", Integer, ForeignKey("action.id")),
)

# A spending limit (budgets): flat limit columns, so the turn's check is one
# Core select; the model and provider filters and the downgrade target are
# references like any other, so a budget never names a model that is gone.
budget_table = _entity_table(
    "budget",
    Column("code", String(CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("scope", String(16), default="tenant", nullable=False),
    Column("match", String(255)),
    Column("model_id", Integer, ForeignKey("model.id")),
    Column("provider_id", Integer, ForeignKey("provider.id")),
    Column("period", String(8), default="month", nullable=False),
    Column("timezone", String(64), default="UTC", nullable=False),
    Column("money", Numeric(18, 6)),
    Column("input_tokens", BigInteger),
    Column("output_tokens", BigInteger),
    Column("turns", BigInteger),
    Column("on_limit", String(16), default="refuse", nullable=False),
    Column("downgrade_to_id", Integer, ForeignKey("model.id")),
    Column("thresholds", JSON, nullable=False),
)

# A virtual MCP server: a tenant's named bundle of tools served at
# /mcp/<code>. Actions, agents and tools are links (a member cannot be
# deleted while a bundle names it); single gateway operations are
# "<gateway code>:<operation>" strings checked against the gateway's include.
virtual_server_table = _entity_table(
    "virtual_server",
    Column("code", String(CODE), nullable=False),
    Column("name", String(128), default="", nullable=False),
    Column("description", Text),
    Column("operations", JSON, nullable=False),
    Column("builtins", JSON, nullable=False),
)


def _member_table(name: str, target: str) -> Table:
    return Table(
        f"virtual_server_{name}",
        metadata,
        Column(
            "virtual_server_id",
            Integer,
            ForeignKey("virtual_server.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        Column(f"{name}_id", Integer, ForeignKey(f"{target}.id"), primary_key=True),
        Column("position", Integer, default=0, nullable=False),
    )


virtual_server_action_table = _member_table("action", "action")
virtual_server_agent_table = _member_table("agent", "agent")
virtual_server_tool_table = _member_table("tool", "tool")
