"""The one-call connector: ``POST /v1/invoke`` runs an ad-hoc agent in one request.

Workflow engines call an "AI agent" node with everything inline: a name,
an instruction, a model, a message, tools and chat-memory settings. This
route compiles that into an ad-hoc :class:`~pilothouse.runtime.CompiledAction`
(nothing is written to the catalog) and runs one turn of it:

- the model is a catalog model code of the tenant, or, with ``baseUrl``, a
  model name on an OpenAI-compatible server called with ``apiKey`` and
  ``customHeaders`` (used for the call, never stored, logged or echoed);
- conversations have action code ``INVOKE`` and no agent code: the agent's
  name and every parameter but the credentials are recorded in a system
  message written before each turn, whose text is that turn's system prompt;
- with ``useChatMemory`` (the default) every call with the same
  ``memoryId`` continues one conversation, so the timeline is literally
  one; a new conversation with the same memory id (and so the same chat
  memory) is started only when the last one failed or was cancelled.

See ``docs/invoke.md``.
"""

from __future__ import annotations

__all__ = ["InvokeRequest", "router"]

import json
import uuid as uuid_module
from typing import Annotated, Any, Literal
from urllib.parse import urlparse, urlunparse

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel
from sqlalchemy import select

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import (
    FinishReason,
    McpTransport,
    MemoryKind,
    MessageRole,
    ModelCapability,
    ProcessStatus,
    ProviderKind,
)
from pilothouse.catalog._models import DocumentCollection, McpClient, Model, Tool
from pilothouse.memory import MemoryPolicy
from pilothouse.providers import ModelOptions, ModelSpec, ProviderSpec
from pilothouse.providers._options import ReasoningEffort, ReasoningSummary
from pilothouse.runtime import CompiledAction, TurnResult
from pilothouse.server._deps import Facade
from pilothouse.server._openai_models import inline_schema
from pilothouse.server._problems import ProblemError, problem_responses
from pilothouse.server._replay import append_messages
from pilothouse.store import STARTABLE, Conversation, NewMessage

router = APIRouter(tags=["connector"])

INVOKE_ACTION = "INVOKE"
"""The action code of every connector conversation (reserved)."""

_Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
_MemoryId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:@-]{1,64}$")]


class _Body(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


def _http_url(value: str, field: str) -> str:
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"{field} must be an http(s) URL")
    return value


class McpServerParam(_Body):
    """One MCP server whose tools the ad-hoc agent may call."""

    url: str
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    transport: Literal["streamable-http", "sse"] = "streamable-http"

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return _http_url(value, "url")


class InvokeRequest(_Body):
    """The body of ``POST /v1/invoke`` (camelCase on the wire)."""

    agent_name: _Name
    agent_description: str | None = Field(default=None, max_length=4000)
    instruction: str | None = Field(default=None, max_length=100_000)
    instruction_mode: Literal["replace", "append", "prepend"] = "append"
    model: str | None = Field(default=None, min_length=1, max_length=256)
    message: str = Field(min_length=1)
    base_url: str | None = None
    api_key: SecretStr | None = None
    custom_headers: dict[str, str] = Field(default_factory=dict[str, str])
    reasoning_effort: ReasoningEffort | None = None
    reasoning_summary: ReasoningSummary | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    tools: list[str] = Field(default_factory=list[str], max_length=128)
    mcp_servers: list[McpServerParam] = Field(default_factory=list[McpServerParam], max_length=32)
    use_chat_memory: bool = True
    memory_id: _MemoryId | None = None
    chat_memory_max_messages: int = Field(default=20, ge=1, le=1000)
    persist_chat_log: bool | None = None
    collection: str | None = Field(default=None, min_length=1, max_length=64)
    max_rag_results: int = Field(default=5, ge=1, le=100)
    min_rag_score: float = Field(default=0.0, ge=0.0, le=1.0)

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value, "baseUrl")


