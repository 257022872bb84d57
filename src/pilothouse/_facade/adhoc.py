"""Ad-hoc runs: an agent described inline, compiled without touching the catalog.

:func:`compile_run` turns an :class:`~pilothouse.types.AdHocRun` into a
:class:`~pilothouse.runtime.CompiledAction` the runner runs like a catalog
action's: the model is a catalog model of the tenant or a model endpoint,
tools are the tenant's active catalog tools, MCP servers become unsaved
catalog clients. :func:`conversation_for` finds the conversation a run with
chat memory continues.
"""

from __future__ import annotations

__all__ = ["ADHOC_ACTION", "RECORD_KEY", "compile_run", "conversation_for", "new_memory_id"]

import json
import uuid as uuid_module
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sqlalchemy import select

from pilothouse.catalog._enums import (
    Cardinality,
    McpTransport,
    MemoryKind,
    ModelCapability,
    ProcessStatus,
    ProviderKind,
)
from pilothouse.catalog._models import (
    ADHOC_ACTION,
    DocumentCollection,
    McpClient,
    Model,
    Tool,
)
from pilothouse.errors import InvalidFieldError
from pilothouse.memory import NO_MEMORY, MemoryPolicy
from pilothouse.providers import ModelSpec, ProviderSpec
from pilothouse.providers._egress import EgressPolicy
from pilothouse.providers._spec import custom_config_options
from pilothouse.runtime import ActionCompiler, CompiledAction
from pilothouse.runtime._retrieval import RetrievalSource
from pilothouse.store import Conversation, Database
from pilothouse.types import AdHocRun, ModelEndpoint, PgVectorTable

if TYPE_CHECKING:
    from pilothouse.knowledge import Knowledge
    from pilothouse.tools import ExecutableTool

RECORD_KEY = "invoke"
"""Where a run's ``record`` sits in the data of its system message."""

# The statuses in which an ad-hoc conversation of a memory id is continued.
_CONTINUED = frozenset({ProcessStatus.NOT_STARTED, ProcessStatus.COMPLETED, ProcessStatus.RUNNING})


async def _model_spec(
    database: Database, tenant: str, compiler: ActionCompiler, model: str | ModelEndpoint
) -> ModelSpec:
    if isinstance(model, ModelEndpoint):
        return ModelSpec(
            code=ADHOC_ACTION,
            provider=ProviderSpec(
                # The vendor as outputAiMeta.provider names it: a server that
                # speaks OpenAI's protocol, whoever runs it.
                code=ProviderKind.OPENAI_COMPATIBLE.value,
                kind=ProviderKind.OPENAI_COMPATIBLE,
                base_url=model.base_url,
                api_key=model.api_key,
                headers=dict(model.headers),
            ),
            model_name=model.model_name,
            capabilities=frozenset({ModelCapability.STREAMING, ModelCapability.FUNCTION_CALLING}),
        )
    async with database.sessions() as session:
        row = await session.scalar(select(Model).where(Model.tenant == tenant, Model.code == model))
    if row is None or not row.active:
        raise InvalidFieldError(
            "model",
            f"'{model}' is not an active model code of this catalog; "
            "give baseUrl to call a model on an OpenAI-compatible server",
        )
    # The catalog model's spec, secrets resolved, exactly as actions get it.
    return compiler.model_spec(row)


async def _tools(database: Database, tenant: str, codes: tuple[str, ...]) -> list[Tool]:
    if not codes:
        return []
    async with database.sessions() as session:
        rows = await session.scalars(
            select(Tool).where(Tool.tenant == tenant, Tool.code.in_(codes), Tool.active.is_(True))
        )
        found = {row.code: row for row in rows.unique()}
    for index, code in enumerate(codes):
        if code not in found:
            raise InvalidFieldError(
                f"tools[{index}]", f"'{code}' is not an active tool of this catalog"
            )
    return [found[code] for code in codes]


