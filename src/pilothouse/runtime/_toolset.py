"""The tools a turn offers: catalog tools, MCP tools, skills and built-ins.

Without skills an action's tools are loaded directly. With skills, the
system prompt carries only each skill's description and the model activates
a skill with the built-in ``use_skill`` tool; that skill's tools, and those
of the skills it depends on, are then offered for the rest of the
conversation (progressive disclosure). ``AskUserQuestion`` is offered in
every conversation.
"""

from __future__ import annotations

__all__ = [
    "ASK_USER",
    "USE_SKILL",
    "ArgumentValidators",
    "CatalogToolSource",
    "EventRoute",
    "GatewaySource",
    "SkillInfo",
    "ToolSet",
    "ToolSource",
    "activate",
    "build_toolset",
    "offered_tools",
    "skill_reply",
]

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.catalog._events import STORED, EventToolSettings
from pilothouse.catalog._views import McpClientRecord, ToolRecord
from pilothouse.providers import SecretSource
from pilothouse.tools._base import (
    ExecutableTool,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolResult,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from pilothouse.mcp import McpClientPool
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.runtime._compile import CompiledAction
    from pilothouse.tools import ToolRegistry
    from pilothouse.tools._code import CodePolicy
    from pilothouse.tools._gateway import GatewayProxy
    from pilothouse.tools._limits import ScriptLimits
    from pilothouse.tools._sandbox import ScriptSandbox, ScriptToolsMode

ASK_USER = "AskUserQuestion"
USE_SKILL = "use_skill"

_QUESTION_TEXT: dict[str, Any] = {"type": "string", "description": "The question to ask."}
_CHOICES: dict[str, Any] = {
    "type": "array",
    "items": {"type": "string"},
    "description": "Allowed answers, when the answer is a choice.",
}
_QUESTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "A short id for the question."},
        "question": _QUESTION_TEXT,
        "choices": _CHOICES,
    },
    "required": ["question"],
}

ASK_USER_DEFINITION = ToolDefinition(
    name=ASK_USER,
    description=(
        "Ask the user one or more questions when you need information only they have. "
        "The conversation pauses until they answer."
    ),
    parameters={
        "type": "object",
        "properties": {
            "question": _QUESTION_TEXT,
            "choices": _CHOICES,
            "questions": {"type": "array", "items": _QUESTION, "minItems": 1},
        },
        "anyOf": [{"required": ["question"]}, {"required": ["questions"]}],
    },
)


@dataclass(frozen=True)
class SkillInfo:
    """A skill as a compiled action knows it."""

    code: str
    name: str
    description: str
    prompt: str
    tools: tuple[ToolRecord, ...]
    depends_on: tuple[str, ...]
    execution: str = "local"
    """``event``: the skill's tools are published on the event bus."""
    guarded: frozenset[str] = frozenset()
    """Names of its tools linked ``write`` or ``execute``: they need the authorizer."""
    release: str = "1.0.0"
    """Its semantic version (genai-4j's ``skill_t.version``), recorded when it is used."""


@dataclass(frozen=True, slots=True)
class EventRoute:
    """Where calls of an event tool go: the outbox, then the bus.

    Attributes:
        skill_name: the ``skillName`` the worker runs.
        topic: the command topic.
        reply_to: the topic the worker answers on.
        timeout: seconds until the call ends with a timeout result.
    """

    skill_name: str
    topic: str
    reply_to: str
    timeout: float


def event_route(row: ToolRecord) -> EventRoute:
    """The route of a catalog tool published on the bus (its settings, checked on import)."""
    settings = EventToolSettings.model_validate(
        row.settings if row.kind is ToolKind.EVENT else {}, context=STORED
    )
    return EventRoute(
        settings.skill or row.name, settings.topic, settings.reply_to, settings.timeout
    )


