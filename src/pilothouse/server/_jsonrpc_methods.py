"""The JSON-RPC methods: one per QueryApi and CommandApi operation, and more.

Methods are named ``pilothouse/<service>/<action>/<version>``, e.g.
``pilothouse/command/sendMessage/v1``. Params are by name (a JSON object),
in camelCase (snake_case is accepted too), validated by a pydantic model per
method; results are JSON: catalog entities in their catalog YAML form
(confidential header values masked), conversations as the query view
models, turn results as :meth:`TurnResult.as_json`.
"""

from __future__ import annotations

__all__ = ["METHODS", "Method", "method_name", "to_json"]

import base64
from collections.abc import Awaitable, Callable, Mapping
from datetime import date, datetime
from typing import Annotated, Any, Literal, cast

from pydantic import Discriminator, Field, StrictBool, StrictInt, Tag, model_validator
from pydantic.alias_generators import to_camel
from pydantic_core import to_jsonable_python

from pilothouse.api import Pilothouse
from pilothouse.server._jsonrpc_evaluation import EVALUATION_METHODS
from pilothouse.server._jsonrpc_params import Method, NoParams, Params, method_name
from pilothouse.types import (
    AdHocResult,
    AdHocRun,
    AttachmentInput,
    CatalogEntity,
    ChatMemory,
    Conversation,
    ConversationInfo,
    ConversationView,
    InstructionMode,
    McpClient,
    McpServer,
    MemoryScope,
    MemoryScopeName,
    Message,
    ModelEndpoint,
    ModelOptions,
    Page,
    ProcessStatus,
    TurnResult,
)

_CONFIDENTIAL = "***"


_Text = Annotated[str, Field(min_length=1)]


class AllActions(Params):
    """``getAllActions``."""

    include_inactive: StrictBool = False


class ByCode(Params):
    """A catalog lookup by business key."""

    code: _Text


class ByName(Params):
    """A catalog lookup by name."""

    name: _Text


class ByUuid(Params):
    """A conversation by uuid."""

    uuid: _Text


class ListGatewayCalls(Params):
    """``listGatewayCalls``: the OpenAPI gateway's audit rows, newest first."""

    gateway: _Text | None = None
    conversation_uuid: _Text | None = None
    limit: StrictInt = Field(default=100, ge=1, le=1000)


class UsageQuery(Params):
    """``usage``: spend and tokens, grouped."""

    by: list[_Text] = Field(default_factory=lambda: ["action"], min_length=1, max_length=7)
    since: date | None = None
    until: date | None = None


class CallTool(Params):
    """``callTool``: one catalog tool run outside a turn."""

    name: _Text
    arguments: dict[str, Any] = Field(default_factory=dict[str, Any])


class ListConversations(Params):
    """``listConversations``: filters and a page."""

    agent: str | None = None
    action: str | None = None
    status: ProcessStatus | None = None
    created_from: datetime | None = None
    created_to: datetime | None = None
    limit: StrictInt = Field(default=50, ge=1, le=1000)
    offset: StrictInt = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _aware(self) -> ListConversations:
        for name in ("created_from", "created_to"):
            moment = getattr(self, name)
            if moment is not None and moment.tzinfo is None:
                raise ValueError(f"{to_camel(name)} needs a time zone offset")
        return self


class StartConversation(Params):
    """``startConversation``."""

    agent: str | None = None
    action: _Text
    memory_id: str | None = Field(default=None, max_length=64)
    audit: StrictBool | None = None


class SendMessage(Params):
    """``sendMessage``."""

    uuid: _Text
    text: _Text
    input_data: dict[str, Any] | None = None
    runtime_config: dict[str, Any] | None = None


class StartAndSend(Params):
    """``startAndSend``."""

    agent: str | None = None
    action: _Text
    text: _Text
    memory_id: str | None = Field(default=None, max_length=64)
    audit: StrictBool | None = None
    input_data: dict[str, Any] | None = None
    runtime_config: dict[str, Any] | None = None


