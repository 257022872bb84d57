"""The one-call connector: ``POST /v1/invoke`` runs an ad-hoc agent in one request.

Workflow engines call an "AI agent" node with everything inline: a name,
an instruction, a model, a message, tools and chat-memory settings. This
route turns the body into an :class:`~pilothouse.types.AdHocRun` and runs
it through ``ph.command.run_adhoc`` (nothing is written to the catalog):

- the model is a catalog model code of the tenant, or, with ``baseUrl``, a
  model name on an OpenAI-compatible server called with ``apiKey`` and
  ``customHeaders`` (used for the call, never stored, logged or echoed);
- conversations have action code ``INVOKE`` and no agent code: the agent's
  name and every parameter but the credentials are recorded in a system
  message written before each turn, whose text is that turn's system prompt;
- bad input is a 400 problem naming the field, whether the body or the
  facade refused it (this route's error map; the rest is the service's);
- with ``useChatMemory`` (the default) every call with the same
  ``memoryId`` continues one conversation, so the timeline is literally
  one; a new conversation with the same memory id (and so the same chat
  memory) is started only when the last one failed or was cancelled.

See ``docs/invoke.md``.
"""

from __future__ import annotations

__all__ = ["InvokeRequest", "router"]

import json
import re
from typing import Annotated, Any, Literal
from urllib.parse import urlparse, urlunparse

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    StringConstraints,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from pilothouse.api import loads_json
from pilothouse.errors import ErrorCategory, InvalidFieldError, PilothouseError
from pilothouse.server._deps import Facade
from pilothouse.server._openai_models import inline_schema
from pilothouse.server._problems import (
    HTTP_STATUS,
    ProblemError,
    error_problem,
    field_path,
    problem_responses,
)
from pilothouse.types import (
    AdHocResult,
    AdHocRun,
    ChatMemory,
    FinishReason,
    InstructionMode,
    McpServer,
    ModelEndpoint,
    ModelOptions,
    PgVectorTable,
    ProcessStatus,
    ReasoningEffort,
    ReasoningSummary,
    cost_text,
)

router = APIRouter(tags=["connector"])

_STATUS = {**HTTP_STATUS, ErrorCategory.INVALID_INPUT: 400}
"""This route's error map: the service's, with bad input a 400 (the connector contract)."""
_TITLES = {ErrorCategory.INVALID_INPUT: "Invalid invoke request"}

_Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=128)]
_MemoryId = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._:@-]{1,64}$")]


def _connector_flag(value: object) -> object:
    # A BPMN input parameter is text: the connector takes "true" and "false"
    # (seed 003's example) besides a JSON boolean; "yes", 1 or "on" are refused.
    if isinstance(value, bool) or value is None:
        return value
    if value in ("true", "false"):
        return value == "true"
    raise ValueError("must be true or false (a JSON boolean, or the text 'true' or 'false')")


def _connector_tristate(value: object) -> object:
    # persistChatLog: null, empty or unset falls through to the deployment's default.
    return None if value == "" else _connector_flag(value)


_DECIMAL = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")


def _connector_number(value: object) -> object:
    # A BPMN input parameter is text: the connector reads numbers as Java's
    # Integer.parseInt / Double.parseDouble do for the forms its guide shows
    # ("5", "0.2"). Only those plain decimal forms are read: " 5", "5e0",
    # "1_000", "0x10", "NaN" or "" are refused, as is a boolean.
    if isinstance(value, bool):
        raise ValueError("must be a number, not a boolean")
    if isinstance(value, str):
        if _DECIMAL.fullmatch(value) is None:
            raise ValueError(
                'must be a number: a JSON number, or text such as "5" or "0.2" '
                "(digits, an optional minus sign and decimal point)"
            )
        return float(value) if "." in value else int(value)
    return value


def _connector_integer(value: object) -> object:
    # An integer parameter as text: "5" is read, "5.0" is not (Integer.parseInt refuses it).
    if isinstance(value, str) and _DECIMAL.fullmatch(value) and not _INTEGER.fullmatch(value):
        raise ValueError('must be a whole number: a JSON integer, or text such as "5"')
    return _connector_number(value)