def _tool_classes(
    run: AdHocRun, allowed: tuple[str, ...], tool_rows: list[Tool]
) -> tuple[ExecutableTool, ...]:
    """The tools of the run's tool classes; only classes the operator allowed are imported."""
    if not run.tool_classes:
        return ()
    from pilothouse.tools._base import ToolError
    from pilothouse.tools._classes import DOTTED_NAME, tool_class_tools
    from pilothouse.tools._code import CodePolicy

    allow = CodePolicy.granted(allowed, setting="PILOTHOUSE_INVOKE_TOOL_CLASSES")
    for index, name in enumerate(run.tool_classes):
        if not DOTTED_NAME.match(name) or "." not in name:
            raise InvalidFieldError(
                f"tool_classes[{index}]",
                f"'{name}' is not a class name: write package.module.Class",
            )
        module_name, _, class_name = name.rpartition(".")
        if allow.refusal(f"{module_name}:{class_name}") is not None:
            listed = "lists other modules" if allow.entries else "is empty"
            raise InvalidFieldError(
                f"tool_classes[{index}]",
                f"'{name}' is not allowed on this deployment: its operator lists the modules "
                f"and classes callers may name in PILOTHOUSE_INVOKE_TOOL_CLASSES "
                f"(Settings.invoke_tool_classes), which {listed}",
            )
    built: list[ExecutableTool] = []
    taken = {row.name: f"catalog tool '{row.code}'" for row in tool_rows}
    for index, name in enumerate(run.tool_classes):
        try:
            tools = tool_class_tools(name, allow)
        except ToolError as exc:
            raise InvalidFieldError(f"tool_classes[{index}]", str(exc)) from None
        for executable in tools:
            tool_name = executable.definition.name
            if tool_name in taken:
                raise InvalidFieldError(
                    f"tool_classes[{index}]",
                    f"'{name}' has a tool '{tool_name}', the name of {taken[tool_name]}",
                )
            taken[tool_name] = f"a tool of '{name}'"
            built.append(executable)
    return tuple(built)


async def _check_collection(database: Database, tenant: str, code: str | None) -> None:
    if code is None:
        return
    async with database.sessions() as session:
        active = await session.scalar(
            select(DocumentCollection.active).where(
                DocumentCollection.tenant == tenant, DocumentCollection.code == code
            )
        )
    if not active:
        raise InvalidFieldError("collection", f"'{code}' is not an active document collection")


def _output(schema: Mapping[str, Any] | None) -> tuple[dict[str, Any] | None, Any, str | None]:
    """The output schema, its validator and its prompt part (all None for text answers)."""
    if schema is None:
        return None, None, None
    from jsonschema.exceptions import SchemaError

    from pilothouse.runtime._schema_patterns import validator_class

    checked = dict(schema)
    cls = validator_class(checked)
    try:
        cls.check_schema(checked)
    except SchemaError as exc:
        raise InvalidFieldError(
            "output_schema", f"not a valid JSON schema: {exc.message}"
        ) from None
    part = f"Output data structure:\n{json.dumps(checked, indent=2, sort_keys=True)}"
    return checked, cls(checked), part


def _mcp_clients(run: AdHocRun) -> list[McpClient]:
    """The run's MCP servers as (unsaved) catalog clients, for the tool loop.

    Their headers are literal values from the caller; they stay in memory and
    are never recorded (the audit keeps header names only).
    """
    transports = {"streamable-http": McpTransport.STREAMABLE_HTTP, "sse": McpTransport.SSE}
    return [
        McpClient(
            name=f"invoke{index}",
            transport=transports[server.transport],
            url=server.url,
            headers=dict(server.headers),
            confidential_headers=list(server.headers),
            args=[],
            env={},
        )
        for index, server in enumerate(run.mcp_servers)
    ]


