"""The tool registry: builds executable tools from code and from catalog rows.

Application code registers Python callables (one function, a module or a
class as a service of tools); the run loop asks for catalog rows with
:meth:`ToolRegistry.from_catalog`, which builds the tool once per row
version and caches it, so a turn never re-imports a module, re-reads an
OpenAPI document or regenerates a schema. Every definition is checked on the
way in (name pattern, input schema a valid object JSON Schema), so a broken
tool fails when it is built, with its name in the message, not mid-turn.
"""

from __future__ import annotations

__all__ = ["TOOL_NAME", "ToolRegistry", "validate_definition"]

import inspect
import re
from collections.abc import Callable, Iterator, Mapping
from types import ModuleType, TracebackType
from typing import Any, Self, cast

import anyio
import httpx

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.catalog._views import ToolRecord
from pilothouse.providers._egress import EgressPolicy
from pilothouse.providers._secrets import SecretSource
from pilothouse.tools._base import (
    ExecutableTool,
    ToolContext,
    ToolDefinition,
    ToolError,
    ToolResult,
)
from pilothouse.tools._code import CodeNotGrantedError, CodePolicy, resolve_reference
from pilothouse.tools._openapi import load_document, operation, parse_reference
from pilothouse.tools._python import python_tool, service_functions
from pilothouse.tools._rest import (
    DEFAULT_MAX_RESPONSE_BYTES,
    RestTool,
    endpoint_from_settings,
    template_fields,
)
from pilothouse.tools._sandbox import ScriptSandbox
from pilothouse.tools._schema_tool import SchemaTool
from pilothouse.tools._script import ScriptTool

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""The names every provider accepts for a function."""


def _schema_problem(schema: Mapping[str, Any]) -> str | None:
    # Imported here: jsonschema is only needed when a tool is built.
    from jsonschema import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(dict(schema))
    except SchemaError as exc:
        where = "/".join(str(p) for p in exc.path)
        return f"{exc.message}" + (f" (at {where})" if where else "")
    return None


def validate_definition(definition: ToolDefinition) -> ToolDefinition:
    """Check a definition before any model sees it.

    Args:
        definition: the definition.

    Returns:
        The same definition.

    Raises:
        ToolError: the name does not match ``^[a-zA-Z0-9_-]{1,64}$``, the
            input schema is not a valid JSON Schema of type object, or the
            output schema is not a valid JSON Schema.
    """
    name = definition.name
    if not TOOL_NAME.match(name):
        raise ToolError(f"tool '{name}': name must match {TOOL_NAME.pattern}")
    parameters = definition.parameters
    if not isinstance(parameters, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise ToolError(f"tool '{name}': input schema must be a JSON object")
    if parameters.get("type") != "object":
        raise ToolError(
            f"tool '{name}': input schema must have type 'object', not {parameters.get('type')!r}"
        )
    problem = _schema_problem(parameters)
    if problem is not None:
        raise ToolError(f"tool '{name}': input schema is not a valid JSON Schema: {problem}")
    if definition.output_schema is not None:
        problem = _schema_problem(definition.output_schema)
        if problem is not None:
            raise ToolError(f"tool '{name}': output schema is not a valid JSON Schema: {problem}")
    return definition


class ToolRegistry:
    """Builds, checks and holds executable tools.

    Args:
        secrets: resolves ``@secrets(NAME)`` in REST headers at call time,
            in the scope of the row's tenant.
        http: the client REST tools share; by default the registry makes one
            (pooled) on first need and closes it in :meth:`aclose`. A client
            passed in is the caller's to close.
        script_sandbox: where script tools run; the bubblewrap sandbox by
            default. A :class:`~pilothouse.api.Pilothouse` sets it from
            ``Settings.script_tools``.
    """

    def __init__(
        self,
        secrets: SecretSource,
        *,
        http: httpx.AsyncClient | None = None,
        script_sandbox: ScriptSandbox | None = None,
    ) -> None:
        self.script_sandbox = (
            script_sandbox if script_sandbox is not None else ScriptSandbox.for_mode("sandbox")
        )
        # Public, like egress and script_sandbox: a Pilothouse sets it to the
        # deployment's secrets, so catalog rows resolve in their tenant's scope.
        self.secrets: SecretSource = secrets
        self._http = http
        self._owns_http = http is None
        # Set by the tool source in the HTTP service: the client it makes
        # connects only to addresses the egress policy checked.
        self.egress: EgressPolicy | None = None
        # Set by the tool source too: where tenants write the catalog, a
        # row's implementation resolves only to code the operator granted.
        self.code = CodePolicy.open()
        self._tools: dict[str, ExecutableTool] = {}
        self._rows: dict[int, tuple[int, ExecutableTool]] = {}
        self._services: dict[int, tuple[int, tuple[ExecutableTool, ...]]] = {}
        self._documents: dict[str, dict[str, Any]] = {}
        self._documents_lock = anyio.Lock()

    # -- registered tools ---------------------------------------------------

    def register(
        self,
        target: Callable[..., Any] | ModuleType | type[Any] | object | str,
        *,
        name: str | None = None,
        description: str | None = None,
        policy: ExecutionPolicy | str | None = None,
    ) -> list[ExecutableTool]:
        """Register Python tools: a function, or a service of them.

        Args:
            target: a function or bound method; a module, a class (made with
                no arguments) or an instance, whose public functions become
                tools (only the ``@tool``-marked ones if any is marked); or a
                reference ``package.module:function`` / ``package.module`` /
                ``package.module:Class`` naming one of these.
            name: the tool name (a single function only).
            description: the description (a single function only).
            policy: the policy of every tool registered by this call.

        Returns:
            The tools registered, in definition order.

        Raises:
            ToolError: the reference cannot be imported, a definition is
                invalid, a name is taken, or ``name``/``description`` were
                given for a service.
        """
        if isinstance(target, str):
            target = resolve_reference(target)
        if inspect.isroutine(target) or isinstance(target, staticmethod):
            built = [
                python_tool(
                    cast(Callable[..., Any], target),
                    name=name,
                    description=description,
                    policy=policy,
                )
            ]
        else:
            if name is not None or description is not None:
                raise ToolError(
                    f"name and description apply to one function, not to the service {target!r}"
                )
            built = [python_tool(func, policy=policy) for func in service_functions(target)]
            if not built:
                raise ToolError(f"tool service {target!r} has no public functions")
        for candidate in built:
            validate_definition(candidate.definition)
        names = [candidate.definition.name for candidate in built]
        taken = sorted({n for n in names if n in self._tools or names.count(n) > 1})
        if taken:
            raise ToolError(f"tool name(s) already registered: {', '.join(taken)}")
        for candidate in built:
            self._tools[candidate.definition.name] = candidate
        return list(built)

    def add(self, tool: ExecutableTool) -> ExecutableTool:
        """Register a tool built elsewhere (e.g. from :meth:`from_catalog` or an MCP pool).

        Args:
            tool: any executable tool.

        Returns:
            The same tool.

        Raises:
            ToolError: its definition is invalid or its name is taken.
        """
        validate_definition(tool.definition)
        if tool.definition.name in self._tools:
            raise ToolError(f"tool name(s) already registered: {tool.definition.name}")
        self._tools[tool.definition.name] = tool
        return tool

    def get(self, name: str) -> ExecutableTool:
        """Return the registered tool called ``name``.

        Raises:
            ToolError: no tool has that name.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise ToolError(f"no tool named '{name}' is registered") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[ExecutableTool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def definitions(self) -> list[ToolDefinition]:
        """The definitions of the registered tools, in registration order."""
        return [t.definition for t in self._tools.values()]

    # -- catalog tools ------------------------------------------------------

    @property
    def http(self) -> httpx.AsyncClient:
        """The shared HTTP client (made on first use when none was given)."""
        if self._http is None:
            if self.egress is None:
                self._http = httpx.AsyncClient()
            else:
                from pilothouse.providers._egress_transport import PinnedHttpxTransport

                self._http = httpx.AsyncClient(transport=PinnedHttpxTransport(self.egress))
        return self._http

    async def from_catalog(self, row: ToolRecord) -> ExecutableTool:
        """Build (or take from the cache) the executable tool of a catalog row.

        The cache is keyed by the row's id and version: an edited row (its
        version bumped) is rebuilt, and the older build is dropped.

        Args:
            row: a catalog ``Tool`` of kind python, rest, script or schema.

        Returns:
            The tool; the row's ``input_schema``, when not empty, is what
            the model sees, else the one derived from the implementation.

        Raises:
            ToolError: kind ``mcp`` (those come from the MCP client pool),
                a missing or broken implementation, or an invalid definition;
                the message names the tool.
        """
        # A row not yet flushed to the database has no id, and is not cached.
        row_id = cast(int | None, row.id)
        if row_id is not None:
            cached = self._rows.get(row_id)
            if cached is not None and cached[0] == row.version:
                return cached[1]
        built = await self._build(row)
        validate_definition(built.definition)
        if row_id is not None:
            self._rows[row_id] = (row.version, built)
        return built

    def service_from_catalog(self, row: ToolRecord) -> list[ExecutableTool]:
        """Build the tools of a catalog row that is a service (``settings.service: true``).

        Vantiq's service tools (seed 004): a reference to a service "will
        include all public procedures as tools". Here the row's
        implementation names a class (``package.module:Class``), made with no
        arguments; its public methods become tools under their own names
        (only the ``@tool``-marked ones if any is marked), each under the
        row's policy. Built once per row version.

        Args:
            row: a catalog tool of kind python with ``settings.service``.

        Returns:
            The tools, in definition order.

        Raises:
            ToolError: the implementation is no importable class, it has no
                public methods, or a method cannot be described.
        """
        row_id = cast(int | None, row.id)
        if row_id is not None:
            cached = self._services.get(row_id)
            if cached is not None and cached[0] == row.version:
                return list(cached[1])
        implementation = (row.implementation or "").strip()
        try:
            target = self._resolve(row, implementation) if ":" in implementation else None
        except CodeNotGrantedError as exc:
            refused: list[ExecutableTool] = [_NotGranted(self._definition(row, None, ""), exc)]
            return refused
        if not inspect.isclass(target):
            raise ToolError(
                f"tool '{row.name}': a service's implementation must name a class, "
                f"'package.module:Class' (got '{implementation}')"
            )
        policy = ExecutionPolicy(row.policy or ExecutionPolicy.ALLOW)
        built: list[ExecutableTool] = [
            python_tool(func, policy=policy) for func in service_functions(target)
        ]
        if not built:
            raise ToolError(f"tool '{row.name}': service '{implementation}' has no public methods")
        for candidate in built:
            validate_definition(candidate.definition)
        if row_id is not None:
            self._services[row_id] = (row.version, tuple(built))
        return built

    async def _build(self, row: ToolRecord) -> ExecutableTool:
        kind = ToolKind(row.kind)
        policy = ExecutionPolicy(row.policy or ExecutionPolicy.ALLOW)
        if kind is ToolKind.MCP:
            raise ToolError(f"tool '{row.name}': mcp tools come from the MCP client pool")
        if kind is ToolKind.SCHEMA:
            return SchemaTool(self._definition(row, None, ""), policy)
        implementation = (row.implementation or "").strip()
        settings: Mapping[str, Any] = row.settings or {}
        if kind is ToolKind.REST and "gateway" in settings:
            raise ToolError(
                f"tool '{row.name}': it is an OpenAPI gateway (settings.gateway): many tools, "
                "one per AI-enabled operation, offered to the actions linked to it and to MCP "
                "clients, never one tool on its own"
            )
        if kind is ToolKind.REST:
            # A REST tool is an OpenAPI operation, or declared in its settings.
            if implementation.startswith("openapi:"):
                return await self._openapi(row, implementation, settings, policy)
            if implementation:
                raise ToolError(
                    f"tool '{row.name}': a rest implementation must be "
                    "'openapi:<url-or-path>#<operationId>', or empty with the endpoint in settings"
                )
            return self._rest(row, settings, policy)
        if not implementation:
            raise ToolError(f"tool '{row.name}': implementation is required for kind {kind.value}")
        if kind is ToolKind.PYTHON:
            return self._python(row, implementation, policy)
        language = str(settings.get("language", "python"))
        refusal = self.script_sandbox.refusal() or self.script_sandbox.language_refusal(language)
        if refusal is not None:
            raise ToolError(f"tool '{row.name}': {refusal}")
        return ScriptTool(
            self._definition(row, None, ""),
            row.implementation or "",
            policy,
            sandbox=self.script_sandbox,
            language=language,
            # The tool's own limits, under the deployment's ceilings: a row
            # stored before a ceiling was lowered is refused here.
            limits=self.script_sandbox.limits.for_tool(settings, row.name),
        )

    def _python(
        self, row: ToolRecord, implementation: str, policy: ExecutionPolicy
    ) -> ExecutableTool:
        if ":" not in implementation:
            if implementation in self._tools:
                # A tool registered in code (Pilothouse(tools=registry)): the
                # catalog row offers it to its actions, under the row's name
                # and the stricter of the two policies.
                return _Registered(self._tools[implementation], row, policy)
            registered = ", ".join(sorted(self._tools)) or "none"
            raise ToolError(
                f"tool '{row.name}': implementation '{implementation}' must name one function "
                "as 'package.module:function', or a tool registered in code "
                f"(Pilothouse(tools=registry)); registered: {registered}"
            )
        try:
            target = self._resolve(row, implementation)
        except CodeNotGrantedError as exc:
            # A row stored before the grant was withdrawn (or by anyone): the
            # tool stays visible and every call is a clear error, never run.
            return _NotGranted(self._definition(row, None, ""), exc)
        if not callable(target) or inspect.isclass(target):
            raise ToolError(
                f"tool '{row.name}': implementation '{implementation}' is not a function; "
                "a catalog row is one tool (register a service in code instead)"
            )
        return python_tool(
            cast(Callable[..., Any], target),
            name=row.name,
            description=row.description or None,
            policy=policy,
            parameters=row.input_schema or None,
            output_schema=row.output_schema,
        )

    def _resolve(self, row: ToolRecord, implementation: str) -> object:
        """The code a row's implementation names, under the registry's code policy."""
        try:
            return self.code.resolve(implementation)
        except ToolError as exc:
            raise type(exc)(f"tool '{row.name}': implementation: {exc}") from exc

    def _rest(
        self, row: ToolRecord, settings: Mapping[str, Any], policy: ExecutionPolicy
    ) -> RestTool:
        parameters: Mapping[str, Any] = row.input_schema or _path_schema(
            settings.get("url"), row.name
        )
        endpoint = endpoint_from_settings(settings, parameters, row.name)
        definition = self._definition(row, dict(parameters), "")
        return RestTool(
            definition, endpoint, policy, self.http, self.secrets.for_tenant(row.tenant)
        )

    async def _openapi(
        self,
        row: ToolRecord,
        implementation: str,
        settings: Mapping[str, Any],
        policy: ExecutionPolicy,
    ) -> RestTool:
        source, operation_id = parse_reference(implementation, row.name)
        if self.egress is not None and not source.startswith(("http://", "https://")):
            # A file path would read the server's own files for a tenant.
            raise ToolError(
                f"tool '{row.name}': this service reads OpenAPI documents from http(s) URLs "
                "only, not files"
            )
        async with self._documents_lock:
            document = self._documents.get(source)
            if document is None:
                document = await load_document(source, self.http)
                self._documents[source] = document
        headers = settings.get("headers", {})
        if not isinstance(headers, dict):
            raise ToolError(f"tool '{row.name}': settings.headers: must be a mapping")
        base_url = settings.get("base_url")
        timeout = settings.get("timeout")
        try:
            found = operation(
                document,
                operation_id,
                source=source,
                base_url=str(base_url) if base_url else None,
                headers={str(k): str(v) for k, v in cast(dict[Any, Any], headers).items()},
                timeout=_number(settings, "timeout", 0.0, row.name)
                if timeout is not None
                else None,
                max_response_bytes=int(
                    _number(settings, "max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, row.name)
                ),
            )
        except ToolError as exc:
            raise ToolError(f"tool '{row.name}': {exc}") from exc
        definition = self._definition(row, found.parameters, found.description)
        return RestTool(
            definition, found.endpoint, policy, self.http, self.secrets.for_tenant(row.tenant)
        )

    @staticmethod
    def _definition(
        row: ToolRecord, derived: dict[str, Any] | None, derived_description: str
    ) -> ToolDefinition:
        parameters = row.input_schema or derived or {"type": "object", "properties": {}}
        return ToolDefinition(
            name=row.name,
            description=row.description or derived_description,
            parameters=dict(parameters),
            output_schema=dict(row.output_schema) if row.output_schema is not None else None,
        )

    # -- lifecycle ----------------------------------------------------------

    async def aclose(self) -> None:
        """Close the HTTP client the registry made (not one passed in)."""
        if self._owns_http and self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


def _number(settings: Mapping[str, Any], key: str, default: float, tool_name: str) -> float:
    value = settings.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ToolError(f"tool '{tool_name}': settings.{key}: must be a positive number")
    return float(value)


def _path_schema(url: object, tool_name: str) -> dict[str, Any]:
    """The minimal schema of a hand-declared endpoint without one: its URL fields."""
    fields = template_fields(url, tool_name) if isinstance(url, str) else ()
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {name: {"type": "string"} for name in fields},
    }
    if fields:
        schema["required"] = list(fields)
    return schema


class _Registered:
    """A registered tool as a catalog row offers it: the row's name, the stricter policy."""

    def __init__(self, tool: ExecutableTool, row: ToolRecord, policy: ExecutionPolicy) -> None:
        self._tool = tool
        definition = tool.definition
        # The row's own description and schemas win, as for any catalog tool.
        self._definition = ToolDefinition(
            row.name,
            row.description or definition.description,
            dict(row.input_schema or definition.parameters),
            output_schema=row.output_schema or definition.output_schema,
        )
        authorized = ExecutionPolicy.AUTHORIZED in (policy, tool.policy)
        self._policy = ExecutionPolicy.AUTHORIZED if authorized else ExecutionPolicy.ALLOW

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def kind(self) -> ToolKind:
        return self._tool.kind

    @property
    def policy(self) -> ExecutionPolicy:
        return self._policy

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        return await self._tool.execute(arguments, context)


class _NotGranted:
    """A catalog row naming code the operator has not granted: every call is a clear error."""

    def __init__(self, definition: ToolDefinition, refusal: CodeNotGrantedError) -> None:
        self._definition = definition
        self._refusal = str(refusal)

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def kind(self) -> ToolKind:
        return ToolKind.PYTHON

    @property
    def policy(self) -> ExecutionPolicy:
        return ExecutionPolicy.ALLOW

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        del arguments, context
        return ToolResult(self._refusal, is_error=True, error_code="tool.code_not_granted")