def use_skill_definition(skills: Sequence[SkillInfo]) -> ToolDefinition:
    """The ``use_skill`` tool for an action's skills."""
    return ToolDefinition(
        name=USE_SKILL,
        description=(
            "Activate one of your skills to receive its instructions and tools. "
            "Skills: " + "; ".join(f"{s.code}: {s.description or s.name}" for s in skills)
        ),
        parameters={
            "type": "object",
            "properties": {"skill": {"type": "string", "enum": [s.code for s in skills]}},
            "required": ["skill"],
        },
    )


class ArgumentValidators(Mapping[str, Any]):
    """Argument validators by tool name, each compiled when first asked for.

    A step offers every tool but the model calls few (often none), so a
    validator is built only for a tool that is called, and jsonschema is not
    imported by a turn that calls no tool.
    """

    def __init__(self) -> None:
        self._schemas: dict[str, dict[str, Any]] = {}
        self._compiled: dict[str, Any] = {}

    def add(self, name: str, schema: dict[str, Any]) -> None:
        """Validate the arguments of tool ``name`` against ``schema``."""
        self._schemas[name] = schema
        self._compiled.pop(name, None)

    def __getitem__(self, name: str) -> Any:
        validator = self._compiled.get(name)
        if validator is None:
            from pilothouse.runtime._schema_patterns import schema_validator

            schema = self._schemas[name]
            validator = self._compiled[name] = schema_validator(schema)
        return validator

    def without(self, names: frozenset[str]) -> ArgumentValidators:
        """These validators but for ``names``: tools a model call does not offer.

        A call the model writes as text to a tool it was not offered is then
        text, not a call. Compiled validators are shared.
        """
        if not names:
            return self
        view = ArgumentValidators()
        view._schemas = {k: v for k, v in self._schemas.items() if k not in names}
        view._compiled = self._compiled
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._schemas)

    def __len__(self) -> int:
        return len(self._schemas)


@dataclass
class ToolSet:
    """What one step of a turn offers the model.

    Attributes:
        executable: tools the loop runs, by name.
        returned: custom-schema tools whose calls go back to the caller.
        builtins: built-in tools handled by the loop itself.
        validators: argument validators (``iter_errors``), by name.
        timeouts: per-tool timeouts in seconds, by name.
        events: tools whose calls go to the event bus, by name (also in
            ``returned``: the loop runs none of them itself).
    """

    executable: dict[str, ExecutableTool] = field(default_factory=lambda: {})
    returned: dict[str, ToolDefinition] = field(default_factory=lambda: {})
    builtins: dict[str, ToolDefinition] = field(default_factory=lambda: {})
    validators: ArgumentValidators = field(default_factory=ArgumentValidators)
    timeouts: dict[str, float] = field(default_factory=lambda: {})
    releases: dict[str, str] = field(default_factory=lambda: {})
    """Catalog tools' semantic versions by name, recorded with each call (audit)."""
    events: dict[str, EventRoute] = field(default_factory=lambda: {})
    read_only: set[str] = field(default_factory=lambda: set[str]())
    """Tools whose catalog entry says ``settings.read_only: true`` (a replay may run them live)."""

    def add(self, definition: ToolDefinition, *, tool: ExecutableTool | None = None) -> None:
        """Offer a tool; ``tool`` None means returned to the caller."""
        if tool is not None:
            self.executable[definition.name] = tool
        else:
            self.returned[definition.name] = definition
        self._validate_with(definition)

    def add_builtin(self, definition: ToolDefinition) -> None:
        """Offer a tool the loop handles itself."""
        self.builtins[definition.name] = definition
        self._validate_with(definition)

    def _validate_with(self, definition: ToolDefinition) -> None:
        self.validators.add(definition.name, dict(definition.parameters) or {"type": "object"})

    def definitions(self) -> list[ToolDefinition]:
        """Every definition offered, builtins last."""
        return [
            *(t.definition for t in self.executable.values()),
            *self.returned.values(),
            *self.builtins.values(),
        ]


