"""Coded values of the catalog and the conversation store.

The one- and two-letter codes are the reference data model's stable wire
values; each member carries a readable name (the member name) and the code
(the value), so the database and the API keep the codes while code reads well.
"""

from __future__ import annotations

__all__ = [
    "AdvisorKind",
    "Cardinality",
    "ExecutionPolicy",
    "FinishReason",
    "FormHint",
    "InstructionMode",
    "McpTransport",
    "MemoryKind",
    "MessageRole",
    "ModelCapability",
    "ProcessStatus",
    "ProviderKind",
    "SchemaDirection",
    "SearchMode",
    "TimelineKind",
    "ToolCallStatus",
    "ToolKind",
    "VectorStoreKind",
]

from enum import StrEnum


class ProcessStatus(StrEnum):
    """Status of a conversation."""

    NOT_STARTED = "NS"
    RUNNING = "RU"
    COMPLETED = "CO"
    FAILED = "FA"
    TERMINATED = "TE"
    KILLED = "KI"
    STUCK = "ST"
    WAITING = "WA"
    PAUSED = "PA"


class FinishReason(StrEnum):
    """Why the model stopped."""

    STOP = "ST"
    LENGTH = "LE"
    CONTENT_FILTER = "CF"
    TOOL_CALLS = "TC"
    OTHER = "OT"


class MessageRole(StrEnum):
    """Who a message is from."""

    SYSTEM = "SY"
    USER = "US"
    ASSISTANT = "AS"
    TOOL = "TO"
    QUESTION = "QU"


class SchemaDirection(StrEnum):
    """Which way an action's schema faces."""

    INPUT = "I"
    OUTPUT = "O"
    MEMORY = "M"


class Cardinality(StrEnum):
    """Whether a schema describes one item or a list of them."""

    ITEM = "I"
    LIST = "L"


class FormHint(StrEnum):
    """How a user interface should render a schema."""

    FORM = "form"
    GRID = "grid"


class McpTransport(StrEnum):
    """How an MCP client reaches its server."""

    STDIO = "ST"
    STREAMABLE_HTTP = "SH"
    SSE = "SE"


class ModelCapability(StrEnum):
    """What a model can do."""

    FUNCTION_CALLING = "FC"
    VISION = "VI"
    STREAMING = "SR"
    JSON_MODE = "JM"
    EMBEDDING = "EM"
    AUDIO = "AU"


class ProviderKind(StrEnum):
    """The API a provider speaks; decides which adapter serves its models."""

    OPENAI = "openai"
    OPENAI_COMPATIBLE = "openai-compatible"
    AZURE = "azure"
    ANTHROPIC = "anthropic"
    BEDROCK = "bedrock"
    GOOGLE = "google"
    OLLAMA = "ollama"
    SAGEMAKER = "sagemaker"
    LOCAL = "local"
    TEST = "test"


class VectorStoreKind(StrEnum):
    """The engine a vector store runs on; decides which store serves its collections."""

    EMBEDDED = "embedded"
    """Chunks in pilothouse's own database, vectors searched in process."""
    PGVECTOR = "pgvector"
    """A PostgreSQL database with the pgvector extension."""


class SearchMode(StrEnum):
    """How a collection finds chunks for a query."""

    HYBRID = "hybrid"
    """Full text and vectors, fused by reciprocal rank."""
    VECTOR = "vector"
    TEXT = "text"


class ToolKind(StrEnum):
    """How a tool is carried out."""

    PYTHON = "python"
    REST = "rest"
    MCP = "mcp"
    SCRIPT = "script"
    SCHEMA = "schema"
    EVENT = "event"
    """Published on the event bus and answered by a worker (docs/events.md)."""


class ExecutionPolicy(StrEnum):
    """Whether a tool may run on the model's word alone."""

    ALLOW = "allow"
    AUTHORIZED = "authorized"


class MemoryKind(StrEnum):
    """How much chat history a turn sees."""

    FULL = "FULL"
    WINDOW = "WINDOW"
    SCOPED = "SCOPED"
    """WINDOW(n) of the conversation plus memories retrieved from the session,
    user, agent and organization scopes (``docs/memory.md``)."""


class AdvisorKind(StrEnum):
    """Built-in advisor families; ``custom`` resolves a Python reference."""

    LOGGING = "logging"
    CACHE = "cache"
    CONTENT_FILTER = "content-filter"
    RAG = "rag"
    MEMORY = "memory"
    CUSTOM = "custom"


class InstructionMode(StrEnum):
    """How a caller's instruction combines with the bundled default."""

    REPLACE = "replace"
    APPEND = "append"
    PREPEND = "prepend"


class ToolCallStatus(StrEnum):
    """Where a tool call stands."""

    REQUESTED = "requested"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DENIED = "denied"
    RETURNED = "returned"


class TimelineKind(StrEnum):
    """Kinds of audit events in a conversation's timeline."""

    STATUS_CHANGE = "status_change"
    REQUEST = "request"
    RESPONSE = "response"
    ERROR = "error"
    RETRY = "retry"
    TOOL_EXECUTION = "tool_execution"
    HUMAN_ANSWER = "human_answer"
    CANCEL = "cancel"
    MEMORY = "memory"
    FORK = "fork"
    """An edit replaced the conversation by a fork, or this one is the fork."""
    RENAME = "rename"
    HIDE = "hide"
    """A client deleted the conversation from its list; nothing was erased."""
    IMPORT = "import"
    RETRIEVAL = "retrieval"
    RECOVER = "recover"
    BUDGET = "budget"
    """A budget threshold was reached (announced once per period)."""