class AttachmentParam(Params):
    """One attachment: a URL, or the bytes as base64."""

    media_type: _Text
    url: str | None = None
    content_base64: str | None = None
    name: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AttachmentParam:
        if (self.url is None) == (self.content_base64 is None):
            raise ValueError("give exactly one of url and contentBase64")
        if self.content_base64 is not None:
            try:
                base64.b64decode(self.content_base64, validate=True)
            except ValueError:
                raise ValueError("contentBase64 is not valid base64") from None
        return self

    def to_input(self) -> AttachmentInput:
        """Return the facade's attachment."""
        content = base64.b64decode(self.content_base64) if self.content_base64 else None
        return AttachmentInput(self.media_type, url=self.url, content=content, name=self.name)


class SendMessageWithAttachments(SendMessage):
    """``sendMessageWithAttachments``."""

    attachments: list[AttachmentParam] = Field(min_length=1)


class CheckMessage(Params):
    """``checkMessage``."""

    action: _Text
    agent: str | None = None
    text: _Text
    input_data: dict[str, Any] | None = None
    runtime_config: dict[str, Any] | None = None


class SubmitAnswers(Params):
    """``submitAnswers``."""

    uuid: _Text
    answers: dict[str, str]


class SubmitToolResult(Params):
    """``submitToolResult``."""

    uuid: _Text
    tool_call_id: _Text
    result: Any


class ByTargetId(Params):
    """``findTarget``: ``action:<CODE>``, ``<CODE>`` or ``agent:<CODE>``."""

    target_id: _Text


class MemoryMessages(Params):
    """``getMemoryMessages``."""

    memory_id: _Text
    limit: StrictInt | None = Field(default=None, ge=1)


class EndpointParam(Params):
    """A model on an OpenAI-compatible server (the key and headers are never recorded)."""

    base_url: Annotated[str, Field(pattern=r"^https?://.+")]
    model_name: _Text
    api_key: str | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])


MODEL_TEXT = "<text>"
MODEL_OBJECT = "<object>"
"""The two forms of ``runAdhoc``'s ``model``; an error's location names them,
and the error leaves them out (see ``_jsonrpc._field``)."""


def _model_form(value: Any) -> str | None:
    # The JSON type decides the form, so an object is checked only as an
    # endpoint: checked against both, every mistake in one came with a
    # second error saying it was no string, named by the validator's types.
    if isinstance(value, str):
        return MODEL_TEXT
    if isinstance(value, dict | EndpointParam):
        return MODEL_OBJECT
    return None


_ModelParam = Annotated[
    Annotated[_Text, Tag(MODEL_TEXT)] | Annotated[EndpointParam, Tag(MODEL_OBJECT)],
    Discriminator(
        _model_form,
        custom_error_type="model_form",
        custom_error_message=(
            "write a catalog model code (a string) or an object "
            "{baseUrl, modelName, apiKey?, headers?}"
        ),
    ),
]


class McpServerParam(Params):
    """An MCP server whose tools the run may call."""

    url: Annotated[str, Field(pattern=r"^https?://.+")]
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    transport: Literal["streamable-http", "sse"] = "streamable-http"


class MemoryParam(Params):
    """Chat memory across runs."""

    memory_id: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:@-]{1,64}$")] | None = None
    max_messages: StrictInt = Field(default=20, ge=1, le=1000)