async def check_egress(run: AdHocRun, policy: EgressPolicy) -> None:
    """Refuse a run whose model server, MCP or pgvector servers are addresses callers may not reach.

    Raises:
        InvalidFieldError: naming ``baseUrl``, ``mcpServers[i].url`` or ``pgHost``.
    """
    if isinstance(run.model, ModelEndpoint):
        await policy.check(run.model.base_url, "base_url")
    for index, server in enumerate(run.mcp_servers):
        await policy.check(server.url, f"mcp_servers[{index}].url")
    if run.pgvector is not None:
        table = run.pgvector
        await policy.check(
            f"postgresql://{_host(table.host)}:{table.port}", "pg_host", schemes=("postgresql",)
        )


def _host(host: str) -> str:
    # An IPv6 literal goes in brackets inside a URL.
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


async def _embedding_spec(
    database: Database, tenant: str, compiler: ActionCompiler, run: AdHocRun, name: str
) -> tuple[ModelSpec, int | None]:
    """The model that embeds the query: a catalog EM model, or ``name`` at the run's endpoint."""
    async with database.sessions() as session:
        row = await session.scalar(select(Model).where(Model.tenant == tenant, Model.code == name))
    if row is not None and row.active:
        if ModelCapability.EMBEDDING.value not in row.capabilities:
            raise InvalidFieldError(
                "embedding_model_name", f"catalog model '{name}' is not an embedding model (EM)"
            )
        return compiler.model_spec(row), row.max_input_tokens
    if not isinstance(run.model, ModelEndpoint):
        raise InvalidFieldError(
            "embedding_model_name",
            f"'{name}' is no embedding model code of this catalog; to call it at an "
            "OpenAI-compatible server's /embeddings, give baseUrl (and apiKey)",
        )
    endpoint = run.model
    spec = ModelSpec(
        code=ADHOC_ACTION,
        provider=ProviderSpec(
            code=ProviderKind.OPENAI_COMPATIBLE.value,
            kind=ProviderKind.OPENAI_COMPATIBLE,
            base_url=endpoint.base_url,
            api_key=endpoint.api_key,
            headers=dict(endpoint.headers),
        ),
        model_name=name,
        capabilities=frozenset({ModelCapability.EMBEDDING}),
    )
    return spec, None


async def _retrieval(
    database: Database,
    tenant: str,
    compiler: ActionCompiler,
    run: AdHocRun,
    knowledge: Knowledge | None,
) -> tuple[RetrievalSource, ...]:
    """The collections the run retrieves from: the catalog's it names, and its pgvector table."""
    sources: list[RetrievalSource] = []
    if run.collection is not None:
        threshold = None if run.rag_min_score is None else 2.0 * run.rag_min_score - 1.0
        sources.append(RetrievalSource(run.collection, top_k=run.rag_top_k, threshold=threshold))
    table: PgVectorTable | None = run.pgvector
    if table is not None:
        assert knowledge is not None, "a run with a pgvector table needs the knowledge service"
        from pilothouse.knowledge import DimensionMismatchError
        from pilothouse.knowledge._pgvector import check_table_name

        check_table_name(table.table, "pg_table")
        spec, limit = None, None
        if table.embedding_model:
            spec, limit = await _embedding_spec(
                database, tenant, compiler, run, table.embedding_model
            )
        connection = (
            f"postgresql://{quote(table.user, safe='')}@{_host(table.host)}:{table.port}/"
            f"{quote(table.database, safe='')}"
        )
        try:
            collection = knowledge.adhoc_collection(
                tenant,
                connection=connection,
                password=table.password,
                table=table.table,
                top_k=table.top_k,
                # LangChain4j's minScore is a relevance, (1 + cosine) / 2.
                threshold=2.0 * table.min_score - 1.0,
                model=spec,
                dimension=table.dimension,
                **({"max_input_tokens": limit} if limit else {}),
            )
        except DimensionMismatchError as exc:
            raise InvalidFieldError("embedding_dimension", str(exc)) from None
        sources.append(RetrievalSource(ADHOC_ACTION, collection=collection))
    return tuple(sources)