_Flag = Annotated[bool, BeforeValidator(_connector_flag)]
_TriState = Annotated[bool | None, BeforeValidator(_connector_tristate)]
_Number = BeforeValidator(_connector_number)
_Integer = BeforeValidator(_connector_integer)


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
    # The connector's documented defaults (seed 003): replace, stateless.
    instruction_mode: Literal["replace", "append", "prepend"] = "replace"
    model: str | None = Field(default=None, min_length=1, max_length=256)
    message: str = Field(min_length=1)
    base_url: str | None = None
    api_key: SecretStr | None = None
    custom_headers: dict[str, str] = Field(default_factory=dict[str, str])
    reasoning_effort: ReasoningEffort | None = None
    reasoning_summary: ReasoningSummary | None = None
    temperature: Annotated[float | None, _Number] = Field(default=None, ge=0, le=2)
    max_tokens: Annotated[int | None, _Integer] = Field(default=None, ge=1)
    top_p: Annotated[float | None, _Number] = Field(default=None, ge=0, le=1)
    tools: list[str] = Field(default_factory=list[str], max_length=128)
    # The connector's comma-separated class names (seed 003), gated by the
    # deployment's allow-list in the facade.
    tool_classes: str | None = Field(default=None, max_length=4000)
    mcp_servers: list[McpServerParam] = Field(default_factory=list[McpServerParam], max_length=32)
    use_chat_memory: _Flag = False
    memory_id: _MemoryId | None = None
    chat_memory_max_messages: Annotated[int, _Integer] = Field(default=20, ge=1, le=1000)
    persist_chat_log: _TriState = None
    collection: str | None = Field(default=None, min_length=1, max_length=64)
    max_rag_results: Annotated[int, _Integer] = Field(default=5, ge=1, le=100)
    min_rag_score: Annotated[float, _Number] = Field(default=0.0, ge=0.0, le=1.0)
    # The connector's pgvector store (seed 003); pgHost switches RAG on.
    pg_host: str | None = Field(default=None, max_length=253)
    pg_port: Annotated[int, _Integer] = Field(default=5432, ge=1, le=65535)
    pg_database: str | None = Field(default=None, max_length=63)
    pg_user: str | None = Field(default=None, max_length=63)
    pg_password: SecretStr | None = None
    pg_table: str = Field(
        default="langchain4j_embeddings",
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$",
    )
    embedding_dimension: Annotated[int, _Integer] = Field(default=384, ge=1, le=16000)
    embedding_model_name: str | None = Field(default=None, max_length=256)
    output_schema: dict[str, Any] | None = None

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, value: str | None) -> str | None:
        return None if value is None else _http_url(value, "baseUrl")


def _camel_path(path: str) -> str:
    # A facade field path ("mcp_servers[0].url") in the wire's names, part by part.
    return ".".join(
        re.sub(r"^[a-z_]+", lambda m: to_camel(m.group(0)), part) for part in path.split(".")
    )


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
        data = loads_json(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        detail = f"the request body is not valid JSON: {exc}"
        raise ProblemError(400, "Malformed JSON", detail) from None
    except RecursionError:
        raise ProblemError(400, "Malformed JSON", "the request body nests too deeply") from None
    except InvalidFieldError as exc:
        raise _bad_request(exc.field, exc.rule) from None
    if not isinstance(data, dict):
        raise _bad_request("body", "must be a JSON object")
    try:
        return InvokeRequest.model_validate(data)
    except ValidationError as exc:
        errors = [
            {
                "field": field_path(e["loc"], InvokeRequest),
                "rule": e["msg"].removeprefix("Value error, "),
            }
            for e in exc.errors(include_url=False, include_input=False)
        ]
        detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors)
        raise ProblemError(400, "Invalid invoke request", detail, errors=errors) from None