class ToolSource(Protocol):
    """Turns catalog tools and MCP clients into executable tools."""

    async def tool(self, row: ToolRecord) -> ExecutableTool:
        """Return the executable tool of a catalog tool row (not of kind mcp)."""
        ...

    async def service_tools(self, row: ToolRecord) -> list[ExecutableTool]:
        """Return the tools of a catalog row that is a service (``settings.service``)."""
        ...

    async def mcp_tools(self, row: McpClientRecord) -> list[ExecutableTool]:
        """Return every tool of an MCP client."""
        ...

    async def mcp_tool(self, row: McpClientRecord, name: str) -> ExecutableTool:
        """Return one tool of an MCP client."""
        ...


@runtime_checkable
class GatewaySource(Protocol):
    """A tool source that also offers OpenAPI gateway rows' operations."""

    async def gateway_tools(self, row: ToolRecord) -> list[ExecutableTool]:
        """Return the AI-enabled operations of a gateway row as tools."""
        ...


class CatalogToolSource:
    """The default source: the tool registry, the MCP client pool and the gateways.

    Each is created on first use, so actions without tools import none.

    Args:
        secrets: resolves secret references in tool and MCP settings.
        registry: a tool registry with programmatic registrations, if any.
        mcp: an MCP client pool to share, if any.
        script_tools: how script tools run (``Settings.script_tools``).
        script_limits: the ceilings of script tools' limits
            (``Settings.script_max_*``); the built-in ones when None.
        gateways: returns the process's gateway proxy (shared with the MCP
            server, so limits and documents are one); None: a gateway row
            offers no tools.
        egress: when given, REST and OpenAPI tools and MCP clients connect
            only to addresses this policy (the running turn's tenant's)
            checked, pinned per request; None in the operator's own process.
        code_policy: what python tools' implementations may name: the
            operator's grants where tenants write the catalog; any importable
            name when None (the operator's own process).
    """

    def __init__(
        self,
        secrets: SecretSource,
        *,
        registry: ToolRegistry | None = None,
        mcp: McpClientPool | None = None,
        script_tools: ScriptToolsMode = "sandbox",
        gateways: Callable[[], GatewayProxy] | None = None,
        egress: EgressPolicy | None = None,
        code_policy: CodePolicy | None = None,
        script_limits: ScriptLimits | None = None,
    ) -> None:
        self._gateways = gateways
        self._secrets = secrets
        self._script_tools: ScriptToolsMode = script_tools
        self._script_limits = script_limits
        self._script_sandbox: ScriptSandbox | None = None
        self._egress = egress
        self._code_policy = code_policy
        if registry is not None:
            # The deployment's settings govern every registry, a caller's too:
            # catalog rows resolve secrets in their own tenant's scope.
            registry.script_sandbox = self._sandbox()
            registry.egress = egress
            registry.secrets = secrets
            if code_policy is not None:
                registry.code = code_policy
        self._registry = registry
        self._mcp = mcp
        self._mcp_stop: Any = None
        self._mcp_task: Any = None

    @property
    def registry(self) -> ToolRegistry:
        """The tool registry (Python tools registered in code, catalog builds)."""
        return self._tools()

    def _tools(self) -> ToolRegistry:
        if self._registry is None:
            from pilothouse.tools import ToolRegistry

            self._registry = ToolRegistry(self._secrets, script_sandbox=self._sandbox())
            self._registry.egress = self._egress
            if self._code_policy is not None:
                self._registry.code = self._code_policy
        return self._registry

    def _sandbox(self) -> ScriptSandbox:
        """Where script tools run, made (and its limits' enforcement logged) once."""
        if self._script_sandbox is None:
            from pilothouse.tools._sandbox import ScriptSandbox

            self._script_sandbox = ScriptSandbox.for_mode(self._script_tools, self._script_limits)
            if self._script_tools != "off":
                self._script_sandbox.log_enforcement()
        return self._script_sandbox

    async def _pool(self) -> McpClientPool:
        if self._mcp is None:
            import asyncio

            from pilothouse.mcp import McpClientPool

            # The pool's task group must be entered and left by one task; a
            # task of its own lets any turn start it and any caller close it.
            pool = McpClientPool()
            ready = asyncio.Event()
            self._mcp_stop = asyncio.Event()

            async def own_pool() -> None:
                async with pool:
                    ready.set()
                    assert self._mcp_stop is not None
                    await self._mcp_stop.wait()

            self._mcp_task = asyncio.get_running_loop().create_task(own_pool())
            await ready.wait()
            self._mcp = pool
        return self._mcp

    async def tool(self, row: ToolRecord) -> ExecutableTool:
        """Return the executable tool of a catalog tool row (not of kind mcp)."""
        return await self._tools().from_catalog(row)

    async def gateway_tools(self, row: ToolRecord) -> list[ExecutableTool]:
        """Return the AI-enabled operations of a gateway row, proxied like the MCP server's.

        Raises:
            ToolError: no gateway proxy, or the gateway cannot be loaded.
        """
        if self._gateways is None:
            raise ToolError(f"tool '{row.name}': this process offers no OpenAPI gateways")
        return list(await self._gateways().tools(row))

    async def service_tools(self, row: ToolRecord) -> list[ExecutableTool]:
        """Return the tools of a catalog row that is a service (``settings.service``)."""
        return self._tools().service_from_catalog(row)

    async def mcp_tools(self, row: McpClientRecord) -> list[ExecutableTool]:
        """Return every tool of an MCP client."""
        from pilothouse.mcp import McpClientConfig

        pool = await self._pool()
        return await pool.tools(
            McpClientConfig.from_row(row, self._secrets, self._session_egress())
        )

    async def mcp_tool(self, row: McpClientRecord, name: str) -> ExecutableTool:
        """Return one tool of an MCP client."""
        from pilothouse.mcp import McpClientConfig

        pool = await self._pool()
        config = McpClientConfig.from_row(row, self._secrets, self._session_egress())
        return await pool.tool(config, name)

    def _session_egress(self) -> EgressPolicy | None:
        """The policy of an MCP session opened now: the running turn's tenant's.

        A session runs in the pool's own task, outside the turn's context, so
        the policy travels in its config (and keys the session: one per tenant).
        """
        if self._egress is None:
            return None
        from pilothouse.providers._egress import current_egress

        return current_egress.get() or self._egress

    async def aclose(self) -> None:
        """Close the registry's HTTP client and the MCP sessions this source opened."""
        if self._registry is not None:
            await self._registry.aclose()
        if self._mcp_task is not None:
            self._mcp_stop.set()
            await self._mcp_task
            self._mcp_task = None


