"""Compile an action (with its agent) once per catalog revision.

A compiled action holds everything a turn needs that does not change
between turns: the model spec with resolved secrets, the options, the
assembled system prompt, the output schema and its validator, the tool
definitions and the memory policy. Turns look it up by catalog revision, so
the catalog is read again only after it changed.
"""

from __future__ import annotations

__all__ = ["ActionCompiler", "CompiledAction"]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
from sqlalchemy import Connection, bindparam, select

from pilothouse.catalog._enums import (
    Cardinality,
    InstructionMode,
    MemoryKind,
    SchemaDirection,
    ToolKind,
)
from pilothouse.catalog._memsettings import ScopedMemorySettings
from pilothouse.catalog._read import CatalogReader
from pilothouse.catalog._tables import DEFAULT_RELEASE, catalog_revision_table
from pilothouse.catalog._views import (
    ActionView,
    AgentView,
    McpClientRecord,
    McpClientView,
    ModelRecord,
    SkillView,
    ToolRecord,
)
from pilothouse.errors import InvalidFieldError, InvalidStateError, NotFoundError
from pilothouse.memory import NO_MEMORY, MemoryPolicy, counter_for
from pilothouse.providers import ModelOptions, ModelSpec, SecretSource
from pilothouse.providers._spec import compile_model_spec, custom_config_options
from pilothouse.runtime._advisors import AdvisorChain, resolve_advisor
from pilothouse.runtime._cache import RedisClientPool
from pilothouse.runtime._prompt import (
    PromptContext,
    PromptContributor,
    apply_instruction,
    assemble,
    default_contributors,
    output_json_schema,
    template_fields,
)
from pilothouse.runtime._retrieval import RetrievalSource
from pilothouse.runtime._toolset import SkillInfo
from pilothouse.store import Database
from pilothouse.store import _fastsql as fastsql
from pilothouse.tools._base import ExecutableTool
from pilothouse.tools._code import CodePolicy


