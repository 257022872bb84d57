"""Python callables as tools.

A function becomes a tool with its JSON schema generated from its type hints
and its Google-style docstring: the summary describes the tool, the ``Args:``
section describes each parameter. The same pydantic model that produced the
schema validates and coerces the model's arguments before the call, so the
schema the model sees and the check the call gets can never drift apart.

A parameter annotated :class:`ToolContext` receives the call's context and is
left out of the schema. Sync functions run in a worker thread so a slow one
never blocks the event loop; coroutine functions are awaited.
"""

from __future__ import annotations

__all__ = [
    "PythonTool",
    "ToolMarker",
    "python_tool",
    "service_functions",
    "tool",
]

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar, cast, get_type_hints, overload

import anyio.to_thread
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic.fields import FieldInfo
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticSerializationError, to_jsonable_python

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolError, ToolResult

F = TypeVar("F", bound=Callable[..., Any])

MARKER_ATTRIBUTE = "__pilothouse_tool__"
"""Attribute :func:`tool` sets on a function it marks."""


@dataclass(frozen=True)
class ToolMarker:
    """What :func:`tool` recorded about a function.

    Attributes:
        name: the tool name, or None for the function's name.
        description: the description, or None for the docstring's.
        policy: the execution policy, or None for the registry's default.
    """

    name: str | None = None
    description: str | None = None
    policy: ExecutionPolicy | None = None


@overload
def tool(func: F, /) -> F: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    policy: ExecutionPolicy | str | None = None,
) -> Callable[[F], F]: ...


def tool(
    func: F | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    policy: ExecutionPolicy | str | None = None,
) -> F | Callable[[F], F]:
    """Mark a function (or method) as a tool; usable bare or with options.

    The function is returned unchanged, so it stays callable as before. When
    a module or class is registered as a service, only its marked functions
    become tools if any is marked.

    Args:
        func: the function, when used as a bare ``@tool``.
        name: the tool name the model sees; default the function's name.
        description: what the tool does; default the docstring's summary.
        policy: ``allow`` or ``authorized``; default the registry's.

    Returns:
        The function itself, or a decorator when called with options.
    """
    marker = ToolMarker(
        name=name,
        description=description,
        policy=ExecutionPolicy(policy) if policy is not None else None,
    )

    def mark(target: F) -> F:
        setattr(target, MARKER_ATTRIBUTE, marker)
        return target

    return mark(func) if func is not None else mark


def marker_of(func: object) -> ToolMarker | None:
    """Return the :class:`ToolMarker` of a function marked by :func:`tool`, else None.

    Args:
        func: a function or bound method.

    Returns:
        The marker, when there is one.
    """
    found = getattr(func, MARKER_ATTRIBUTE, None)
    return found if isinstance(found, ToolMarker) else None


class _ToolJsonSchema(GenerateJsonSchema):
    """JSON schema generation without per-field titles.

    Titles repeat the property name and only cost the model tokens.
    """

    def field_title_should_be_set(self, schema: Any) -> bool:
        del schema
        return False


@dataclass(frozen=True)
class _Signature:
    """What calling a function needs beyond its arguments model."""

    positional: tuple[str, ...]
    keyword: tuple[str, ...]
    context_parameter: str | None


def _docstring(func: Callable[..., Any]) -> tuple[str | None, dict[str, str]]:
    # Imported here: docstrings are parsed once per registration, not per import.
    import docstring_parser

    doc = inspect.getdoc(func)
    if not doc:
        return None, {}
    parsed = docstring_parser.parse(doc, style=docstring_parser.DocstringStyle.GOOGLE)
    params = {p.arg_name: p.description for p in parsed.params if p.description}
    return (parsed.description or "").strip() or None, params


