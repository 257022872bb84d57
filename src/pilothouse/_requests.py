"""The ad-hoc run's request and result types, and embeddings.

Their public address is :mod:`pilothouse.types`; they live here so that the
module of public names stays a readable index.
"""

from __future__ import annotations

__all__ = [
    "AdHocResult",
    "AdHocRun",
    "ChatMemory",
    "Embeddings",
    "McpServer",
    "ModelEndpoint",
    "PgVectorTable",
]

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pilothouse.catalog._enums import InstructionMode
from pilothouse.providers._options import ModelOptions

if TYPE_CHECKING:
    from pilothouse.runtime._events import TurnResult


@dataclass(frozen=True)
class ModelEndpoint:
    """A model on an OpenAI-compatible server, called with the caller's credentials.

    The key and the header values are used for the calls only: never stored,
    logged or echoed.

    Attributes:
        base_url: the server's http(s) URL, e.g. ``https://host/v1``.
        model_name: the model to ask for.
        api_key: the bearer key, if the server wants one.
        headers: extra request headers.
    """

    base_url: str
    model_name: str
    api_key: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])


@dataclass(frozen=True)
class McpServer:
    """An MCP server whose tools an ad-hoc run may call.

    Attributes:
        url: the server's http(s) URL.
        headers: request headers (sent as they are; the audit keeps their names only).
        transport: ``streamable-http`` or ``sse``.
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    transport: Literal["streamable-http", "sse"] = "streamable-http"


@dataclass(frozen=True)
class ChatMemory:
    """How an ad-hoc run remembers earlier calls.

    Attributes:
        memory_id: every run with the same id continues one conversation (a
            new one, sharing the memory, only after the last one failed or
            was cancelled); a fresh id when None.
        max_messages: the most stored messages sent to the model.
    """

    memory_id: str | None = None
    max_messages: int = 20


@dataclass(frozen=True)
class PgVectorTable:
    """A LangChain4j ``PgVectorEmbeddingStore`` table an ad-hoc run retrieves from.

    The BPMN connector's RAG parameters (seed 003): the table is searched as
    LangChain4j filled it, with the embedding model that filled it.

    Attributes:
        host: the PostgreSQL host (checked against the egress policy).
        port: its port.
        database: the database.
        user: the role.
        password: its password (used for the connection, never recorded).
        table: the table (``langchain4j_embeddings`` by default).
        dimension: the vectors' length in the table (384: all-MiniLM-L6-v2).
        embedding_model: the model that embeds the query: a catalog embedding
            model's code, or a model name called at the run's model endpoint
            (``/embeddings``); None for the packaged all-MiniLM-L6-v2.
        top_k: hits at most (``maxRagResults``).
        min_score: least LangChain4j relevance, ``(1 + cosine) / 2``
            (``minRagScore``).
    """

    host: str
    port: int = 5432
    database: str = "postgres"
    user: str = "postgres"
    password: str | None = field(default=None, repr=False)
    table: str = "langchain4j_embeddings"
    dimension: int = 384
    embedding_model: str | None = None
    top_k: int = 5
    min_score: float = 0.0


@dataclass(frozen=True)
class AdHocRun:
    """One turn of an agent described inline rather than in the catalog.

    Nothing is written to the catalog: conversations of ad-hoc runs have the
    reserved action code ``INVOKE`` and no agent code; before each turn the
    run's system prompt is recorded as a system message with ``record``.

    Attributes:
        name: the agent's name ("You are <name>.").
        message: the user's message.
        model: a catalog model code of the tenant, or a model endpoint.
        description: more about the agent, after its name.
        instruction: the caller's instruction, combined with the default.
        instruction_mode: how it combines (append, prepend or replace).
        options: sampling and limit options (temperature, max_tokens, ...).
        tools: codes of active catalog tools the agent may call.
        tool_classes: dotted class names (``package.module.Class``) whose
            ``@tool``-marked methods the agent may call; each must be on the
            deployment's ``Settings.invoke_tool_classes`` allow-list.
        mcp_servers: MCP servers whose tools the agent may call.
        memory: chat memory across runs; None for none (each run is a new
            conversation whose memory is its own).
        audit: record the audit timeline; None follows the deployment.
        output_schema: a JSON schema the answer must match (the answer is
            then parsed JSON); None for text.
        collection: an active document collection of the catalog searched
            before the model is called (its top-K and threshold unless
            ``rag_top_k`` / ``rag_min_score`` say otherwise).
        rag_top_k: hits at most from ``collection``.
        rag_min_score: least LangChain4j relevance ``(1 + cosine) / 2`` of a
            hit from ``collection``.
        pgvector: a LangChain4j pgvector table searched before the model is called.
        record: JSON data kept with the run's system message (the caller's
            own view of its parameters, for the audit); never credentials.
        ask_user: offer the built-in ``AskUserQuestion`` tool, as an action
            does by default. False offers the model only ``tools`` and
            ``mcp_servers``: a run with none of them is the bare model,
            which streams even on a server that cannot stream while tools
            are offered (llama.cpp).
    """

    name: str
    message: str
    model: str | ModelEndpoint
    description: str | None = None
    instruction: str | None = None
    instruction_mode: InstructionMode = InstructionMode.APPEND
    options: ModelOptions = field(default_factory=ModelOptions)
    tools: tuple[str, ...] = ()
    mcp_servers: tuple[McpServer, ...] = ()
    memory: ChatMemory | None = field(default_factory=ChatMemory)
    tool_classes: tuple[str, ...] = ()
    audit: bool | None = None
    output_schema: Mapping[str, Any] | None = None
    collection: str | None = None
    rag_top_k: int | None = None
    rag_min_score: float | None = None
    pgvector: PgVectorTable | None = None
    record: Mapping[str, Any] = field(default_factory=dict[str, Any])
    ask_user: bool = True


@dataclass(frozen=True)
class AdHocResult:
    """What an ad-hoc run produced.

    Attributes:
        result: the turn's result (status ``FA`` with the error when it failed).
        conversation_uuid: the conversation the turn ran in.
        memory_id: the chat memory it used; pass it again to continue.
        warnings: what the run accepted but could not honour fully.
    """

    result: TurnResult
    conversation_uuid: str
    memory_id: str
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class Embeddings:
    """Texts embedded by a catalog embedding model (``ph.knowledge.embed``).

    Attributes:
        model: the model's code.
        dimension: the vectors' length.
        vectors: one unit vector per text, in order.
        tokens: the tokens the texts took (the model's own count, or its estimate).
    """

    model: str
    dimension: int
    vectors: list[list[float]]
    tokens: int
