"""The public types of pilothouse: what the facade takes and returns.

Every face (the HTTP service, the CLI, an application) works with these
names and :mod:`pilothouse.api`; where a type is defined elsewhere, this
module is its public address:

- **enums**: statuses, finish reasons, roles and the catalog's kinds
  (``ProcessStatus``, ``FinishReason``, ``MessageRole``, ...);
- **results**: ``TurnResult``, conversations and their views
  (``Conversation``, ``Message``, ``Page``, ``ConversationInfo``,
  ``ConversationView``), catalog rows (``Action``, ``Agent``, ``Tool``,
  ``McpClient``), ``KeyInfo``, ``Target``, ``CatalogEntry``,
  ``ImportSummary``;
- **knowledge**: ``TextDocument``, ``FileDocument``, ``IngestResult``
  (``IngestedDocument``, ``IngestProgress``), ``IngestJobStatus``,
  ``SearchResult`` (``SearchHit``), ``DocumentInfo``, ``Embeddings``;
- **events**: ``TurnEvent`` and its kinds (``TextDelta``, ``TurnFinished``, ...);
- **requests**: ``AttachmentInput``, ``MessageInput``, ``ModelOptions`` and the
  ad-hoc run (``AdHocRun`` with ``ModelEndpoint``, ``McpServer``,
  ``ChatMemory``; answered by ``AdHocResult``);
- **extension points** passed to ``Pilothouse(...)``: ``Authorizer``,
  ``PromptContributor`` and ``PromptContext`` (with the catalog views it
  holds: ``ActionView``, ``AgentView``, ``SkillView``, ``McpClientView``,
  ``ToolView``), ``Meter`` (advisors are in
  :mod:`pilothouse.advisors`, tools in :mod:`pilothouse.tools`).

Names defined in the run loop are imported on first use, so importing this
module loads neither pydantic-ai nor the catalog tooling.
"""

from __future__ import annotations

__all__ = [
    "ADMIN_SCOPE",
    "MCP_TOOL_SCOPE",
    "Action",
    "ActionView",
    "AdHocResult",
    "AdHocRun",
    "AdvisorKind",
    "Agent",
    "AgentView",
    "AnswerSource",
    "AttachmentInput",
    "AttachmentView",
    "Authorizer",
    "BudgetStatus",
    "Caller",
    "CallableTool",
    "Cardinality",
    "CaseDiff",
    "CaseResult",
    "FACES",
    "CatalogCheck",
    "CatalogEntity",
    "CatalogEntry",
    "CompletionApplied",
    "ChatMemory",
    "Conversation",
    "ConversationInfo",
    "ConversationSummary",
    "ConversationView",
    "DatasetCase",
    "DatasetInfo",
    "EvalReport",
    "DirectToolCall",
    "DoctorCheck",
    "DocumentChunk",
    "DocumentInfo",
    "Embeddings",
    "ExecutionPolicy",
    "FileDocument",
    "FinishReason",
    "FormField",
    "FormHint",
    "GatewayCallRecord",
    "ImportSummary",
    "IngestJobStatus",
    "IngestProgress",
    "IngestResult",
    "IngestedDocument",
    "InstructionMode",
    "KeyInfo",
    "KindCounts",
    "KindForm",
    "McpCaller",
    "McpClient",
    "McpClientView",
    "McpServer",
    "McpTransport",
    "MemoryKind",
    "Message",
    "OutboxCommand",
    "MessageInput",
    "MessageRole",
    "MemoryHit",
    "MemoryItem",
    "MemoryScope",
    "MemoryScopeName",
    "MemoryVersion",
    "ErasureReport",
    "ExtractionOutcome",
    "MessageView",
    "Meter",
    "MetadataFilter",
    "ModelCapability",
    "ModelEndpoint",
    "ModelOptions",
    "Page",
    "PgVectorTable",
    "ProcessStatus",
    "ProgressCallback",
    "PromptContext",
    "PromptContributor",
    "ProviderKind",
    "ReasoningEffort",
    "ReasoningSummary",
    "RecordedCall",
    "ReplayRun",
    "Score",
    "Scored",
    "Scorer",
    "SchemaDirection",
    "SchemaRevision",
    "SearchHit",
    "SearchResult",
    "SkillView",
    "StatusChanged",
    "StuckConversation",
    "Target",
    "TargetInfo",
    "TextDelta",
    "TextDocument",
    "ThinkingDelta",
    "TimelineEventView",
    "TimelineKind",
    "Tool",
    "ToolView",
    "ToolCallFinished",
    "ToolCallRequested",
    "ToolCallStatus",
    "ToolCallView",
    "ToolKind",
    "ToolRun",
    "TurnEvent",
    "TurnFinished",
    "TurnResult",
    "TurnRetry",
    "UsageRow",
    "cost_text",
]

import importlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pilothouse._caller import FACES, Caller
from pilothouse._cost import cost_text
from pilothouse._requests import (
    AdHocResult,
    AdHocRun,
    ChatMemory,
    Embeddings,
    McpServer,
    ModelEndpoint,
    PgVectorTable,
)
from pilothouse.catalog._enums import (
    AdvisorKind,
    Cardinality,
    ExecutionPolicy,
    FinishReason,
    FormHint,
    InstructionMode,
    McpTransport,
    MemoryKind,
    MessageRole,
    ModelCapability,
    ProcessStatus,
    ProviderKind,
    SchemaDirection,
    TimelineKind,
    ToolCallStatus,
    ToolKind,
)
from pilothouse.memory._types import (
    ErasureReport,
    ExtractionOutcome,
    MemoryHit,
    MemoryItem,
    MemoryScope,
    MemoryScopeName,
    MemoryVersion,
)
from pilothouse.providers._options import ModelOptions, ReasoningEffort, ReasoningSummary

if TYPE_CHECKING:
    from pilothouse._facade.evalreport import CaseDiff, EvalReport
    from pilothouse._facade.scorers import Score, Scored, Scorer
    from pilothouse.catalog._importer import ImportSummary, KindCounts
    from pilothouse.catalog._models import Action, Agent, CatalogEntity, McpClient, Tool
    from pilothouse.catalog._views import (
        ActionView,
        AgentView,
        McpClientView,
        SkillView,
        ToolView,
    )
    from pilothouse.knowledge._doctor import DoctorCheck
    from pilothouse.knowledge._types import (
        DocumentChunk,
        DocumentInfo,
        FileDocument,
        IngestedDocument,
        IngestJobStatus,
        IngestProgress,
        IngestResult,
        MetadataFilter,
        ProgressCallback,
        SearchHit,
        SearchResult,
        TextDocument,
    )
    from pilothouse.runtime._budget_status import BudgetStatus
    from pilothouse.runtime._directcall import CallableTool, DirectToolCall
    from pilothouse.runtime._eventcalls import CompletionApplied, OutboxCommand, ToolRun
    from pilothouse.runtime._events import (
        AnswerSource,
        StatusChanged,
        TextDelta,
        ThinkingDelta,
        ToolCallFinished,
        ToolCallRequested,
        TurnEvent,
        TurnFinished,
        TurnResult,
        TurnRetry,
    )
    from pilothouse.runtime._meter import Meter
    from pilothouse.runtime._prompt import PromptContext, PromptContributor
    from pilothouse.runtime._toolexec import Authorizer
    from pilothouse.runtime._usage import UsageRow
    from pilothouse.store._datasets import DatasetCase, DatasetInfo, RecordedCall
    from pilothouse.store._queries import (
        AttachmentView,
        ConversationInfo,
        ConversationView,
        MessageView,
        Page,
        TimelineEventView,
        ToolCallView,
    )
    from pilothouse.store._records import Conversation, Message
    from pilothouse.store._replays import CaseResult, ReplayRun
    from pilothouse.store._turnstore import NewAttachment as AttachmentInput
    from pilothouse.store._turnstore import NewMessage as MessageInput