def tool_timeout(row: ToolRecord, default: float) -> float:
    """A tool's timeout from its settings, else the default."""
    value = (row.settings or {}).get("timeout")
    return float(value) if isinstance(value, int | float) and value > 0 else default


async def build_toolset(
    source: ToolSource,
    *,
    tools: Sequence[ToolRecord],
    mcp_clients: Sequence[McpClientRecord],
    skills: Sequence[SkillInfo],
    active_skills: set[str],
    default_timeout: float,
    mcp_lookup: Mapping[str, McpClientRecord] | None = None,
    ask_user: bool = True,
    bus_tools: frozenset[str] = frozenset(),
    guarded: frozenset[str] = frozenset(),
    offer: Sequence[str] | None = None,
) -> ToolSet:
    """Resolve what a step offers: direct tools, active skills' tools, builtins.

    ``guarded`` names tools a skill links with access ``write`` or
    ``execute`` (genai-4j): they run only with the authorizer's yes.
    ``offer`` narrows the skills ``use_skill`` offers (by code, in order): the
    few whose descriptions match the request, for an action with many.
    """
    toolset = ToolSet()
    rows: list[ToolRecord] = list(tools)
    by_code = {skill.code: skill for skill in skills}
    on_bus: set[str] = set(bus_tools)
    for code in sorted(active_skills):
        skill = by_code.get(code)
        if skill is not None:
            rows.extend(skill.tools)
            if skill.execution == "event":
                on_bus.update(t.name for t in skill.tools)
            guarded = guarded | skill.guarded
    seen: set[str] = set()
    for row in rows:
        if row.name in seen:
            continue
        seen.add(row.name)
        if row.release:
            toolset.releases[row.name] = row.release
        if row.kind is ToolKind.EVENT or (row.name in on_bus and row.kind is not ToolKind.SCHEMA):
            toolset.add(await _bus_definition(source, row))
            toolset.events[row.name] = event_route(row)
            continue
        if row.kind is ToolKind.SCHEMA:
            toolset.add(ToolDefinition(row.name, row.description or "", dict(row.input_schema)))
            continue
        if row.kind is ToolKind.REST and "gateway" in (row.settings or {}):
            await _add_gateway(toolset, source, row, row.name in guarded, default_timeout)
            continue
        _offer(toolset, row, await _members(source, row, mcp_lookup), guarded, default_timeout)
    for client in mcp_clients:
        for executable in await source.mcp_tools(client):
            if executable.definition.name not in toolset.executable:
                toolset.add(executable.definition, tool=executable)
    if skills:
        toolset.add_builtin(use_skill_definition(offered_skills(skills, offer)))
    if ask_user:
        toolset.add_builtin(ASK_USER_DEFINITION)
    return toolset