async def compile_run(
    database: Database,
    tenant: str,
    compiler: ActionCompiler,
    run: AdHocRun,
    knowledge: Knowledge | None = None,
    *,
    allowed_tool_classes: tuple[str, ...] = (),
) -> CompiledAction:
    """Check what the run references and compile it; nothing is written.

    Args:
        database: the catalog's database.
        tenant: who runs it.
        compiler: resolves catalog models' secrets.
        run: the run.
        knowledge: the knowledge service (needed for a run with a pgvector table).
        allowed_tool_classes: the deployment's allow-list of tool classes.

    Raises:
        InvalidFieldError: an inactive or unknown model, tool or collection,
            a tool class not allowed, not importable or without ``@tool`` methods,
            an output schema that is no JSON schema, or a pgvector table
            whose dimension the packaged model does not give.
    """
    spec = await _model_spec(database, tenant, compiler, run.model)
    # A catalog model's Vantiq class_name parameters, under the run's own options.
    options = custom_config_options(
        spec.provider.code, spec.provider.settings, spec.provider.kind
    ).merged(run.options)
    if isinstance(run.model, ModelEndpoint) and run.options.reasoning_summary is not None:
        # Only the Responses API returns a reasoning summary: the connector's
        # reasoningSummary switches to it at a baseUrl as with OpenAI.
        spec = replace(
            spec,
            provider=replace(
                spec.provider, settings={**spec.provider.settings, "api": "responses"}
            ),
        )
    tools = await _tools(database, tenant, run.tools)
    local_tools = _tool_classes(run, allowed_tool_classes, tools)
    await _check_collection(database, tenant, run.collection)
    retrieval = await _retrieval(database, tenant, compiler, run, knowledge)
    schema, validator, schema_part = _output(run.output_schema)
    persona = f"You are {run.name}."
    if run.description:
        persona += f" {run.description}"
    parts = [("agent", persona)]
    if schema_part is not None:
        parts.append(("schemas", schema_part))
    # useChatMemory false: the call sees only its own messages.
    memory = (
        MemoryPolicy(kind=MemoryKind.WINDOW, window=run.memory.max_messages)
        if run.memory is not None
        else NO_MEMORY
    )
    return CompiledAction(
        revision=0,
        action_code=ADHOC_ACTION,
        agent_code=None,
        model=spec,
        options=options,
        retry_count=2,
        retry_delay=0.5,
        # Not templated: the caller's texts are sent as they are, braces and all.
        prompt_parts=tuple(parts),
        templated=False,
        output_schema=schema,
        output_cardinality=Cardinality.ITEM if schema is not None else None,
        memory=memory,
        audit=run.audit,
        tools=(),
        _validator=validator,
        tool_rows=tuple(tools),
        mcp_clients=tuple(_mcp_clients(run)),
        retrieval=retrieval,
        ask_user=run.ask_user,
        local_tools=local_tools,
    )


async def conversation_for(
    database: Database, tenant: str, run: AdHocRun
) -> tuple[str, ProcessStatus, str] | None:
    """Return the conversation a run with chat memory continues (uuid, status, memory id).

    None when the run starts a new one: no chat memory, no earlier
    conversation with its memory id, or the last one failed or was cancelled.
    """
    memory_id = run.memory.memory_id if run.memory is not None else None
    if memory_id is None:
        return None
    async with database.sessions() as session:
        row = (
            await session.execute(
                select(Conversation.uuid, Conversation.status)
                .where(
                    Conversation.tenant == tenant,
                    Conversation.action_code == ADHOC_ACTION,
                    Conversation.memory_id == memory_id,
                )
                .order_by(Conversation.created_at.desc(), Conversation.id.desc())
                .limit(1)
            )
        ).first()
    if row is not None and row[1] in _CONTINUED:
        # A running one is handed to the runner, which refuses it as running.
        # A cancelled (TE) or failed one is not continued: the connector
        # documents that the next call starts a new conversation.
        return row[0], row[1], memory_id
    return None


def new_memory_id(run: AdHocRun) -> str | None:
    """The memory id of a new conversation of the run: its own, a fresh one, or None."""
    if run.memory is None:
        return None
    return run.memory.memory_id or str(uuid_module.uuid4())