def _field(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = to_camel(part)
            text += f".{name}" if text else name
    return text or "body"


def _bad_request(field: str, rule: str) -> ProblemError:
    return ProblemError(
        400, "Invalid invoke request", f"{field}: {rule}", errors=[{"field": field, "rule": rule}]
    )


def parse_invoke(raw: bytes) -> InvokeRequest:
    """Validate a request body.

    Raises:
        ProblemError: 400 naming every offending field (the values are left
            out: one of them may be the API key).
    """
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = f"the request body is not valid JSON: {exc}"
        raise ProblemError(400, "Malformed JSON", detail) from None
    if not isinstance(data, dict):
        raise _bad_request("body", "must be a JSON object")
    try:
        return InvokeRequest.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": _field(e["loc"]), "rule": e["msg"].removeprefix("Value error, ")}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors)
        raise ProblemError(400, "Invalid invoke request", detail, errors=errors) from None


async def _model_spec(ph: Pilothouse, body: InvokeRequest) -> ModelSpec:
    if body.base_url is not None:
        if body.model is None:
            raise _bad_request("model", "give the model name to call at baseUrl")
        return ModelSpec(
            code=INVOKE_ACTION,
            provider=ProviderSpec(
                code=INVOKE_ACTION,
                kind=ProviderKind.OPENAI_COMPATIBLE,
                base_url=body.base_url,
                api_key=body.api_key.get_secret_value() if body.api_key else None,
                headers=dict(body.custom_headers),
            ),
            model_name=body.model,
            capabilities=frozenset({ModelCapability.STREAMING, ModelCapability.FUNCTION_CALLING}),
        )
    if body.model is None:
        raise _bad_request(
            "model", "name a catalog model code, or give baseUrl with the model name"
        )
    async with ph.database.sessions() as session:
        row = await session.scalar(
            select(Model).where(Model.tenant == ph.tenant, Model.code == body.model)
        )
    if row is None or not row.active:
        raise _bad_request(
            "model",
            f"'{body.model}' is not an active model code of this catalog; "
            "give baseUrl to call a model on an OpenAI-compatible server",
        )
    if body.api_key is not None or body.custom_headers:
        raise _bad_request("apiKey", "apiKey and customHeaders go with baseUrl only")
    # The catalog model's spec, secrets resolved, exactly as actions get it.
    return ph.runner.compiler.model_spec(row)


async def _tools(ph: Pilothouse, codes: list[str]) -> list[Tool]:
    rows: list[Tool] = []
    for index, code in enumerate(codes):
        row = await ph.query.find_tool_by_code(code)
        if row is None or not row.active:
            raise _bad_request(f"tools[{index}]", f"'{code}' is not an active tool of this catalog")
        rows.append(row)
    return rows


async def _check_collection(ph: Pilothouse, code: str | None) -> None:
    if code is None:
        return
    async with ph.database.sessions() as session:
        active = await session.scalar(
            select(DocumentCollection.active).where(
                DocumentCollection.tenant == ph.tenant, DocumentCollection.code == code
            )
        )
    if not active:
        raise _bad_request("collection", f"'{code}' is not an active document collection")


def _compiled(body: InvokeRequest, spec: ModelSpec, tools: list[Tool]) -> CompiledAction:
    persona = f"You are {body.agent_name}."
    if body.agent_description:
        persona += f" {body.agent_description}"
    return CompiledAction(
        revision=0,
        action_code=INVOKE_ACTION,
        agent_code=None,
        model=spec,
        options=ModelOptions(
            temperature=body.temperature,
            max_tokens=body.max_tokens,
            top_p=body.top_p,
            reasoning_effort=body.reasoning_effort,
            reasoning_summary=body.reasoning_summary,
        ),
        retry_count=2,
        retry_delay=0.5,
        # Not templated: the caller's texts are sent as they are, braces and all.
        prompt_parts=(("agent", persona),),
        templated=False,
        output_schema=None,
        output_cardinality=None,
        memory=MemoryPolicy(kind=MemoryKind.WINDOW, window=body.chat_memory_max_messages),
        audit=body.persist_chat_log,
        tools=(),
        tool_rows=tuple(tools),
        mcp_clients=tuple(_mcp_clients(body)),
    )


def _mcp_clients(body: InvokeRequest) -> list[McpClient]:
    """The request's MCP servers as (unsaved) catalog clients, for the tool loop.

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
        for index, server in enumerate(body.mcp_servers)
    ]


def _without_credentials(url: str) -> str:
    parsed = urlparse(url)
    netloc = parsed.hostname or ""
    if parsed.port is not None:
        netloc += f":{parsed.port}"
    return urlunparse(parsed._replace(netloc=netloc, query="", fragment=""))


def _record(body: InvokeRequest) -> dict[str, Any]:
    """Every parameter of the call, for the audit, without credentials or header values."""
    return {
        "agentName": body.agent_name,
        "agentDescription": body.agent_description,
        "instructionMode": body.instruction_mode,
        "model": body.model,
        "baseUrl": _without_credentials(body.base_url) if body.base_url else None,
        "apiKeyGiven": body.api_key is not None,
        "customHeaderNames": sorted(body.custom_headers),
        "reasoningEffort": body.reasoning_effort,
        "reasoningSummary": body.reasoning_summary,
        "tools": list(body.tools),
        "mcpServers": [
            {
                "url": _without_credentials(s.url),
                "transport": s.transport,
                "headerNames": sorted(s.headers),
            }
            for s in body.mcp_servers
        ],
        "useChatMemory": body.use_chat_memory,
        "chatMemoryMaxMessages": body.chat_memory_max_messages,
        "persistChatLog": body.persist_chat_log,
        "collection": body.collection,
        "maxRagResults": body.max_rag_results,
        "minRagScore": body.min_rag_score,
    }


def _warnings(body: InvokeRequest) -> list[str]:
    warnings: list[str] = []
    if body.collection is not None:
        warnings.append("collection was validated but retrieval (RAG) is not used yet")
    if not body.use_chat_memory and body.memory_id is not None:
        warnings.append("memoryId is ignored without useChatMemory")
    return warnings


async def _conversation(ph: Pilothouse, body: InvokeRequest) -> tuple[str, ProcessStatus, str]:
    """Return the conversation to continue (uuid, status, memory id), creating it if needed."""
    audit = body.persist_chat_log if body.persist_chat_log is not None else ph.settings.audit
    memory_id = body.memory_id if body.use_chat_memory else None
    if memory_id is not None:
        async with ph.database.sessions() as session:
            row = (
                await session.execute(
                    select(Conversation.uuid, Conversation.status)
                    .where(
                        Conversation.tenant == ph.tenant,
                        Conversation.action_code == INVOKE_ACTION,
                        Conversation.memory_id == memory_id,
                    )
                    .order_by(Conversation.created_at.desc(), Conversation.id.desc())
                    .limit(1)
                )
            ).first()
        if row is not None and row[1] in STARTABLE | {ProcessStatus.RUNNING}:
            # A running one is handed to the runner, which refuses it with a 409.
            return row[0], row[1], memory_id
    elif body.use_chat_memory:
        memory_id = str(uuid_module.uuid4())
    # Created through the writer, not start_conversation: INVOKE is no catalog action.
    created = await ph.runner.store.create(
        ph.tenant, action_code=INVOKE_ACTION, agent_code=None, memory_id=memory_id, audit=audit
    )
    return created.uuid, ProcessStatus.NOT_STARTED, created.memory_id


def _response(result: TurnResult, memory_id: str, warnings: list[str]) -> dict[str, Any]:
    finish = result.finish_reason
    return {
        "output": result.output,
        "outputAiMeta": result.ai_meta,
        "memoryId": memory_id,
        "conversationUuid": result.conversation_uuid,
        "status": result.status.value,
        "finishReason": finish.value if isinstance(finish, FinishReason) else None,
        "usage": {
            "inputTokens": result.input_tokens,
            "outputTokens": result.output_tokens,
            "totalTokens": result.input_tokens + result.output_tokens,
            "cost": str(result.cost),
        },
        "toolCalls": [call.to_dict() for call in result.tool_calls],
        "warnings": warnings,
    }


@router.post(
    "/v1/invoke",
    summary="Run an ad-hoc agent in one call (workflow-engine connector)",
    responses=problem_responses(400, 401, 404, 409, 413, 422, 429, 502),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": inline_schema(InvokeRequest)}},
        }
    },
    response_model=None,
)
async def invoke(request: Request, ph: Facade) -> JSONResponse:
    """Validate, compile and run one turn; answer the output and the memory id."""
    body = parse_invoke(await request.body())
    spec = await _model_spec(ph, body)
    tools = await _tools(ph, body.tools)
    await _check_collection(ph, body.collection)
    compiled = _compiled(body, spec, tools)
    config: dict[str, Any] = {"instruction_mode": body.instruction_mode}
    if body.instruction is not None:
        config["instruction"] = body.instruction
    if body.persist_chat_log is not None:
        config["audit"] = body.persist_chat_log
    # Everything is checked before anything is written: a bad call leaves no conversation.
    _, _, system_prompt = await ph.runner.prepare(
        INVOKE_ACTION, None, body.message, None, config, compiled=compiled
    )
    uuid, status, memory_id = await _conversation(ph, body)
    if status is not ProcessStatus.RUNNING:
        await append_messages(
            ph.runner.store,
            ph.tenant,
            uuid,
            [NewMessage(MessageRole.SYSTEM, system_prompt, data={"invoke": _record(body)})],
            status=status,
        )
    result = await ph.runner.send_message(
        uuid, body.message, runtime_config=config, compiled=compiled
    )
    headers = {"X-Pilothouse-Conversation-Uuid": uuid, "X-Pilothouse-Memory-Id": memory_id}
    if result.status is ProcessStatus.FAILED:
        raise ProblemError(
            502,
            "Model call failed",
            f"the turn failed: {result.error or 'unknown error'}",
            headers=headers,
        )
    return JSONResponse(_response(result, memory_id, _warnings(body)), headers=headers)