async def _add_gateway(
    toolset: ToolSet, source: ToolSource, row: ToolRecord, guarded: bool, default_timeout: float
) -> None:
    """Offer a gateway row's AI-enabled operations (a gateway row is many tools)."""
    if not isinstance(source, GatewaySource):
        raise ToolError(f"tool '{row.name}': this process's tool source offers no gateways")
    for operation in await source.gateway_tools(row):
        name = operation.definition.name
        if name in toolset.executable or name in toolset.returned:
            # A name two tools answer would reach whichever came first, maybe
            # another backend with other credentials: refuse, never pick.
            raise ToolError(
                f"tool '{row.name}': its operation tool '{name}' clashes with another tool "
                "of this action; give the gateway another settings.gateway.prefix"
            )
        if guarded and operation.policy is not ExecutionPolicy.AUTHORIZED:
            operation = _Guarded(operation)
        toolset.add(operation.definition, tool=operation)
        toolset.timeouts[name] = tool_timeout(row, default_timeout)


async def _members(
    source: ToolSource, row: ToolRecord, mcp_lookup: Mapping[str, McpClientRecord] | None
) -> list[ExecutableTool]:
    """The runnable tools of a catalog row: one, or a service's methods."""
    if row.kind is ToolKind.PYTHON and (row.settings or {}).get("service") is True:
        # Vantiq's service tools: every public method of the row's class.
        return await source.service_tools(row)
    return [await _executable(source, row, mcp_lookup)]


def _offer(
    toolset: ToolSet,
    row: ToolRecord,
    members: Sequence[ExecutableTool],
    guarded: frozenset[str],
    default_timeout: float,
) -> None:
    """Offer a row's tools under the row's timeout, link access and release."""
    for executable in members:
        if row.name in guarded and executable.policy is not ExecutionPolicy.AUTHORIZED:
            executable = _Guarded(executable)
        name = executable.definition.name
        toolset.add(executable.definition, tool=executable)
        toolset.timeouts[name] = tool_timeout(row, default_timeout)
        if row.release:
            toolset.releases[name] = row.release
        # A write or execute skill link says the tool changes things here,
        # whatever its own entry claims.
        if (row.settings or {}).get("read_only") is True and row.name not in guarded:
            toolset.read_only.add(name)


