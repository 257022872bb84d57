"""The wire shape of every catalog entity: one pydantic model per kind.

The same models read the YAML catalog and, later, the HTTP API's request
bodies, so a rule checked here holds on every way in. References to other
entities are business keys (``model: SMOLLM2``), never database ids, and a
catalog file never names a tenant.

Per-field rules (types, lengths, ranges, enum values) live here; rules that
span fields or entities (secrets, transports, references, cycles) live in
``_validate.py`` so they can name the exact field that breaks them.
"""

from __future__ import annotations

__all__ = [
    "CODE_PATTERN",
    "ActionAdvisorSpec",
    "ActionSchemaSpec",
    "ActionSchemasSpec",
    "ActionSpec",
    "ActionTypeSpec",
    "AdvisorSpec",
    "AdvisorTypeSpec",
    "AgentSpec",
    "AgentTypeSpec",
    "ApplicationSpec",
    "CatalogSpec",
    "ConfigurationSpec",
    "DocumentCollectionSpec",
    "McpClientSpec",
    "McpClientTypeSpec",
    "MemoryStrategySpec",
    "MemoryStrategyTypeSpec",
    "ModelSpec",
    "PersonaSpec",
    "PersonaTypeSpec",
    "ProviderSpec",
    "SkillSpec",
    "SkillTypeSpec",
    "ToolSpec",
    "ToolTypeSpec",
    "TypeSpec",
    "VectorStoreSpec",
    "VectorStoreTypeSpec",
    "parse_enum",
    "wire_value",
]

from collections.abc import Callable
from datetime import date
from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal, TypeVar, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    StringConstraints,
    field_validator,
    model_serializer,
    model_validator,
)

from pilothouse.catalog._enums import (
    Cardinality,
    ExecutionPolicy,
    FormHint,
    McpTransport,
    MemoryKind,
    ModelCapability,
    ProviderKind,
    SchemaDirection,
    SearchMode,
    ToolKind,
    VectorStoreKind,
)
from pilothouse.catalog._lengths import RELEASE_LENGTH
from pilothouse.catalog._models import CODE_LENGTHS
from pilothouse.catalog._provider_settings import (
    provider_settings_issues,
)
from pilothouse.catalog._reserved import RESERVED_ACTION_CODES
from pilothouse.catalog._tables import DEFAULT_RELEASE
from pilothouse.catalog._url_templates import url_template_fields
from pilothouse.catalog._vantiq import SettingsIssues, read_custom_config

CODE_PATTERN = r"^[A-Za-z0-9_.-]+$"
"""What a business key may contain: letters, digits, ``_``, ``.`` and ``-``."""

E = TypeVar("E", bound=StrEnum)

# These enums read better by name than by their one-letter code in a file a
# person edits; the others are either readable already or known by code.
_BY_NAME: tuple[type[StrEnum], ...] = (McpTransport, Cardinality, SchemaDirection)


def wire_value(value: StrEnum) -> str:
    """Return the form an enum member takes in YAML and JSON.

    Args:
        value: an enum member.

    Returns:
        ``stdio``/``item``-style readable names for transports, cardinalities
        and directions; the stored code or value for every other enum.
    """
    if isinstance(value, _BY_NAME):
        return value.name.lower().replace("_", "-")
    return value.value


def parse_enum(cls: type[E], value: object) -> E:
    """Read an enum member from its code/value or its readable name.

    Args:
        cls: the enum class.
        value: ``SH``, ``streamable-http``, ``STREAMABLE_HTTP``, ...

    Returns:
        The member.

    Raises:
        ValueError: naming the accepted values.
    """
    if isinstance(value, cls):
        return value
    if isinstance(value, str):
        for member in cls:
            if member.value == value:
                return member
        name = value.strip().upper().replace("-", "_").replace(" ", "_")
        if name in cls.__members__:
            return cls.__members__[name]
    choices = ", ".join(wire_value(m) for m in cls)
    raise ValueError(f"must be one of: {choices} (got {value!r})")


def _enum(cls: type[E]) -> Callable[[object], E]:
    def parse(value: object) -> E:
        return parse_enum(cls, value)

    return parse


# Always, so a Python dump, a JSON body and the YAML file all read the same.
_WIRE = PlainSerializer(wire_value, when_used="always")