def _model(body: InvokeRequest, default_model: str) -> str | ModelEndpoint:
    if body.base_url is not None:
        # The connector documents model as optional: the deployment's default
        # model is called at baseUrl, and the answer says so.
        return ModelEndpoint(
            base_url=body.base_url,
            model_name=body.model or default_model,
            api_key=body.api_key.get_secret_value() if body.api_key else None,
            headers=dict(body.custom_headers),
        )
    if body.model is None:
        raise _bad_request(
            "model", "name a catalog model code, or give baseUrl with the model name"
        )
    if body.api_key is not None or body.custom_headers:
        raise _bad_request("apiKey", "apiKey and customHeaders go with baseUrl only")
    return body.model


def _run(body: InvokeRequest, default_model: str) -> AdHocRun:
    """The request as the facade's ad-hoc run (refusing what only this body can get wrong)."""
    return AdHocRun(
        name=body.agent_name,
        message=body.message,
        model=_model(body, default_model),
        description=body.agent_description,
        instruction=body.instruction,
        instruction_mode=InstructionMode(body.instruction_mode),
        options=ModelOptions(
            temperature=body.temperature,
            max_tokens=body.max_tokens,
            top_p=body.top_p,
            reasoning_effort=body.reasoning_effort,
            reasoning_summary=body.reasoning_summary,
        ),
        tools=tuple(body.tools),
        tool_classes=_tool_classes(body),
        mcp_servers=tuple(
            McpServer(url=s.url, headers=dict(s.headers), transport=s.transport)
            for s in body.mcp_servers
        ),
        memory=(
            ChatMemory(memory_id=body.memory_id, max_messages=body.chat_memory_max_messages)
            if body.use_chat_memory
            else None
        ),
        audit=body.persist_chat_log,
        output_schema=body.output_schema,
        collection=body.collection,
        rag_top_k=body.max_rag_results if "max_rag_results" in body.model_fields_set else None,
        rag_min_score=body.min_rag_score if "min_rag_score" in body.model_fields_set else None,
        pgvector=_pgvector(body),
        record=_record(body, default_model),
    )


def _tool_classes(body: InvokeRequest) -> tuple[str, ...]:
    """``toolClasses`` as the connector writes it: names separated by commas."""
    if body.tool_classes is None:
        return ()
    return tuple(name.strip() for name in body.tool_classes.split(",") if name.strip())


_PG_FIELDS = (
    "pg_port",
    "pg_database",
    "pg_user",
    "pg_password",
    "pg_table",
    "embedding_dimension",
    "embedding_model_name",
)


def _pgvector(body: InvokeRequest) -> PgVectorTable | None:
    """The connector's pgvector table; RAG parameters without ``pgHost`` are refused."""
    if not body.pg_host:
        given = [name for name in _PG_FIELDS if name in body.model_fields_set]
        if given:
            raise _bad_request(
                to_camel(given[0]), "RAG parameters need pgHost (the pgvector database's host)"
            )
        if body.collection is None and (
            {"max_rag_results", "min_rag_score"} & body.model_fields_set
        ):
            raise _bad_request(
                "maxRagResults", "maxRagResults and minRagScore need pgHost or collection"
            )
        return None
    return PgVectorTable(
        host=body.pg_host,
        port=body.pg_port,
        database=body.pg_database or "postgres",
        user=body.pg_user or "postgres",
        password=body.pg_password.get_secret_value() if body.pg_password else None,
        table=body.pg_table,
        dimension=body.embedding_dimension,
        embedding_model=body.embedding_model_name or None,
        top_k=body.max_rag_results,
        min_score=body.min_rag_score,
    )


def _without_credentials(url: str) -> str:
    parsed = urlparse(url)
    netloc = parsed.hostname or ""
    if parsed.port is not None:
        netloc += f":{parsed.port}"
    return urlunparse(parsed._replace(netloc=netloc, query="", fragment=""))


def _defaulted(body: InvokeRequest) -> bool:
    """Whether the deployment's default model stands in for a missing ``model``."""
    return body.model is None and body.base_url is not None