@dataclass(frozen=True)
class CompiledAction:
    """An action ready to run: nothing here is recomputed per turn.

    Attributes:
        revision: the catalog revision this was compiled from.
        action_code: the action.
        agent_code: the agent, if any.
        model: the model spec (secrets resolved).
        options: the stored configuration as normalized options.
        retry_count: retries after the first attempt.
        retry_delay: base delay in seconds between attempts.
        prompt_parts: ``(contributor, text)`` parts after the instruction.
        templated: whether any part has ``{placeholders}`` to fill per turn.
        output_schema: the JSON schema answers must match, if any.
        output_cardinality: item or list, when there is an output schema.
        memory: the chat memory policy.
        audit: the action's audit switch (None follows the deployment).
        tools: extra tool definitions ``(name, description, parameters schema)``
            whose calls go back to the caller (ad-hoc actions).
        tool_rows: the action's own catalog tools, loaded directly.
        skills: the action's skills (progressive disclosure).
        bus_tools: names of tools offered directly (no progressive disclosure)
            that a skill with ``execution: event`` sends to the event bus.
        mcp_clients: MCP clients whose tools the action offers.
        mcp_lookup: MCP clients by name, for catalog tools of kind mcp.
        question_timeout: seconds to wait for answers before ending ``TE``.
        advisors: the action's advisors around each model call.
        ask_user: offer the built-in AskUserQuestion tool.
        retrieval: the document collections searched before the first model
            call of every new message (empty: no retrieval, nothing spent).
        local_tools: tools built outside the catalog for this action only
            (an ad-hoc run's ``toolClasses``), executed in this process.
    """

    revision: int
    action_code: str
    agent_code: str | None
    model: ModelSpec
    options: ModelOptions
    retry_count: int
    retry_delay: float
    prompt_parts: tuple[tuple[str, str], ...]
    templated: bool
    output_schema: dict[str, Any] | None
    output_cardinality: Cardinality | None
    memory: MemoryPolicy
    audit: bool | None
    tools: tuple[tuple[str, str, dict[str, Any]], ...]
    _validator: Any = None
    tool_rows: tuple[ToolRecord, ...] = ()
    skills: tuple[SkillInfo, ...] = ()
    bus_tools: frozenset[str] = frozenset()
    guarded_tools: frozenset[str] = frozenset()
    """Skill tools linked ``write`` / ``execute``, offered from the start (no disclosure)."""
    mcp_clients: tuple[McpClientRecord, ...] = ()
    mcp_lookup: Mapping[str, McpClientRecord] = field(default_factory=lambda: {})
    question_timeout: int = 300
    advisors: AdvisorChain = field(default_factory=lambda: AdvisorChain(()))
    ask_user: bool = True
    retrieval: tuple[RetrievalSource, ...] = ()
    local_tools: tuple[ExecutableTool, ...] = ()

    @property
    def runs_tools(self) -> bool:
        """Whether a turn may run a tool here (catalog, skill, MCP, local or bus tools).

        AskUserQuestion and the calls returned to the caller are not run.
        """
        return bool(
            self.tool_rows
            or self.skills
            or self.mcp_clients
            or self.local_tools
            or self.bus_tools
            or self.guarded_tools
        )

    def system_prompt(
        self,
        instruction: str | None = None,
        mode: InstructionMode = InstructionMode.APPEND,
        data: Mapping[str, Any] | None = None,
    ) -> str:
        """Return the system prompt for one turn.

        Args:
            instruction: a caller's instruction, combined with the default.
            mode: how the instruction combines with the default.
            data: values for the prompt's ``{placeholders}``.
        """
        from pilothouse.runtime._prompt import fill_template

        texts = [apply_instruction(instruction, mode)]
        for name, text in self.prompt_parts:
            # Only prompts written by people are templates; the schema block
            # is JSON and its braces must stay as they are.
            if self.templated and name in {"action", "agent"}:
                text = fill_template(text, data or {})
            texts.append(text)
        return "\n\n".join(texts)

    @property
    def is_list_output(self) -> bool:
        """Whether the output schema describes a list of items."""
        return self.output_cardinality is Cardinality.LIST

    @property
    def output_object_schema(self) -> dict[str, Any] | None:
        """The output schema as an object, as tools and JSON modes require.

        A list answer travels as ``{"items": [...]}`` and is unwrapped on the
        way back.
        """
        if self.output_schema is None or not self.is_list_output:
            return self.output_schema
        return {
            "type": "object",
            "properties": {"items": self.output_schema},
            "required": ["items"],
        }

    def validation_errors(self, value: Any) -> list[str]:
        """Return why ``value`` breaks the output schema (empty when it conforms)."""
        if self._validator is None:
            return []
        errors = sorted(self._validator.iter_errors(value), key=lambda e: list(e.path))
        return [
            f"{'/'.join(str(p) for p in error.path) or '(root)'}: {error.message}"
            for error in errors
        ]


def _revision(value: int | None) -> int:
    return int(value or 0)