ProviderKindField = Annotated[ProviderKind, BeforeValidator(_enum(ProviderKind)), _WIRE]
CapabilityField = Annotated[ModelCapability, BeforeValidator(_enum(ModelCapability)), _WIRE]
ToolKindField = Annotated[ToolKind, BeforeValidator(_enum(ToolKind)), _WIRE]
PolicyField = Annotated[ExecutionPolicy, BeforeValidator(_enum(ExecutionPolicy)), _WIRE]
TransportField = Annotated[McpTransport, BeforeValidator(_enum(McpTransport)), _WIRE]
MemoryKindField = Annotated[MemoryKind, BeforeValidator(_enum(MemoryKind)), _WIRE]
CardinalityField = Annotated[Cardinality, BeforeValidator(_enum(Cardinality)), _WIRE]
HintField = Annotated[FormHint, BeforeValidator(_enum(FormHint)), _WIRE]
StoreKindField = Annotated[VectorStoreKind, BeforeValidator(_enum(VectorStoreKind)), _WIRE]
SearchModeField = Annotated[SearchMode, BeforeValidator(_enum(SearchMode)), _WIRE]

TypeCode = Annotated[
    str, StringConstraints(max_length=CODE_LENGTHS["persona type"], pattern=CODE_PATTERN)
]
Code = Annotated[str, StringConstraints(max_length=CODE_LENGTHS["action"], pattern=CODE_PATTERN)]
# Seed 000's business-key lengths: 8 for the ERP's Code8 entities, 4 for its Code4 ones.
ShortCode = Annotated[
    str, StringConstraints(max_length=CODE_LENGTHS["application"], pattern=CODE_PATTERN)
]
ApplicationCode = ShortCode
McpName = Annotated[
    str, StringConstraints(max_length=CODE_LENGTHS["mcp client"], pattern=CODE_PATTERN)
]
Name = Annotated[str, StringConstraints(max_length=128)]
Long = Annotated[str, StringConstraints(max_length=512)]
ToolName = Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z0-9_-]+$")]
Price = Annotated[Decimal, Field(ge=0, max_digits=18, decimal_places=6)]
JsonObject = dict[str, Any]


class CatalogSpec(BaseModel):
    """Fields and settings every catalog entity shares.

    Attributes:
        active: inactive entities stay in the catalog but are not offered.
    """

    # Numbers become strings where text is expected, so ``code: 2024`` works;
    # unknown fields are refused so a typo never silently drops a setting.
    model_config = ConfigDict(
        extra="forbid",
        coerce_numbers_to_str=True,
        populate_by_name=True,
        protected_namespaces=(),
    )
    key_field: ClassVar[str] = "code"

    active: bool = True

    @property
    def key(self) -> str:
        """The business key (``code``, or ``name`` for MCP clients)."""
        value: str = getattr(self, self.key_field)
        return value


class TypeSpec(CatalogSpec):
    """A classification entity: code, name, description."""

    code: TypeCode
    name: Name = ""
    description: str | None = None


class PersonaTypeSpec(TypeSpec):
    """A family of personas."""


class SkillTypeSpec(TypeSpec):
    """A family of skills."""


class ToolTypeSpec(TypeSpec):
    """A family of tools."""


class McpClientTypeSpec(TypeSpec):
    """A family of MCP clients."""


class AdvisorTypeSpec(TypeSpec):
    """A family of advisors."""


class VectorStoreTypeSpec(TypeSpec):
    """A family of vector stores."""


class MemoryStrategyTypeSpec(TypeSpec):
    """A family of memory strategies."""


class AgentTypeSpec(TypeSpec):
    """A family of agents."""


class ActionTypeSpec(TypeSpec):
    """A family of actions; its constraint prompt is added to each of them."""

    constraint_prompt: str | None = None


class ProviderSpec(CatalogSpec):
    """A model vendor or server and how to reach it."""

    code: TypeCode
    name: Name = ""
    kind: ProviderKindField
    base_url: Long | None = None
    api_key: Annotated[str, StringConstraints(max_length=256)] | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    settings: JsonObject = Field(default_factory=dict[str, Any])
    description: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _vantiq_class(cls, data: Any) -> Any:
        # Vantiq's class_name custom configurations, read into our fields (_vantiq.py).
        if isinstance(data, dict):
            return read_custom_config(cast(dict[str, Any], data))
        return cast(object, data)

    @model_validator(mode="after")
    def _known_settings(self) -> ProviderSpec:
        found = provider_settings_issues(self.kind, self.settings)
        if found:
            raise SettingsIssues(found)
        return self