ADMIN_SCOPE = "admin"
"""The scope of an API key that may change the catalog."""


MCP_TOOL_SCOPE = "mcp:tool:"
"""Prefix of an API key scope naming an MCP tool the key may see and call.

A key with no such scope may use every tool of its tenant; a key with one
or more (``mcp:tool:action_*``, ``mcp:tool:agent_WRITER``) only the tools
whose names match one of the patterns (``fnmatch`` globs, case-sensitive).
"""


@dataclass(frozen=True)
class GatewayCallRecord:
    """One call the OpenAPI gateway proxied, as its audit row holds it.

    Never an argument, a header value or a query string.

    Attributes:
        gateway: the gateway row's code.
        tool: the operation's tool name.
        operation: ``METHOD /path`` (the document's template).
        via: ``mcp`` (an MCP client called it) or ``turn`` (an action's turn).
        key_prefix: the caller's API key prefix (a turn's: the key that
            started its conversation; None on stdio and without a key).
        conversation_uuid: the turn's conversation, when a turn called it.
        call_id: the turn's tool call id, when a turn called it.
        status_code: the service's HTTP status; None when nothing was sent.
        outcome: ``ok`` or the error code (``tool.exec.http_404``,
            ``gateway.rate_limited``, ``gateway.path_refused``, ...).
        latency_ms: the call's duration in milliseconds.
        created_at: when it was recorded.
        face: the face the call came through (``mcp``, or the face that
            started the turn's conversation); None on older rows.
        key_name: the caller's API key name.
    """

    gateway: str
    tool: str
    operation: str
    via: str
    key_prefix: str | None
    conversation_uuid: str | None
    call_id: str | None
    status_code: int | None
    outcome: str
    latency_ms: float
    created_at: datetime
    face: str | None = None
    key_name: str | None = None