class ActionCompiler:
    """Compiles and caches actions per (tenant, revision, action, agent).

    Args:
        database: the catalog's database.
        secrets: resolves ``@secrets(NAME)`` references in provider fields.
        contributors: the prompt contributors, in order; the built-ins when None.
        code_policy: what advisors' references may name: the operator's
            grants where tenants write the catalog; any importable name when None.
    """

    def __init__(
        self,
        database: Database,
        secrets: SecretSource,
        contributors: Sequence[PromptContributor] | None = None,
        *,
        code_policy: CodePolicy | None = None,
    ) -> None:
        self._db = database
        self._secrets = secrets
        self._code_policy = code_policy
        self._contributors = (
            list(contributors) if contributors is not None else default_contributors()
        )
        self._cache: dict[tuple[str, str, str | None], CompiledAction] = {}
        # Built once: it runs on every turn's path, on the store's fast path.
        # Table columns, not mapped attributes: a statement naming a mapped
        # attribute is compiled by the ORM, which configures every mapping.
        revisions = catalog_revision_table.c
        self._revision = fastsql.Query(
            select(revisions.revision).where(revisions.tenant == bindparam("b_tenant")),
            _revision,
        )
        # One Redis pool for every cache advisor of every compiled action.
        self._redis = RedisClientPool()

    async def aclose(self) -> None:
        """Close the connections advisors opened (Redis)."""
        await self._redis.aclose()

    @property
    def secrets(self) -> SecretSource:
        """The resolver for ``@secrets(NAME)`` references."""
        return self._secrets

    async def active_collections(
        self, tenant: str, codes: Sequence[str]
    ) -> tuple[RetrievalSource, ...]:
        """The retrieval sources of a turn that names its own collections.

        Raises:
            InvalidFieldError: a code that is no active document collection
                of the tenant, named (``retrieval.collections[i]``).
        """
        active = await self._db.transaction(
            lambda connection: CatalogReader(connection, tenant).collections(codes)
        )
        for index, code in enumerate(codes):
            if code not in active:
                raise InvalidFieldError(
                    f"retrieval.collections[{index}]",
                    f"'{code}' is not a document collection of this catalog",
                )
            if not active[code]:
                raise InvalidFieldError(
                    f"retrieval.collections[{index}]",
                    f"document collection '{code}' is inactive",
                )
        return tuple(RetrievalSource(code) for code in codes)

    def cached(
        self, tenant: str, action_code: str, agent_code: str | None
    ) -> CompiledAction | None:
        """Return the last compilation of an action, unchecked against the catalog.

        The caller must check its :attr:`CompiledAction.revision` against the
        catalog's before trusting it (the runner does, in the statement that
        starts the turn).
        """
        return self._cache.get((tenant, action_code, agent_code))

    async def compile(
        self, tenant: str, action_code: str, agent_code: str | None
    ) -> CompiledAction:
        """Return the compiled action, from the cache when the catalog is unchanged.

        Raises:
            NotFoundError: the action or agent does not exist for the tenant.
            InvalidStateError: the action or agent is inactive.
        """
        key = (tenant, action_code, agent_code)
        cached = self._cache.get(key)
        if cached is not None:
            # The hit path: one statement, on the store's fastest path.
            revision = await self._db.transaction(self._current_revision, tenant)
            if cached.revision == revision:
                return cached
        read = await self._db.transaction(self._read, tenant, action_code, agent_code)
        compiled = self._build(read)
        # An OpenAI model's token counter builds its vocabulary on first use
        # (0.5-1 s of CPU for o200k): build it here, off the event loop,
        # rather than in the middle of the first turn with every other
        # request of the process waiting.
        await anyio.to_thread.run_sync(
            counter_for, compiled.model.provider.kind, compiled.model.model_name
        )
        self._cache[key] = compiled
        return compiled

    def _current_revision(self, connection: Connection, tenant: str) -> int:
        """The tenant's catalog revision (0 before any catalog write)."""
        rows = fastsql.fetch(connection, self._revision, {"b_tenant": tenant})
        return rows[0] if rows else 0

    def _read(
        self, connection: Connection, tenant: str, action_code: str, agent_code: str | None
    ) -> _Read:
        """Read an action, its agent and what they name, with Core statements (no ORM)."""
        revision = self._current_revision(connection, tenant)
        reader = CatalogReader(connection, tenant)
        action = reader.action(action_code)
        if action is None:
            raise NotFoundError(f"action '{action_code}' not found")
        if not action.active:
            raise InvalidStateError(f"action '{action_code}' is inactive")
        agent = None
        if agent_code is not None:
            agent = reader.agent(agent_code)
            if agent is None:
                raise NotFoundError(f"agent '{agent_code}' not found")
            if not agent.active:
                raise InvalidStateError(f"agent '{agent_code}' is inactive")
        skills = [link.skill for link in action.skills if link.skill.active]
        clients = tuple(link.mcp_client for link in action.mcp_clients if link.mcp_client.active)
        expanded = _expand_skills(skills)
        skill_infos = _skill_infos(expanded)
        eager = not action.progressive_disclosure
        tool_rows = tuple(link.tool for link in action.tools if link.tool.active)
        if eager:
            # Without progressive disclosure a skill's tools are offered from
            # the start and there is no use_skill to call.
            names = {tool.name for tool in tool_rows}
            extra = [t for t in _skill_tools(skill_infos) if t.name not in names]
            tool_rows = (*tool_rows, *{t.name: t for t in extra}.values())
            # An event skill's tools still go to the bus when offered directly.
            bus_tools = frozenset(
                t.name for s in skill_infos if s.execution == "event" for t in s.tools
            )
            guarded = frozenset(name for info in skill_infos for name in info.guarded)
            skill_infos = ()
        else:
            bus_tools = frozenset[str]()
            guarded = frozenset[str]()
        lookup = reader.mcp_clients(_mcp_names([*tool_rows, *_skill_tools(skill_infos)]))
        return _Read(
            revision=revision,
            action=action,
            agent=agent,
            prompt_skills=tuple(expanded if eager else skills),
            skill_infos=skill_infos,
            mcp_clients=clients,
            tool_rows=tool_rows,
            bus_tools=bus_tools,
            guarded_tools=guarded,
            mcp_lookup=lookup,
        )

    def _build(self, read: _Read) -> CompiledAction:
        action, agent, skill_infos = read.action, read.agent, read.skill_infos
        context = PromptContext(
            action=action,
            agent=agent,
            # Seed 000 mode: every skill's prompt, its dependencies' and parents' too.
            skills=read.prompt_skills,
            mcp_clients=read.mcp_clients,
        )
        parts = assemble(context, self._contributors, "")[1:]
        templated = any(
            template_fields(text) for name, text in parts if name in {"action", "agent"}
        )
        output_schema = output_json_schema(action, SchemaDirection.OUTPUT)
        cardinality = next(
            (s.cardinality for s in action.schemas if s.direction is SchemaDirection.OUTPUT), None
        )
        validator = None
        if output_schema is not None:
            from pilothouse.runtime._schema_patterns import schema_validator

            validator = schema_validator(output_schema)
        configuration = action.configuration
        strategy = action.memory_strategy
        memory = (
            MemoryPolicy(
                kind=strategy.kind,
                window=strategy.window_size,
                token_budget=strategy.token_budget,
                scoped=ScopedMemorySettings.model_validate(strategy.settings)
                if strategy.kind is MemoryKind.SCOPED
                else None,
            )
            if strategy is not None
            # Seed 000: "llmMemoryStrategy: optional; absent means no memory".
            else NO_MEMORY
        )
        return CompiledAction(
            revision=read.revision,
            action_code=action.code,
            agent_code=agent.code if agent else None,
            model=self.model_spec(action.model),
            options=ModelOptions(
                temperature=configuration.temperature,
                max_tokens=configuration.max_tokens,
                top_p=configuration.top_p,
                top_k=configuration.top_k,
                stop=[str(s) for s in configuration.stop] or None,
                presence_penalty=configuration.presence_penalty,
                frequency_penalty=configuration.frequency_penalty,
            ).merged(
                # A Vantiq class_name configuration's own parameters (seed 004).
                custom_config_options(
                    action.model.provider.code,
                    action.model.provider.settings,
                    action.model.provider.kind,
                )
            ),
            retry_count=configuration.retry_count,
            retry_delay=configuration.retry_delay,
            prompt_parts=tuple(parts),
            templated=templated,
            output_schema=output_schema,
            output_cardinality=cardinality,
            memory=memory,
            audit=action.audit,
            tools=(),
            _validator=validator,
            tool_rows=read.tool_rows,
            skills=skill_infos,
            bus_tools=read.bus_tools,
            guarded_tools=read.guarded_tools,
            mcp_clients=read.mcp_clients,
            mcp_lookup=read.mcp_lookup,
            question_timeout=action.question_timeout,
            ask_user=action.ask_user,
            retrieval=tuple(
                RetrievalSource(link.collection.code)
                for link in action.collections
                if link.collection.active
            ),
            advisors=AdvisorChain(
                [
                    resolve_advisor(
                        link.advisor,
                        link.order,
                        redis_factory=self._redis,
                        code_policy=self._code_policy,
                    )
                    for link in action.advisors
                    if link.advisor.active
                ]
            ),
        )

    async def retarget(
        self,
        tenant: str,
        compiled: CompiledAction,
        model: str | None,
        configuration: str | None,
    ) -> CompiledAction:
        """Return ``compiled`` run on another catalog model and/or configuration (replays).

        Raises:
            NotFoundError: no such model or configuration for the tenant.
        """

        def read(connection: Connection) -> tuple[Any, Any]:
            reader = CatalogReader(connection, tenant)
            found_model = reader.model(model) if model is not None else None
            if model is not None and found_model is None:
                raise NotFoundError(f"model '{model}' not found")
            found = reader.configuration(configuration) if configuration is not None else None
            if configuration is not None and found is None:
                raise NotFoundError(f"configuration '{configuration}' not found")
            return found_model, found

        found_model, found = await self._db.transaction(read)
        changes: dict[str, Any] = {}
        if found_model is not None:
            changes["model"] = self.model_spec(found_model)
        if found is not None:
            changes["options"] = ModelOptions(
                temperature=found.temperature,
                max_tokens=found.max_tokens,
                top_p=found.top_p,
                top_k=found.top_k,
                stop=[str(s) for s in found.stop] or None,
                presence_penalty=found.presence_penalty,
                frequency_penalty=found.frequency_penalty,
            )
            changes["retry_count"] = found.retry_count
            changes["retry_delay"] = found.retry_delay
        return replace(compiled, **changes)

    def model_spec(self, model: ModelRecord) -> ModelSpec:
        """The spec of a catalog model, with its provider's secrets resolved."""
        return compile_model_spec(model, self._secrets)