async def _executable(
    source: ToolSource, row: ToolRecord, mcp_lookup: Mapping[str, McpClientRecord] | None
) -> ExecutableTool:
    """The runnable tool of a catalog row."""
    if row.kind is not ToolKind.MCP:
        return await source.tool(row)
    # An MCP tool in the catalog names its client: "client:tool".
    client_name, _, tool_name = (row.implementation or "").partition(":")
    client = (mcp_lookup or {}).get(client_name)
    if client is None:
        raise ToolError(f"tool '{row.code}': MCP client '{client_name}' is not in the catalog")
    return await source.mcp_tool(client, tool_name or row.name)


async def _bus_definition(source: ToolSource, row: ToolRecord) -> ToolDefinition:
    """What the model sees of a tool the bus runs: its catalog schema, else its own."""
    if row.kind is ToolKind.EVENT or row.input_schema:
        return ToolDefinition(row.name, row.description or "", dict(row.input_schema))
    if row.kind is ToolKind.MCP:
        raise ToolError(
            f"tool '{row.code}': an MCP tool in an event skill needs its input_schema "
            "in the catalog (the worker, not this process, reaches the MCP server)"
        )
    # A Python tool's parameters come from its signature.
    return (await source.tool(row)).definition


class _Guarded:
    """A tool reached through a ``write`` / ``execute`` skill link: policy ``authorized``."""

    def __init__(self, tool: ExecutableTool) -> None:
        self._tool = tool

    @property
    def definition(self) -> ToolDefinition:
        return self._tool.definition

    @property
    def kind(self) -> ToolKind:
        return self._tool.kind

    @property
    def policy(self) -> ExecutionPolicy:
        return ExecutionPolicy.AUTHORIZED

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return await self._tool.execute(arguments, context)


def offered_skills(skills: Sequence[SkillInfo], offer: Sequence[str] | None) -> list[SkillInfo]:
    """The skills ``use_skill`` offers: all, or those of ``offer`` in its order."""
    if offer is None:
        return list(skills)
    by_code = {skill.code: skill for skill in skills}
    return [by_code[code] for code in offer if code in by_code]


def activate(skills: Sequence[SkillInfo], code: str) -> list[SkillInfo]:
    """Return the skill and every skill it depends on, transitively, in order."""
    by_code = {skill.code: skill for skill in skills}
    ordered: list[SkillInfo] = []
    pending = [code]
    while pending:
        current = by_code.get(pending.pop(0))
        if current is None or current in ordered:
            continue
        ordered.append(current)
        pending.extend(current.depends_on)
    return ordered


def skill_reply(activated: Sequence[SkillInfo]) -> str:
    """What ``use_skill`` answers: the skills' instructions and their tools."""
    parts = [f"Skill {s.code} ({s.name}): {s.prompt}" for s in activated]
    tools = sorted({t.name for s in activated for t in s.tools})
    if tools:
        parts.append("Tools now available: " + ", ".join(tools))
    return "\n".join(parts)


async def offered_tools(
    source: ToolSource | None,
    compiled: CompiledAction,
    active_skills: set[str],
    default_timeout: float,
    offer: Sequence[str] | None = None,
) -> ToolSet:
    """What a step of a compiled action offers; no source is needed without catalog tools."""
    if source is None:
        toolset = ToolSet()
        if compiled.skills:
            toolset.add_builtin(use_skill_definition(offered_skills(compiled.skills, offer)))
        if compiled.ask_user:
            toolset.add_builtin(ASK_USER_DEFINITION)
    else:
        toolset = await build_toolset(
            source,
            tools=compiled.tool_rows,
            mcp_clients=compiled.mcp_clients,
            skills=compiled.skills,
            active_skills=active_skills,
            default_timeout=default_timeout,
            mcp_lookup=compiled.mcp_lookup,
            ask_user=compiled.ask_user,
            bus_tools=compiled.bus_tools,
            guarded=compiled.guarded_tools,
            offer=offer,
        )
    for executable in compiled.local_tools:
        toolset.add(executable.definition, tool=executable)
        toolset.timeouts[executable.definition.name] = default_timeout
    for name, description, schema in compiled.tools:
        toolset.add(ToolDefinition(name, description, schema))
    return toolset