class ModelSpec(CatalogSpec):
    """One model of a provider, with its capabilities and prices per million tokens."""

    code: Code
    provider: str
    model_name: Annotated[str, StringConstraints(min_length=1, max_length=256)]
    knowledge_cutoff: date | None = None
    input_price: Price | None = None
    output_price: Price | None = None
    capabilities: list[CapabilityField] = Field(default_factory=list[ModelCapability])
    context_window: Annotated[int, Field(ge=1)] | None = None
    description: str | None = None
    dimension: Annotated[int, Field(ge=1, le=65_536)] | None = None
    max_input_tokens: Annotated[int, Field(ge=8)] | None = None
    query_prefix: str | None = None
    document_prefix: str | None = None


class ConfigurationSpec(CatalogSpec):
    """Sampling parameters and limits of a model call."""

    code: TypeCode
    name: Name = ""
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    top_p: Annotated[float, Field(ge=0, le=1)] | None = None
    top_k: Annotated[int, Field(ge=1)] | None = None
    max_tokens: Annotated[int, Field(ge=1)]
    stop: list[str] = Field(default_factory=list[str])
    presence_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    frequency_penalty: Annotated[float, Field(ge=-2, le=2)] | None = None
    retry_count: Annotated[int, Field(ge=0)] = 2
    retry_delay: Annotated[float, Field(ge=0)] = 1.0


class PersonaSpec(CatalogSpec):
    """A reusable voice or role prompt."""

    code: ShortCode
    name: Name = ""
    type: str | None = None
    prompt: str


class SkillToolSpec(BaseModel):
    """A tool of a skill; written as a plain code when its access level is ``read``.

    genai-4j's ``skill_tool_t.access_level``: ``write`` and ``execute`` tools
    run only with an authorizer's yes, whatever the tool's own policy.
    """

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    tool: str
    access: Literal["read", "write", "execute"] = "read"

    @model_validator(mode="before")
    @classmethod
    def _from_code(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"tool": data}
        return data

    @model_serializer(mode="wrap")
    def _as_code(self, handler: SerializerFunctionWrapHandler) -> Any:
        if self.access == "read":
            return self.tool
        return handler(self)