@dataclass(frozen=True)
class McpCaller:
    """Who calls pilothouse's MCP server, and which of its tools they may use.

    Attributes:
        tenant: every tool call acts for this tenant.
        key_prefix: the API key's public prefix (None on stdio).
        allowed_tools: name patterns of the tools the caller may list and
            call; None for every tool.
        headers: the caller's request headers (lower-case names) an
            OpenAPI gateway may pass on when configured to; never the
            pilothouse key that authenticated the request.
        key_name: the API key's name, for the record (None on stdio).
        bundle: the tool patterns of the virtual MCP server the request
            came through (``/mcp/<name>``); None at ``/mcp``. A tool must
            match both this and ``allowed_tools``.
    """

    tenant: str
    key_prefix: str | None = None
    allowed_tools: tuple[str, ...] | None = None
    headers: Mapping[str, str] = field(default_factory=dict[str, str])
    key_name: str | None = None
    bundle: tuple[str, ...] | None = None

    @classmethod
    def from_scopes(
        cls,
        tenant: str,
        key_prefix: str | None,
        scopes: Sequence[str],
        headers: Mapping[str, str] | None = None,
        key_name: str | None = None,
    ) -> McpCaller:
        """Return the caller of a key with ``scopes`` (its ``mcp:tool:`` ones restrict it)."""
        patterns = tuple(
            s.removeprefix(MCP_TOOL_SCOPE) for s in scopes if s.startswith(MCP_TOOL_SCOPE)
        )
        return cls(tenant, key_prefix, patterns or None, dict(headers or {}), key_name)

    def allows(self, tool: str) -> bool:
        """Whether the caller may see and call the tool named ``tool``."""
        from fnmatch import fnmatchcase

        for patterns in (self.allowed_tools, self.bundle):
            if patterns is not None and not any(fnmatchcase(tool, p) for p in patterns):
                return False
        return True


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown about an API key: everything but the key itself.

    Attributes:
        prefix: the key's public prefix (names it in listings and logs).
        name: a label given when it was created.
        tenant: the tenant every request with it acts for.
        scopes: e.g. ``("admin",)`` for catalog writes.
        active: False once revoked.
        created_at: when it was created.
        last_used_at: when a request last presented it (written at most
            once a minute), or None.
    """

    prefix: str
    name: str
    tenant: str
    scopes: tuple[str, ...]
    active: bool
    created_at: datetime
    last_used_at: datetime | None

    @property
    def is_admin(self) -> bool:
        """Whether the key may change the catalog."""
        return ADMIN_SCOPE in self.scopes


@dataclass(frozen=True)
class CatalogEntry:
    """One catalog entity as its spec document: the mapping the catalog YAML holds.

    Attributes:
        kind: the kind's plural name, e.g. ``actions``.
        key: the business key (a code, or an MCP client's name).
        version: bumped by every change; send it back to update optimistically.
        active: whether the entity is active.
        document: the spec document, JSON-ready (``code`` first, fields at
            their default left out; prices as decimal strings).
    """

    kind: str
    key: str
    version: int
    active: bool
    document: dict[str, Any]


@dataclass(frozen=True)
class ConversationSummary:
    """A conversation as a chat client lists it: title, lineage, totals.

    Attributes:
        uuid: the conversation.
        title: its title (the first prompt names it), or None before one.
        action_code: the action it runs.
        agent_code: the agent running it, if any.
        status: its status.
        created_at: when it was started.
        input_tokens: tokens sent, all turns.
        output_tokens: tokens received, all turns.
        estimated_cost: the estimated cost of all turns.
        parent_uuid: the conversation it was forked from (an edit), if any.
        hidden: deleted from the list (its records stay).
    """

    uuid: str
    title: str | None
    action_code: str
    agent_code: str | None
    status: ProcessStatus
    created_at: datetime
    input_tokens: int
    output_tokens: int
    estimated_cost: Decimal
    parent_uuid: str | None
    hidden: bool


@dataclass(frozen=True)
class FormField:
    """One field of a catalog kind's form.

    Attributes:
        name: the field as in catalog YAML.
        widget: ``text``, ``textarea``, ``number``, ``checkbox``, ``select``,
            ``multiselect``, ``ref`` (one key of ``target``), ``refs`` (keys
            of ``target``) or ``json`` (nested data, as JSON).
        required: the importer refuses the entity without it.
        optional: None is a value of its own (unset).
        choices: the allowed values of a select.
        target: the kind a reference names (plural, e.g. ``models``).
        default: the value the importer uses when the field is left out.
        description: help text.
        max_length: the longest text the importer accepts, if limited.
        minimum: the smallest number it accepts (inclusive), if limited.
        maximum: the largest number it accepts (inclusive), if limited.
    """

    name: str
    widget: str
    required: bool
    optional: bool
    choices: tuple[str, ...]
    target: str | None
    default: Any
    description: str
    max_length: int | None = None
    minimum: float | None = None
    maximum: float | None = None


@dataclass(frozen=True)
class KindForm:
    """The form of a catalog kind: its fields in the importer's order.

    Attributes:
        kind: the plural kind name, e.g. ``actions``.
        entity_name: the readable singular, e.g. ``action``.
        key_field: the business key, ``code`` or ``name``.
        fields: every field.
    """

    kind: str
    entity_name: str
    key_field: str
    fields: tuple[FormField, ...]


@dataclass(frozen=True)
class CatalogCheck:
    """What validating catalog files found, when nothing was wrong.

    Attributes:
        files: how many files were read.
        entities: how many entities they declare.
        counts: entities per kind (plural name), in dependency order.
        entity_names: the singular name of each kind in ``counts``.
    """

    files: int
    entities: int
    counts: dict[str, int]
    entity_names: dict[str, str]


@dataclass(frozen=True)
class Target:
    """An active action (and the active agent running it) that a target id names.

    A target id is ``action:<CODE>`` or the plain ``<CODE>`` for an action,
    ``agent:<CODE>`` for an agent running its goal action (the model ids of
    the OpenAI-compatible endpoint).

    Attributes:
        action_code: the action a turn runs.
        agent_code: the agent running it, or None.
        placeholders: the ``{placeholders}`` of the action's and the agent's prompts.
        name: the agent's name, else the action's goal description or name.
        updated_at: when the agent (else the action) last changed.
        revision: the tenant's catalog revision when this was read; pass it
            to :meth:`~pilothouse.api.CommandApi.check_message` to reuse a
            compilation of that revision without reading the catalog again.
    """

    action_code: str
    agent_code: str | None
    placeholders: frozenset[str]
    name: str
    updated_at: datetime
    revision: int


@dataclass(frozen=True)
class TargetInfo:
    """One entry of the target list: its id, when it last changed, what it does."""

    target_id: str
    updated_at: datetime
    description: str


@dataclass(frozen=True)
class StuckConversation:
    """A conversation a turn left running when its process died, marked ``ST``.

    Attributes:
        tenant: the conversation's tenant.
        uuid: the conversation.
        reason: why no live process owns its turn.
    """

    tenant: str
    uuid: str
    reason: str


@dataclass(frozen=True)
class SchemaRevision:
    """Where the database's schema stands.

    Attributes:
        current: the migration the database is at (None when empty).
        head: the newest migration this version of pilothouse knows.
    """

    current: str | None
    head: str

    @property
    def is_current(self) -> bool:
        """Whether the database is at the newest migration."""
        return self.current == self.head


_LAZY: dict[str, tuple[str, ...]] = {
    "pilothouse.catalog._importer": ("ImportSummary", "KindCounts"),
    "pilothouse.knowledge._doctor": ("DoctorCheck",),
    "pilothouse.knowledge._types": (
        "DocumentChunk",
        "DocumentInfo",
        "FileDocument",
        "IngestJobStatus",
        "IngestProgress",
        "IngestResult",
        "IngestedDocument",
        "MetadataFilter",
        "ProgressCallback",
        "SearchHit",
        "SearchResult",
        "TextDocument",
    ),
    "pilothouse.catalog._models": ("Action", "Agent", "CatalogEntity", "McpClient", "Tool"),
    "pilothouse.runtime._events": (
        "AnswerSource",
        "StatusChanged",
        "TextDelta",
        "ThinkingDelta",
        "ToolCallFinished",
        "ToolCallRequested",
        "TurnEvent",
        "TurnFinished",
        "TurnResult",
        "TurnRetry",
    ),
    "pilothouse.runtime._budget_status": ("BudgetStatus",),
    "pilothouse.runtime._usage": ("UsageRow",),
    "pilothouse.runtime._meter": ("Meter",),
    "pilothouse.runtime._prompt": ("PromptContext", "PromptContributor"),
    "pilothouse.catalog._views": (
        "ActionView",
        "AgentView",
        "McpClientView",
        "SkillView",
        "ToolView",
    ),
    "pilothouse.runtime._directcall": ("CallableTool", "DirectToolCall"),
    "pilothouse.runtime._eventcalls": ("CompletionApplied", "OutboxCommand", "ToolRun"),
    "pilothouse.runtime._toolexec": ("Authorizer",),
    "pilothouse.store._queries": (
        "AttachmentView",
        "ConversationInfo",
        "ConversationView",
        "MessageView",
        "Page",
        "TimelineEventView",
        "ToolCallView",
    ),
    "pilothouse.store._records": ("Conversation", "Message"),
    "pilothouse.store._datasets": ("DatasetCase", "DatasetInfo", "RecordedCall"),
    "pilothouse.store._replays": ("CaseResult", "ReplayRun"),
    "pilothouse._facade.scorers": ("Score", "Scored", "Scorer"),
    "pilothouse._facade.evalreport": ("CaseDiff", "EvalReport"),
}
"""The names imported on first use, by the module that defines them."""

_RENAMED = {"AttachmentInput": "NewAttachment", "MessageInput": "NewMessage"}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}
_MODULE_OF.update(dict.fromkeys(_RENAMED, "pilothouse.store._turnstore"))


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