class RunAdhoc(Params):
    """``runAdhoc``: one turn of an agent described inline."""

    name: _Text
    message: _Text
    model: _ModelParam
    description: str | None = None
    instruction: str | None = None
    instruction_mode: InstructionMode = InstructionMode.APPEND
    options: dict[str, Any] = Field(default_factory=dict[str, Any])
    tools: list[str] = Field(default_factory=list[str])
    mcp_servers: list[McpServerParam] = Field(default_factory=list[McpServerParam])
    memory: MemoryParam | None = Field(default_factory=MemoryParam)
    audit: StrictBool | None = None
    output_schema: dict[str, Any] | None = None
    collection: str | None = None

    def to_run(self) -> AdHocRun:
        """Return the facade's ad-hoc run; its record leaves out keys and header values."""
        record = self.model_dump(mode="json", by_alias=True, exclude={"options"})
        model: str | ModelEndpoint
        if isinstance(self.model, EndpointParam):
            endpoint = self.model
            model = ModelEndpoint(
                endpoint.base_url, endpoint.model_name, endpoint.api_key, endpoint.headers
            )
            record["model"] = {
                "baseUrl": endpoint.base_url,
                "modelName": endpoint.model_name,
                "headerNames": sorted(endpoint.headers),
            }
        else:
            model = self.model
        for server in record["mcpServers"]:
            server["headers"] = sorted(server["headers"])
        return AdHocRun(
            name=self.name,
            message=self.message,
            model=model,
            description=self.description,
            instruction=self.instruction,
            instruction_mode=self.instruction_mode,
            options=ModelOptions.parse(self.options),
            tools=tuple(self.tools),
            mcp_servers=tuple(
                McpServer(s.url, dict(s.headers), s.transport) for s in self.mcp_servers
            ),
            memory=(
                ChatMemory(self.memory.memory_id, self.memory.max_messages) if self.memory else None
            ),
            audit=self.audit,
            output_schema=self.output_schema,
            collection=self.collection,
            record=record,
        )


def _entity(ph: Pilothouse, row: CatalogEntity) -> dict[str, Any]:
    document = dict(ph.catalog.entry(row).document)
    document.setdefault("active", row.active)
    if isinstance(row, McpClient):
        confidential = {str(name).lower() for name in row.confidential_headers}
        headers = cast("dict[str, Any]", document.get("headers") or {})
        document["headers"] = {
            name: _CONFIDENTIAL if name.lower() in confidential else value
            for name, value in headers.items()
        }
    return document


def _message(row: Message) -> dict[str, Any]:
    return {
        "sequence": row.sequence,
        "role": row.role.value,
        "content": row.content,
        "tokenCount": row.token_count,
        "toolCallId": row.tool_call_id,
        "data": row.data,
        "createdAt": row.created_at.isoformat(),
    }


def to_json(ph: Pilothouse, value: Any) -> Any:
    """Return a facade result as JSON-ready data."""
    if isinstance(value, TurnResult):
        return value.as_json()
    if isinstance(value, AdHocResult):
        return {
            "result": value.result.as_json(),
            "conversation_uuid": value.conversation_uuid,
            "memory_id": value.memory_id,
            "warnings": list(value.warnings),
        }
    if isinstance(value, Conversation):
        return ConversationInfo.model_validate(value).model_dump(mode="json")
    if isinstance(value, ConversationView):
        return value.model_dump(mode="json")
    if isinstance(value, Message):
        return _message(value)
    if isinstance(value, CatalogEntity):
        return _entity(ph, value)
    if isinstance(value, Page):
        page = cast("Page[Any]", value)
        return {
            "items": [to_json(ph, item) for item in page.items],
            "total": page.total,
            "limit": page.limit,
            "offset": page.offset,
        }
    if isinstance(value, list):
        return [to_json(ph, item) for item in cast("list[Any]", value)]
    return to_jsonable_python(value)


async def _list(ph: Pilothouse, p: ListConversations) -> Any:
    return await ph.query.list_conversations(
        agent=p.agent,
        action=p.action,
        status=p.status,
        created_from=p.created_from,
        created_to=p.created_to,
        limit=p.limit,
        offset=p.offset,
    )


async def _check(ph: Pilothouse, p: CheckMessage) -> Any:
    await ph.command.check_message(
        p.text,
        action=p.action,
        agent=p.agent,
        input_data=p.input_data,
        runtime_config=p.runtime_config,
    )
    return {"ok": True}