def _parameters(
    func: Callable[..., Any], qualname: str
) -> tuple[dict[str, Any], _Signature, dict[str, Any]]:
    """Build the pydantic fields of ``func``'s parameters.

    Returns:
        The fields for ``create_model``, how to call, and the type hints.
    """
    try:
        signature = inspect.signature(func)
        hints = get_type_hints(func, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolError(f"tool '{qualname}': cannot read its signature: {exc}") from exc
    _, descriptions = _docstring(func)
    fields: dict[str, Any] = {}
    positional: list[str] = []
    keyword: list[str] = []
    context_parameter: str | None = None
    for name, param in signature.parameters.items():
        annotation = hints.get(name, Any)
        if annotation is ToolContext:
            context_parameter = name
            continue
        if param.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolError(
                f"tool '{qualname}': parameter '{name}' is *args or **kwargs, "
                "which a JSON schema cannot describe; declare each parameter"
            )
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (annotation, FieldInfo(default=default, description=descriptions.get(name)))
        (positional if param.kind is inspect.Parameter.POSITIONAL_ONLY else keyword).append(name)
    return fields, _Signature(tuple(positional), tuple(keyword), context_parameter), hints


def _output_schema(hints: Mapping[str, Any]) -> dict[str, Any] | None:
    annotation = hints.get("return", Any)
    if annotation is Any or annotation is None or annotation is type(None):
        return None
    try:
        return TypeAdapter(annotation).json_schema(
            mode="serialization", schema_generator=_ToolJsonSchema
        )
    except Exception:
        # Any type pydantic cannot describe simply has no output schema.
        return None


def _dump_result(value: Any) -> str:
    """Turn a return value into the text the model reads."""
    if isinstance(value, str):
        # A string is already text: quoting it as JSON would only add noise.
        return value
    return json.dumps(to_jsonable_python(value), ensure_ascii=False)


class PythonTool:
    """A Python callable the run loop can call.

    Build one with :func:`python_tool`; it satisfies
    :class:`~pilothouse.tools.ExecutableTool`.
    """

    def __init__(
        self,
        func: Callable[..., Any],
        definition: ToolDefinition,
        policy: ExecutionPolicy,
        arguments_model: type[BaseModel],
        signature: _Signature,
    ) -> None:
        self._func = func
        self._definition = definition
        self._policy = policy
        self._arguments_model = arguments_model
        self._signature = signature
        self._is_async = inspect.iscoroutinefunction(func)

    @property
    def definition(self) -> ToolDefinition:
        """What the model sees."""
        return self._definition

    @property
    def kind(self) -> ToolKind:
        """Always :attr:`ToolKind.PYTHON`."""
        return ToolKind.PYTHON

    @property
    def policy(self) -> ExecutionPolicy:
        """Whether it may run without an authorizer's yes."""
        return self._policy

    @property
    def function(self) -> Callable[..., Any]:
        """The wrapped callable."""
        return self._func

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Validate and coerce ``arguments``, call the function, report the outcome.

        Args:
            arguments: the model's arguments.
            context: where the call happens.

        Returns:
            The JSON (or plain string) result; invalid arguments as
            ``tool.args.invalid`` and a raised exception as
            ``tool.exec.error``, both with ``is_error``.
        """
        try:
            validated = self._arguments_model.model_validate(dict(arguments))
        except ValidationError as exc:
            return ToolResult(
                content=f"invalid arguments for {self._definition.name}: {_brief(exc)}",
                is_error=True,
                error_code="tool.args.invalid",
            )
        values = {name: getattr(validated, name) for name in self._arguments_model.model_fields}
        args = [values.pop(name) for name in self._signature.positional]
        if self._signature.context_parameter is not None:
            values[self._signature.context_parameter] = context
        try:
            if self._is_async:
                value = await self._func(*args, **values)
            else:
                call = functools.partial(self._func, *args, **values)
                value = await anyio.to_thread.run_sync(call)
        except Exception as exc:
            # The tool's own failure is an outcome for the model to read, not a crash.
            return ToolResult(
                content=f"{type(exc).__name__}: {exc}", is_error=True, error_code="tool.exec.error"
            )
        try:
            content = _dump_result(value)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            return ToolResult(
                content=f"the result of {self._definition.name} is not serializable: {exc}",
                is_error=True,
                error_code="tool.exec.error",
            )
        return ToolResult(content=content, data=value)


def _brief(exc: ValidationError) -> str:
    """One line per broken rule, naming the argument, without pydantic's doc links."""
    parts: list[str] = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def python_tool(
    func: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    policy: ExecutionPolicy | str | None = None,
    parameters: Mapping[str, Any] | None = None,
    output_schema: Mapping[str, Any] | None = None,
) -> PythonTool:
    """Build a :class:`PythonTool` from a function or bound method.

    Explicit arguments win over the :func:`tool` marker, which wins over
    what the function itself says (its name and docstring).

    Args:
        func: the callable.
        name: the tool name; default the marker's, else the function's name.
        description: default the marker's, else the docstring's description.
        policy: default the marker's, else ``allow``.
        parameters: a JSON schema to show the model instead of the generated
            one (a catalog row's ``input_schema``); arguments are still
            validated by the function's own signature.
        output_schema: a JSON schema of the result to declare instead of the
            one generated from the return annotation.

    Returns:
        The tool.

    Raises:
        ToolError: the function cannot be described (``*args``, unresolvable
            annotations, types pydantic cannot validate).
    """
    marker = marker_of(func) or ToolMarker()
    qualname = getattr(func, "__qualname__", repr(func))
    tool_name = name or marker.name or getattr(func, "__name__", None)
    if not tool_name:
        raise ToolError(f"tool '{qualname}': it has no __name__; give it a name")
    fields, signature, hints = _parameters(func, qualname)
    try:
        model = create_model(
            f"{tool_name}_arguments",
            __config__=ConfigDict(arbitrary_types_allowed=False),
            **fields,
        )
        schema = model.model_json_schema(schema_generator=_ToolJsonSchema)
    except Exception as exc:
        # pydantic raises several unrelated types for annotations it cannot handle.
        raise ToolError(f"tool '{tool_name}': cannot build its argument schema: {exc}") from exc
    schema.pop("title", None)
    doc_description, _ = _docstring(func)
    definition = ToolDefinition(
        name=tool_name,
        description=description or marker.description or doc_description or "",
        parameters=dict(parameters) if parameters else schema,
        output_schema=dict(output_schema) if output_schema is not None else _output_schema(hints),
    )
    chosen = policy if policy is not None else marker.policy
    return PythonTool(
        func,
        definition,
        ExecutionPolicy(chosen) if chosen is not None else ExecutionPolicy.ALLOW,
        model,
        signature,
    )


def _public_callables(owner: object, candidates: Mapping[str, object]) -> list[Callable[..., Any]]:
    found: list[Callable[..., Any]] = []
    for attr_name in candidates:
        if attr_name.startswith("_"):
            continue
        bound = getattr(owner, attr_name)
        if callable(bound) and not inspect.isclass(bound):
            found.append(cast(Callable[..., Any], bound))
    return found


def service_functions(target: ModuleType | type[Any] | object) -> list[Callable[..., Any]]:
    """List the functions a module, class or instance offers as a service of tools.

    A module offers the public functions defined in it (not the ones it
    imports); a class is instantiated with no arguments and offers its
    public methods, as does an instance. When any of them is marked with
    :func:`tool`, only the marked ones are offered, so helpers stay private
    without renaming them.

    Args:
        target: a module, a class or an instance.

    Returns:
        Callables (bound methods for classes and instances), in definition order.

    Raises:
        ToolError: the class cannot be instantiated without arguments.
    """
    if isinstance(target, ModuleType):
        module_name = target.__name__
        functions = {
            attr_name: value
            for attr_name, value in vars(target).items()
            if inspect.isfunction(value) and value.__module__ == module_name
        }
        found = _public_callables(target, functions)
    else:
        if inspect.isclass(target):
            try:
                instance: object = target()
            except TypeError as exc:
                raise ToolError(
                    f"tool service '{target.__qualname__}' cannot be instantiated "
                    f"without arguments: {exc}"
                ) from exc
        else:
            instance = target
        members: dict[str, object] = {}
        # Base classes first, so a subclass's override keeps the base's position.
        for klass in reversed(inspect.getmro(type(instance))[:-1]):
            for key, value in cast(dict[str, object], vars(klass)).items():
                if inspect.isfunction(value) or isinstance(value, staticmethod | classmethod):
                    members[key] = value
        found = _public_callables(instance, members)
    marked = [func for func in found if marker_of(func) is not None]
    return marked or found