def _record(body: InvokeRequest, default_model: str) -> dict[str, Any]:
    """Every parameter of the call, for the audit, without credentials or header values."""
    return {
        "agentName": body.agent_name,
        "agentDescription": body.agent_description,
        "instructionMode": body.instruction_mode,
        "model": default_model if _defaulted(body) else body.model,
        "modelDefaulted": _defaulted(body),
        "baseUrl": _without_credentials(body.base_url) if body.base_url else None,
        "apiKeyGiven": body.api_key is not None,
        "customHeaderNames": sorted(body.custom_headers),
        "reasoningEffort": body.reasoning_effort,
        "reasoningSummary": body.reasoning_summary,
        "tools": list(body.tools),
        "toolClasses": list(_tool_classes(body)),
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
        "pgHost": body.pg_host,
        "pgPort": body.pg_port if body.pg_host else None,
        "pgDatabase": body.pg_database,
        "pgUser": body.pg_user,
        "pgPasswordGiven": body.pg_password is not None,
        "pgTable": body.pg_table if body.pg_host else None,
        "embeddingDimension": body.embedding_dimension if body.pg_host else None,
        "embeddingModelName": body.embedding_model_name,
        "outputSchemaGiven": body.output_schema is not None,
    }


def _warnings(body: InvokeRequest, run: AdHocResult) -> list[str]:
    warnings = list(run.warnings)
    if not body.use_chat_memory and body.memory_id is not None:
        warnings.append("memoryId is ignored without useChatMemory")
    return warnings


def _ai_meta(body: InvokeRequest, run: AdHocResult) -> dict[str, Any] | None:
    meta = run.result.ai_meta
    if meta is None or not _defaulted(body):
        return meta
    # Which model answered when the caller named none: the deployment's default.
    return {**meta, "modelSource": "deployment default (PILOTHOUSE_INVOKE_DEFAULT_MODEL)"}


def _response(body: InvokeRequest, run: AdHocResult, warnings: list[str]) -> dict[str, Any]:
    result = run.result
    finish = result.finish_reason
    return {
        "output": result.output,
        "outputAiMeta": _ai_meta(body, run),
        "memoryId": run.memory_id,
        "conversationUuid": result.conversation_uuid,
        "status": result.status.value,
        "finishReason": finish.value if isinstance(finish, FinishReason) else None,
        "usage": {
            "inputTokens": result.input_tokens,
            "outputTokens": result.output_tokens,
            "totalTokens": result.input_tokens + result.output_tokens,
            "cost": cost_text(result.cost),
            "usageEstimated": result.usage_estimated,
        },
        "toolCalls": [call.to_dict() for call in result.tool_calls],
        "sources": [_camel(source.to_dict()) for source in result.sources],
        "warnings": warnings,
        # The catalog model that answered: a downgrade budget may have
        # switched from the requested one, which is then named too. A model
        # at baseUrl is named as the server was asked for it.
        "model": result.model if body.base_url is None else (result.ai_meta or {}).get("model"),
        "requestedModel": result.requested_model,
    }


def _camel(data: dict[str, Any]) -> dict[str, Any]:
    """The keys of a source in this face's camelCase (``document_id`` → ``documentId``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        head, *rest = key.split("_")
        out[head + "".join(part.title() for part in rest)] = value
    return out


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
    """Validate, then run one turn; answer the output and the memory id."""
    body = parse_invoke(await request.body())
    try:
        run = await ph.command.run_adhoc(_run(body, ph.settings.invoke_default_model))
    except InvalidFieldError as exc:
        raise _bad_request(_camel_path(exc.field), exc.rule) from None
    except PilothouseError as exc:
        raise error_problem(exc, _STATUS, title=_TITLES.get(exc.category)) from None
    headers = {
        "X-Pilothouse-Conversation-Uuid": run.conversation_uuid,
        "X-Pilothouse-Memory-Id": run.memory_id,
    }
    result = run.result
    if result.status is ProcessStatus.FAILED:
        raise ProblemError(
            502,
            "Model call failed",
            f"the turn failed: {result.error or 'unknown error'}",
            headers=headers,
        )
    return JSONResponse(_response(body, run, _warnings(body, run)), headers=headers)