async def _cancel(ph: Pilothouse, p: ByUuid) -> Any:
    return {"abortedRunningTurn": await ph.command.cancel(p.uuid)}


class ByMemoryId(Params):
    """A chat memory by id."""

    memory_id: _Text


async def _clear_memory(ph: Pilothouse, p: ByMemoryId) -> Any:
    return {"cleared": await ph.command.clear_memory(p.memory_id)}


class RecoverParams(Params):
    """A stuck conversation and what to do with it."""

    uuid: _Text
    retry: StrictBool


async def _recover(ph: Pilothouse, p: RecoverParams) -> Any:
    result = await ph.command.recover(p.uuid, retry=p.retry)
    if result is None:
        return {"uuid": p.uuid, "status": "FA"}
    return result.as_json()


async def _expire(ph: Pilothouse, _: NoParams) -> Any:
    return {"terminated": await ph.command.expire_waiting()}


class MemoryScopeParams(Params):
    """Whose scoped memory: a scope and its keys (as REST's ``/v1/memory``)."""

    scope: MemoryScopeName
    user_id: str | None = None
    agent: str | None = None
    session_id: str | None = None

    def to_scope(self) -> MemoryScope:
        """The scope, checked (a missing or extra key is an error naming it)."""
        return MemoryScope(
            self.scope, user_id=self.user_id, agent=self.agent, session_id=self.session_id
        )


class MemoryList(MemoryScopeParams):
    """One page of a scope's memories."""

    limit: Annotated[StrictInt, Field(ge=1, le=1000)] = 100
    offset: Annotated[StrictInt, Field(ge=0)] = 0


class MemoryById(MemoryScopeParams):
    """One memory of a scope."""

    memory_id: _Text


class MemoryAdd(MemoryScopeParams):
    """A memory to add."""

    content: _Text
    memory_type: str | None = None
    importance: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    metadata: dict[str, Any] = Field(default_factory=dict[str, Any])


class MemoryEdit(MemoryById):
    """What to change of a memory; what is left out stays."""

    content: str | None = None
    memory_type: str | None = None
    importance: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    metadata: dict[str, Any] | None = None


class MemorySearchScope(MemoryScopeParams):
    """One scope of a search, with its most hits."""

    limit: Annotated[StrictInt, Field(ge=0, le=100)] = 5


class MemorySearch(Params):
    """A search over one or more scopes."""

    query: _Text
    scopes: Annotated[list[MemorySearchScope], Field(min_length=1, max_length=8)]
    threshold: Annotated[float, Field(ge=-1.0, le=1.0)] = 0.0


async def _item(pending: Awaitable[Any]) -> Any:
    return (await pending).as_json()


async def _items(pending: Awaitable[list[Any]]) -> Any:
    return {"items": [item.as_json() for item in await pending]}


async def _versions(pending: Awaitable[list[Any]]) -> Any:
    return {"versions": [version.as_json() for version in await pending]}


async def _memory_search(ph: Pilothouse, p: MemorySearch) -> Any:
    scopes = {entry.to_scope(): entry.limit for entry in p.scopes}
    hits = await ph.memory.search(p.query, scopes, threshold=p.threshold)
    return {"hits": [hit.as_json() for hit in hits]}


async def _memory_forget(ph: Pilothouse, p: MemoryById) -> Any:
    await ph.memory.forget(p.memory_id, p.to_scope())
    return {"forgotten": p.memory_id}


def _m(
    params: type[Params], call: Callable[[Pilothouse, Any], Awaitable[Any]], summary: str
) -> Method:
    return Method(params, call, summary)