def _requires(skill: SkillView) -> list[SkillView]:
    """What activating ``skill`` brings along: its parent first, then its dependencies."""
    parent = [skill.parent] if skill.parent is not None else []
    return [*parent, *(link.depends_on for link in skill.dependencies)]


def _expand_skills(skills: Sequence[SkillView]) -> list[SkillView]:
    """The action's skills and, transitively, their parents and dependencies (active ones)."""
    seen: dict[str, SkillView] = {}
    pending = list(skills)
    while pending:
        skill = pending.pop(0)
        if skill.code in seen or not skill.active:
            continue
        seen[skill.code] = skill
        pending.extend(_requires(skill))
    return list(seen.values())


def _skill_infos(skills: Sequence[SkillView]) -> tuple[SkillInfo, ...]:
    """Skills as a compiled action knows them; ``skills`` is already expanded.

    genai-4j: a parent skill's instructions and tools come with its child's,
    so a parent counts as a dependency when a skill is activated.
    """
    return tuple(
        SkillInfo(
            code=skill.code,
            name=skill.name or skill.code,
            description=skill.description or "",
            prompt=skill.prompt,
            tools=tuple(link.tool for link in skill.tools if link.tool.active),
            depends_on=tuple(required.code for required in _requires(skill)),
            execution=skill.execution or "local",
            release=skill.release or DEFAULT_RELEASE,
            guarded=frozenset(
                link.tool.name
                for link in skill.tools
                if link.tool.active and link.access_level in ("write", "execute")
            ),
        )
        for skill in skills
    )