# Semantic versioning 2.0.0: MAJOR.MINOR.PATCH, an optional -pre-release and +build.
_SEMVER = (
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?(\+[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$"
)
Release = Annotated[str, StringConstraints(max_length=RELEASE_LENGTH, pattern=_SEMVER)]
"""genai-4j's skill and tool ``version VARCHAR(20) DEFAULT '1.0.0'`` (seed 002)."""


def _no_row_version(data: object) -> object:
    # "version" is every entity's optimistic-lock counter on the REST API; a
    # genai-4j version written there would be read as a counter, so the
    # catalog file refuses it and says where the semantic version goes.
    if isinstance(data, dict) and "version" in cast(dict[str, Any], data):
        raise ValueError(
            "version is not a field of a skill or tool; write its semantic version as "
            "release (genai-4j's version, e.g. release: 1.2.0)"
        )
    return cast(object, data)


class SkillSpec(CatalogSpec):
    """A reusable capability prompt that may own tools and depend on other skills.

    Attributes:
        release: its semantic version (genai-4j's ``skill_t.version``).
    """

    code: ShortCode
    name: Name = ""
    type: str | None = None
    description: str | None = None
    prompt: str
    parent: str | None = None
    depends_on: list[str] = Field(default_factory=list[str])
    tools: list[SkillToolSpec] = Field(default_factory=list[SkillToolSpec])
    execution: Literal["local", "event"] = "local"
    """``event``: every tool of the skill is published on the event bus (docs/events.md)."""
    release: Release = DEFAULT_RELEASE

    @model_validator(mode="before")
    @classmethod
    def _no_version(cls, data: Any) -> Any:
        return _no_row_version(data)


class ToolSpec(CatalogSpec):
    """Something the model can call; ``name`` is the function name it sees.

    Attributes:
        release: its semantic version (genai-4j's ``tool_t.version``).
    """

    code: Code
    name: ToolName
    type: str | None = None
    kind: ToolKindField
    implementation: str | None = None
    description: str | None = None
    input_schema: JsonObject = Field(default_factory=dict[str, Any])
    output_schema: JsonObject | None = None
    policy: PolicyField = ExecutionPolicy.ALLOW
    settings: JsonObject = Field(default_factory=dict[str, Any])
    release: Release = DEFAULT_RELEASE

    @model_validator(mode="before")
    @classmethod
    def _no_version(cls, data: Any) -> Any:
        return _no_row_version(data)

    @model_validator(mode="after")
    def _service(self) -> ToolSpec:
        # Vantiq's service tools: the row's class offers every public method.
        service = self.settings.get("service")
        if service is None:
            return self
        if not isinstance(service, bool):
            raise ValueError("settings.service must be true or false")
        if service and self.kind is not ToolKind.PYTHON:
            raise ValueError("settings.service is a setting of python tools only")
        if service and ":" not in (self.implementation or ""):
            raise ValueError(
                "settings.service needs implementation 'package.module:Class' (the service)"
            )
        if service and self.input_schema:
            raise ValueError(
                "input_schema: a service's methods describe their own parameters; leave it out"
            )
        return self

    @model_validator(mode="after")
    def _url_templates(self) -> ToolSpec:
        # A REST tool fills its URL with str.format at each call: a field
        # with a format spec ("{id:>4000000000}") would build a string of
        # that many characters in the server. Refused before it is stored,
        # not only when a turn builds the tool.
        if self.kind is not ToolKind.REST:
            return self
        found: list[tuple[tuple[str, ...], str]] = []
        for setting in ("url", "base_url"):
            value = self.settings.get(setting)
            if not isinstance(value, str):
                continue
            try:
                url_template_fields(value)
            except ValueError as exc:
                found.append((("settings", setting), str(exc)))
        if found:
            raise SettingsIssues(found)
        return self

    @model_validator(mode="after")
    def _read_only(self) -> ToolSpec:
        # A replay runs only tools marked read-only live (--live-tools).
        flag = self.settings.get("read_only")
        if flag is not None and not isinstance(flag, bool):
            raise ValueError("settings.read_only must be true or false")
        return self

    @model_validator(mode="after")
    def _script_language(self) -> ToolSpec:
        language = self.settings.get("language")
        if language is None:
            return self
        if self.kind is not ToolKind.SCRIPT:
            raise ValueError("settings.language is a setting of script tools only")
        if language not in _SCRIPT_LANGUAGES:
            raise ValueError(
                f"settings.language '{language}' is not a script language; "
                f"write one of {', '.join(_SCRIPT_LANGUAGES)}"
            )
        return self

    @model_validator(mode="after")
    def _script_limits(self) -> ToolSpec:
        # Their ceilings are the deployment's, checked where the catalog is
        # written (tools/_limits.py); here only which kind they belong to.
        for name in _SCRIPT_LIMITS:
            if name in self.settings and self.kind is not ToolKind.SCRIPT:
                raise ValueError(f"settings.{name} is a setting of script tools only")
        return self


# genai-4j's script languages; the sandbox runs both (tools/_sandbox.py).
_SCRIPT_LANGUAGES = ("python", "javascript")

# Limits only a script tool has (its timeout and max_output_bytes are shared).
_SCRIPT_LIMITS = ("max_processes", "max_memory_mib", "max_cpu_seconds", "max_tmp_mib")


class McpClientSpec(CatalogSpec):
    """A connection to an MCP server; its business key is ``name``."""

    key_field: ClassVar[str] = "name"

    name: McpName
    type: str | None = None
    transport: TransportField
    command: Long | None = None
    args: list[str] = Field(default_factory=list[str])
    env: dict[str, str] = Field(default_factory=dict[str, str])
    url: Long | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str])
    confidential_headers: list[str] = Field(default_factory=list[str])
    description: str | None = None
    input_schema: JsonObject | None = None
    output_schema: JsonObject | None = None


class AdvisorSpec(CatalogSpec):
    """An interceptor around the model call."""

    code: ShortCode
    name: Name = ""
    type: str | None = None
    implementation: Annotated[str, StringConstraints(min_length=1, max_length=512)]
    default_order: int = 0
    settings: JsonObject = Field(default_factory=dict[str, Any])


class VectorStoreSpec(CatalogSpec):
    """Where RAG chunks live: the embedded store, or PostgreSQL with pgvector."""

    code: ShortCode
    name: Name = ""
    type: str | None = None
    kind: StoreKindField = VectorStoreKind.EMBEDDED
    connection: Long | None = None
    default_collection: Name | None = None
    settings: JsonObject = Field(default_factory=dict[str, Any])