METHODS: Mapping[str, Method] = {
    method_name("query", "getAllActions"): _m(
        AllActions,
        lambda ph, p: ph.query.get_all_actions(include_inactive=p.include_inactive),
        "the tenant's actions ordered by code",
    ),
    method_name("query", "findActionByCode"): _m(
        ByCode, lambda ph, p: ph.query.find_action_by_code(p.code), "an action, or null"
    ),
    method_name("query", "findAgentByCode"): _m(
        ByCode, lambda ph, p: ph.query.find_agent_by_code(p.code), "an agent, or null"
    ),
    method_name("query", "findToolByCode"): _m(
        ByCode, lambda ph, p: ph.query.find_tool_by_code(p.code), "a tool, or null"
    ),
    method_name("query", "findMcpClientByName"): _m(
        ByName, lambda ph, p: ph.query.find_mcp_client_by_name(p.name), "an MCP client, or null"
    ),
    method_name("query", "findConversation"): _m(
        ByUuid, lambda ph, p: ph.query.find_conversation(p.uuid), "a conversation, or null"
    ),
    method_name("query", "getConversation"): _m(
        ByUuid, lambda ph, p: ph.query.get_conversation(p.uuid), "a conversation"
    ),
    method_name("query", "getConversationMessages"): _m(
        ByUuid,
        lambda ph, p: ph.query.get_conversation_messages(p.uuid),
        "a conversation's messages in order",
    ),
    method_name("query", "getPendingQuestions"): _m(
        ByUuid,
        lambda ph, p: ph.query.get_pending_questions(p.uuid),
        "the questions a waiting conversation asked",
    ),
    method_name("query", "listConversations"): _m(
        ListConversations, _list, "one page of conversations, newest first"
    ),
    method_name("query", "getTranscript"): _m(
        ByUuid,
        lambda ph, p: ph.query.get_transcript(p.uuid),
        "a whole conversation: messages, tool calls, timeline",
    ),
    method_name("command", "startConversation"): _m(
        StartConversation,
        lambda ph, p: ph.command.start_conversation(
            action=p.action, agent=p.agent, memory_id=p.memory_id, audit=p.audit
        ),
        "a new conversation (status NS)",
    ),
    method_name("command", "sendMessage"): _m(
        SendMessage,
        lambda ph, p: ph.command.send_message(
            p.uuid, p.text, input_data=p.input_data, runtime_config=p.runtime_config
        ),
        "run one turn; the turn's result",
    ),
    method_name("command", "startAndSend"): _m(
        StartAndSend,
        lambda ph, p: ph.command.start_and_send(
            p.text,
            action=p.action,
            agent=p.agent,
            memory_id=p.memory_id,
            audit=p.audit,
            input_data=p.input_data,
            runtime_config=p.runtime_config,
        ),
        "start a conversation and run its first turn; the turn's result",
    ),
    method_name("command", "sendMessageWithAttachments"): _m(
        SendMessageWithAttachments,
        lambda ph, p: ph.command.send_message_with_attachments(
            p.uuid,
            p.text,
            [a.to_input() for a in p.attachments],
            input_data=p.input_data,
            runtime_config=p.runtime_config,
        ),
        "run one turn with files; the turn's result",
    ),
    method_name("command", "checkMessage"): _m(
        CheckMessage, _check, "check a message would be accepted, writing nothing"
    ),
    method_name("command", "submitAnswers"): _m(
        SubmitAnswers,
        lambda ph, p: ph.command.submit_answers(p.uuid, p.answers),
        "answer pending questions and continue the turn",
    ),
    method_name("command", "submitToolResult"): _m(
        SubmitToolResult,
        lambda ph, p: ph.command.submit_tool_result(p.uuid, p.tool_call_id, p.result),
        "give a custom tool's result and continue the turn",
    ),
    method_name("command", "expireWaiting"): _m(
        NoParams, _expire, "terminate conversations whose questions expired"
    ),
    method_name("command", "cancel"): _m(ByUuid, _cancel, "cancel a conversation"),
    method_name("command", "clearMemory"): _m(
        ByMemoryId, _clear_memory, "clear a chat memory: later turns see no earlier message"
    ),
    method_name("command", "recover"): _m(
        RecoverParams, _recover, "retry or fail a stuck (ST) conversation"
    ),
    method_name("query", "getMemoryMessages"): _m(
        MemoryMessages,
        lambda ph, p: ph.query.get_memory_messages(p.memory_id, limit=p.limit),
        "the messages of every conversation sharing a memory id, oldest first",
    ),
    method_name("query", "findTarget"): _m(
        ByTargetId,
        lambda ph, p: ph.query.find_target(p.target_id),
        "the active action (and agent) a target id names, or null",
    ),
    method_name("query", "listTargets"): _m(
        NoParams, lambda ph, _: ph.query.list_targets(), "every active action and agent"
    ),
    method_name("query", "listGatewayCalls"): _m(
        ListGatewayCalls,
        lambda ph, p: ph.query.list_gateway_calls(
            gateway=p.gateway, conversation_uuid=p.conversation_uuid, limit=p.limit
        ),
        "the OpenAPI gateway's proxied calls: who, which operation, status, latency",
    ),
    method_name("query", "budgetStatus"): _m(
        NoParams,
        lambda ph, _: ph.query.budget_status(),
        "where each budget stands this period: limits, spent, held, remaining, reset",
    ),
    method_name("query", "usage"): _m(
        UsageQuery,
        lambda ph, p: ph.query.usage(group_by=p.by, since=p.since, until=p.until),
        "spend and tokens grouped by tenant, key, agent, action, user, model or day",
    ),
    method_name("command", "callableTools"): _m(
        NoParams,
        lambda ph, _: ph.command.callable_tools(),
        "the catalog tools callTool runs, with their input schemas",
    ),
    method_name("command", "callTool"): _m(
        CallTool,
        lambda ph, p: ph.command.call_tool(p.name, p.arguments, via="jsonrpc"),
        "run one catalog tool outside a turn, governed and recorded as a TOOLCALL conversation",
    ),
    method_name("command", "runAdhoc"): _m(
        RunAdhoc,
        lambda ph, p: ph.command.run_adhoc(p.to_run()),
        "run one turn of an agent described inline; its result, conversation and memory id",
    ),
    # Scoped long-term memory, in the key's tenant only (as REST's /v1/memory).
    method_name("memory", "list"): _m(
        MemoryList,
        lambda ph, p: _items(ph.memory.list(p.to_scope(), limit=p.limit, offset=p.offset)),
        "one page of a scope's memories",
    ),
    method_name("memory", "get"): _m(
        MemoryById,
        lambda ph, p: _item(ph.memory.get(p.memory_id, p.to_scope())),
        "one memory of a scope",
    ),
    method_name("memory", "search"): _m(
        MemorySearch, _memory_search, "memories of one or more scopes by meaning, best first"
    ),
    method_name("memory", "add"): _m(
        MemoryAdd,
        lambda ph, p: _item(
            ph.memory.add(
                p.content,
                p.to_scope(),
                memory_type=p.memory_type,
                importance=p.importance,
                metadata=p.metadata,
            )
        ),
        "add a memory (the same text twice in one scope stays one record)",
    ),
    method_name("memory", "edit"): _m(
        MemoryEdit,
        lambda ph, p: _item(
            ph.memory.edit(
                p.memory_id,
                p.to_scope(),
                content=p.content,
                memory_type=p.memory_type,
                importance=p.importance,
                metadata=p.metadata,
            )
        ),
        "change a memory; its former value is kept as a version",
    ),
    method_name("memory", "forget"): _m(MemoryById, _memory_forget, "delete a memory"),
    method_name("memory", "versions"): _m(
        MemoryById,
        lambda ph, p: _versions(ph.memory.versions(p.memory_id, p.to_scope())),
        "a memory's values, oldest first",
    ),
    # Datasets, replays and reports, admin keys only (as REST's /v1/evaluation).
    **EVALUATION_METHODS,
}
"""Every method, by name."""