def _skill_tools(skills: Sequence[SkillInfo]) -> list[ToolRecord]:
    return [tool for skill in skills for tool in skill.tools]


def _mcp_names(tools: Sequence[ToolRecord]) -> list[str]:
    """The MCP clients named by catalog tools of kind mcp (``client:tool``)."""
    return sorted(
        {
            (tool.implementation or "").partition(":")[0]
            for tool in tools
            if tool.kind is ToolKind.MCP
        }
    )


@dataclass(frozen=True)
class _Read:
    """What a compile reads from the catalog, in one transaction."""

    revision: int
    action: ActionView
    agent: AgentView | None
    prompt_skills: tuple[SkillView, ...]
    skill_infos: tuple[SkillInfo, ...]
    mcp_clients: tuple[McpClientView, ...]
    tool_rows: tuple[ToolRecord, ...]
    bus_tools: frozenset[str]
    guarded_tools: frozenset[str]
    mcp_lookup: dict[str, McpClientView]


async def mcp_lookup(
    database: Database, tenant: str, tools: Sequence[ToolRecord]
) -> dict[str, McpClientView]:
    """MCP clients named by catalog tools of kind mcp (``client:tool``)."""
    names = _mcp_names(tools)
    if not names:
        return {}
    return await database.transaction(
        lambda connection: CatalogReader(connection, tenant).mcp_clients(names)
    )