class DocumentCollectionSpec(CatalogSpec):
    """A named set of chunks in a vector store, with retrieval defaults."""

    code: ShortCode
    name: Name = ""
    store: str
    collection_name: Annotated[str, StringConstraints(min_length=1, max_length=128)]
    similarity_threshold: Annotated[float, Field(ge=0, le=1)] = 0.0
    top_k: Annotated[int, Field(ge=1)] = 4
    embedding_model: str | None = None
    chunk_size: Annotated[int, Field(ge=16)] | None = None
    chunk_overlap: Annotated[int, Field(ge=0)] = 50
    search_mode: SearchModeField = SearchMode.HYBRID
    qa_model: str | None = None
    rerank: bool = False
    rerank_candidates: Annotated[int, Field(ge=2, le=50)] = 10


class MemoryStrategySpec(CatalogSpec):
    """How much chat history a turn sees: ``FULL`` or ``WINDOW`` of ``window_size``."""

    code: TypeCode
    name: Name = ""
    type: str | None = None
    kind: MemoryKindField
    window_size: Annotated[int, Field(ge=1)] = 20
    token_budget: Annotated[int, Field(ge=1)] | None = None
    settings: JsonObject = Field(default_factory=dict[str, Any])


class ActionSchemaSpec(BaseModel):
    """One JSON schema of an action, describing an item or a list of items."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    cardinality: CardinalityField = Cardinality.ITEM
    hint: HintField | None = None
    json_schema: JsonObject = Field(default_factory=dict[str, Any], alias="schema")


class ActionSchemasSpec(BaseModel):
    """The input, output and memory schemas of an action, each optional."""

    model_config = ConfigDict(extra="forbid")

    input: ActionSchemaSpec | None = None
    output: ActionSchemaSpec | None = None
    memory: ActionSchemaSpec | None = None

    def items(self) -> list[tuple[SchemaDirection, ActionSchemaSpec]]:
        """Return the schemas present, with their direction, in a fixed order."""
        pairs = (
            (SchemaDirection.INPUT, self.input),
            (SchemaDirection.OUTPUT, self.output),
            (SchemaDirection.MEMORY, self.memory),
        )
        return [(direction, schema) for direction, schema in pairs if schema is not None]


class ActionAdvisorSpec(BaseModel):
    """An advisor of an action; written as a plain code when it keeps its default order."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)

    advisor: str
    order: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_code(cls, data: Any) -> Any:
        if isinstance(data, str):
            return {"advisor": data}
        return data

    @model_serializer(mode="wrap")
    def _as_code(self, handler: SerializerFunctionWrapHandler) -> Any:
        if self.order is None:
            return self.advisor
        return handler(self)


class ActionSpec(CatalogSpec):
    """A repeatable LLM task: model, configuration, prompts, schemas and tools."""

    code: Code
    name: Name = ""
    goal_description: str | None = None
    type: str | None = None
    model: str
    configuration: str
    persona: str | None = None
    memory_strategy: str | None = None
    prompt: str
    audit: bool | None = None
    question_timeout: int = Field(default=300, ge=1, le=30 * 24 * 3600)
    ask_user: bool = True
    progressive_disclosure: bool = False
    schemas: ActionSchemasSpec = Field(default_factory=ActionSchemasSpec)
    skills: list[str] = Field(default_factory=list[str])
    tools: list[str] = Field(default_factory=list[str])
    mcp_clients: list[str] = Field(default_factory=list[str])
    advisors: list[ActionAdvisorSpec] = Field(default_factory=list[ActionAdvisorSpec])
    collections: list[str] = Field(default_factory=list[str])

    @field_validator("code")
    @classmethod
    def _not_reserved(cls, code: str) -> str:
        # The conversations of ad-hoc runs and direct tool calls carry these
        # codes; a catalog action of the same code would share their audit
        # trail, queries and limits.
        used_by = RESERVED_ACTION_CODES.get(code)
        if used_by is not None:
            raise ValueError(f"'{code}' is reserved for {used_by}; choose another action code")
        return code


class ApplicationSpec(CatalogSpec):
    """A business application; its system prompt is shared by its agents."""

    code: ApplicationCode
    name: Name = ""
    system_prompt: str | None = None


class AgentSpec(CatalogSpec):
    """An agent of an application, with its own prompt and goal action."""

    code: ShortCode
    name: Name = ""
    application: str
    type: str | None = None
    prompt: str | None = None
    goal_action: str | None = None
