"""The per-call runtime config: option overrides and turn switches.

A runtime config uses the same normalized option names as a stored
Configuration (``temperature``, ``max_tokens``, ...) plus a few switches for
one turn. It is validated before the turn touches the store, so a bad one
loses nothing.
"""

from __future__ import annotations

__all__ = ["RuntimeConfig", "RuntimeConfigError"]

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, cast

from pilothouse.catalog._enums import Cardinality, InstructionMode
from pilothouse.errors import PilothouseError
from pilothouse.providers import ModelOptions
from pilothouse.runtime._retrieval import RetrievalOverride, parse_override

if TYPE_CHECKING:
    from pilothouse.runtime._compile import CompiledAction
    from pilothouse.runtime._toolexec import OverrideRule

_SWITCHES = {
    "audit": "audit",
    "instruction": "instruction",
    "instruction_mode": "instruction_mode",
    "instructionMode": "instruction_mode",
    "stream": "stream",
    "toolParameterOverride": "overrides",
    "tool_parameter_override": "overrides",
    "output_schema": "output_schema",
    "client_tools": "client_tools",
    "tool_choice": "tool_choice",
    "parallel_tool_calls": "parallel_tool_calls",
    # Vantiq's submitPrompt ``tools: [schema]``: FunctionDescriptor schemas
    # {name, description, parameters} offered for this call, calls returned.
    "tools": "client_tools",
    "end_user": "end_user",
    "user_id": "user_id",
    "retrieval": "retrieval",
    "fail_on_denied": "fail_on_denied",
    "failOnDenied": "fail_on_denied",
}

_OPTION_NAMES = frozenset(f.name for f in fields(ModelOptions))
"""The model options a runtime config may set (``ModelOptions`` fields)."""

# OpenAI's rule for function names, which every provider accepts.
_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


class RuntimeConfigError(PilothouseError):
    """A runtime config names an unknown key or has a bad value."""


def _kwargs_options(value: object) -> dict[str, Any]:
    from pilothouse.catalog._vantiq import kwargs_options

    if not isinstance(value, dict):
        raise RuntimeConfigError(
            'runtime config: model_kwargs must be an object, e.g. {"maxTokenCount": 256}'
        )
    options, problems = kwargs_options(cast(dict[str, Any], value), "model_kwargs")
    if problems:
        raise RuntimeConfigError(f"runtime config: {'; '.join(problems)}")
    return options


def _split(raw: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A runtime config's model options and its switches, each under its one name."""
    options: dict[str, Any] = {}
    switches: dict[str, Any] = {}
    kwargs: object = None
    for key, value in raw.items():
        if key in _SWITCHES:
            if _SWITCHES[key] in switches:
                # Two spellings of one switch: neither may silently win.
                raise RuntimeConfigError(
                    f"runtime config: '{key}' and another spelling of the same "
                    f"switch ('{_SWITCHES[key]}') are both given; keep one"
                )
            switches[_SWITCHES[key]] = value
        elif key in _OPTION_NAMES:
            options[key] = value
        elif key == "model_kwargs":
            # The Vantiq guide's runtimeConfig has "the same syntax" as the
            # model's configuration: {"model_kwargs": {"maxTokenCount": 256}}.
            kwargs = value
        else:
            known = sorted({*_OPTION_NAMES, *_SWITCHES, "model_kwargs"})
            raise RuntimeConfigError(
                f"runtime config: unknown key '{key}' (known: {', '.join(known)})"
            )
    if kwargs is not None:
        for option, kwarg in _kwargs_options(kwargs).items():
            if option in options and options[option] != kwarg:
                raise RuntimeConfigError(
                    f"runtime config: {option} and model_kwargs both set {option}; keep one"
                )
            options[option] = kwarg
    return options, switches


@dataclass(frozen=True)
class RuntimeConfig:
    """Options and switches for one turn.

    Attributes:
        options: overrides of the stored configuration.
        audit: record this turn's timeline (None: the conversation's setting).
        instruction: the caller's instruction, combined with the default.
        instruction_mode: replace / append / prepend.
        stream: ask for a streamed model call even without subscribers.
        overrides: tool parameter overrides (``toolParameterOverride``).
        output_schema: a JSON schema this turn's answer must match, for an
            action without an output schema of its own (an OpenAI client's
            ``response_format``).
        client_tools: tools ``(name, description, parameters schema)``
            offered for this turn only, whose calls go back to the caller
            (an OpenAI client's ``tools``).
        tool_choice: the tools the model must call from on this turn's first
            model call: empty for the model's own choice, every offered tool
            (``"required"``) or one named tool (OpenAI's ``tool_choice``).
        fail_on_denied: end the turn ``FA`` (error ``tool.exec.denied: ...``)
            when the authorizer or the policy denies a tool call, as Vantiq
            does; by default the model is told and the turn goes on.
        end_user: who the caller acts for (an OpenAI client's ``user``),
            recorded with the user's message; never a memory id.
        user_id: the end user this turn serves: a ``SCOPED`` memory strategy
            retrieves and extracts that user's memory (none without it).
        retrieval: this turn's top-K, threshold and filters for the action's
            document collections (``{"top_k": 6, "similarity_threshold": 0.4,
            "filters": {...}, "enabled": true}``).
    """

    options: ModelOptions = ModelOptions()
    audit: bool | None = None
    instruction: str | None = None
    instruction_mode: InstructionMode = InstructionMode.APPEND
    stream: bool | None = None
    overrides: tuple[OverrideRule, ...] = ()
    output_schema: dict[str, Any] | None = None
    client_tools: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    tool_choice: ToolChoice = ()
    parallel_tool_calls: bool = True
    end_user: str | None = None
    user_id: str | None = None
    retrieval: RetrievalOverride = RetrievalOverride()
    fail_on_denied: bool = False

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> RuntimeConfig:
        """Validate a runtime-config mapping.

        Raises:
            RuntimeConfigError: an unknown key, or a value of the wrong type,
                named in the message.
        """
        if not raw:
            return cls()
        options, switches = _split(raw)
        try:
            # Most configs hold only switches (a served call's "stream"): no
            # options to validate, and the defaults are what parsing {} gives.
            parsed_options = ModelOptions.parse(options) if options else ModelOptions()
        except ValueError as exc:
            raise RuntimeConfigError(f"runtime config: {exc}") from None
        for name in ("audit", "stream", "fail_on_denied", "parallel_tool_calls"):
            if name in switches and not isinstance(switches[name], bool):
                raise RuntimeConfigError(f"runtime config: '{name}' must be true or false")
        end_user = switches.get("end_user")
        if end_user is not None and (not isinstance(end_user, str) or len(end_user) > 256):
            raise RuntimeConfigError("runtime config: 'end_user' must be a string of 256 or fewer")
        instruction = switches.get("instruction")
        if instruction is not None and not isinstance(instruction, str):
            raise RuntimeConfigError("runtime config: 'instruction' must be a string")
        mode_value = switches.get("instruction_mode", InstructionMode.APPEND.value)
        try:
            mode = InstructionMode(mode_value)
        except ValueError:
            raise RuntimeConfigError(
                f"runtime config: instruction mode '{mode_value}' is not one of "
                "replace, append, prepend"
            ) from None
        user_id = switches.get("user_id")
        if user_id is not None and (
            not isinstance(user_id, str) or not user_id.strip() or len(user_id) > 128
        ):
            raise RuntimeConfigError(
                "runtime config: 'user_id' must be a string of 1 to 128 characters"
            )
        from pilothouse.runtime._toolexec import OverrideRule

        retrieval = RetrievalOverride()
        if "retrieval" in switches:
            try:
                retrieval = parse_override(switches["retrieval"])
            except ValueError as exc:
                raise RuntimeConfigError(f"runtime config: retrieval: {exc}") from None

        overrides = (
            tuple(OverrideRule.parse(switches["overrides"])) if "overrides" in switches else ()
        )
        return cls(
            overrides=overrides,
            options=parsed_options,
            audit=switches.get("audit"),
            instruction=instruction,
            instruction_mode=mode,
            stream=switches.get("stream"),
            output_schema=_output_schema(switches.get("output_schema")),
            client_tools=_client_tools(switches.get("client_tools")),
            tool_choice=_tool_choice(switches.get("tool_choice")),
            parallel_tool_calls=switches.get("parallel_tool_calls", True),
            end_user=end_user,
            user_id=user_id,
            retrieval=retrieval,
            fail_on_denied=switches.get("fail_on_denied", False),
        )

    def shape(self, compiled: CompiledAction) -> CompiledAction:
        """Return ``compiled`` with this turn's output schema and client tools.

        Raises:
            RuntimeConfigError: an output schema for an action that has its own.
        """
        if self.tool_choice:
            self._check_choice(compiled)
        if self.output_schema is None and not self.client_tools:
            return compiled
        changes: dict[str, Any] = {}
        if self.client_tools:
            taken = (
                {name for name, _, _ in compiled.tools}
                | {t.name for t in compiled.tool_rows}
                | {t.definition.name for t in compiled.local_tools}
            )
            for name, _, _ in self.client_tools:
                if name in taken:
                    raise RuntimeConfigError(
                        f"runtime config: client tool '{name}' has the name of one of the "
                        f"action's own tools; rename it"
                    )
            changes["tools"] = (*compiled.tools, *self.client_tools)
        if self.output_schema is not None:
            if compiled.output_schema is not None and compiled.output_schema != self.output_schema:
                raise RuntimeConfigError(
                    f"runtime config: action '{compiled.action_code}' has its own output "
                    "schema; a turn cannot replace it (drop output_schema, or use an action "
                    "without one)"
                )
            from pilothouse.runtime._schema_patterns import schema_validator

            block = json.dumps(self.output_schema, indent=2, sort_keys=True)
            changes.update(
                output_schema=self.output_schema,
                output_cardinality=Cardinality.ITEM,
                _validator=schema_validator(self.output_schema),
                # Models without a JSON mode or tools read the schema here.
                prompt_parts=(
                    *compiled.prompt_parts,
                    ("schemas", f"Output data structure:\n{block}"),
                ),
            )
        return replace(compiled, **changes)

    def _check_choice(self, compiled: CompiledAction) -> None:
        # What the turn will offer, as far as it is known before the turn:
        # an MCP server's tools are listed only when the turn starts (the
        # call itself then checks the name).
        if compiled.mcp_clients:
            return
        from pilothouse.runtime._toolset import ASK_USER, USE_SKILL

        offered = [name for name, _, _ in (*compiled.tools, *self.client_tools)]
        offered += [t.name for t in compiled.tool_rows]
        offered += [t.definition.name for t in compiled.local_tools]
        offered += [ASK_USER] if compiled.ask_user else []
        offered += [USE_SKILL] if compiled.skills else []
        if not offered:
            raise RuntimeConfigError(
                "runtime config: tool_choice forces a tool call, but the turn offers no tools; "
                "send tools (client_tools), or drop tool_choice"
            )
        for name in self.tool_choice:
            if name != REQUIRED and name not in offered:
                raise RuntimeConfigError(
                    f"runtime config: tool_choice names '{name}', which is not among the "
                    f"turn's tools ({', '.join(sorted(offered))}); name one of them"
                )


def _output_schema(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RuntimeConfigError("runtime config: 'output_schema' must be a JSON schema object")
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    schema = cast(dict[str, Any], value)
    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        raise RuntimeConfigError(
            f"runtime config: 'output_schema' is not a valid JSON schema: {exc.message}"
        ) from None
    if schema.get("type", "object") != "object":
        raise RuntimeConfigError(
            'runtime config: \'output_schema\' must describe an object ("type": "object")'
        )
    return schema


REQUIRED = "*"
"""``tool_choice``'s entry for "any offered tool" (a name no tool can have)."""

ToolChoice = tuple[str, ...]
"""The tools a turn's first model call must call from: () is the model's
choice, ``(REQUIRED,)`` any offered tool, else the one named tool."""


def _tool_choice(value: Any) -> ToolChoice:
    # OpenAI's forms: "auto", "required", {"type": "function", "function":
    # {"name": ...}}; "any" is Anthropic's and LangChain's word for required.
    if value is None or value == "auto":
        return ()
    if value in ("required", "any"):
        return (REQUIRED,)
    name: Any = None
    if isinstance(value, dict):
        choice = cast(dict[str, Any], value)
        function: Any = choice.get("function")
        name = cast(dict[str, Any], function).get("name") if isinstance(function, dict) else None
    if isinstance(name, str) and _TOOL_NAME.match(name):
        return (name,)
    if value == "none":
        raise RuntimeConfigError(
            "runtime config: tool_choice 'none' is not taken here; offer no client_tools "
            "for a turn without them"
        )
    raise RuntimeConfigError(
        "runtime config: tool_choice must be 'auto', 'required' or "
        '{"type": "function", "function": {"name": "<a tool of the turn>"}}'
    )


def _client_tools(value: Any) -> tuple[tuple[str, str, dict[str, Any]], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise RuntimeConfigError("runtime config: 'client_tools' must be a list")
    tools: list[tuple[str, str, dict[str, Any]]] = []
    seen: set[str] = set()
    for index, item in enumerate(cast(list[Any], value)):
        where = f"runtime config: client_tools[{index}]"
        if not isinstance(item, dict):
            raise RuntimeConfigError(f"{where} must be an object {{name, description, parameters}}")
        tool = cast(dict[str, Any], item)
        unknown = set(tool) - {"name", "description", "parameters"}
        if unknown:
            raise RuntimeConfigError(
                f"{where}: unknown key '{sorted(unknown)[0]}' "
                "(known: description, name, parameters)"
            )
        name, description = tool.get("name"), tool.get("description") or ""
        if not isinstance(name, str) or not _TOOL_NAME.match(name):
            raise RuntimeConfigError(f"{where}: 'name' must match [a-zA-Z0-9_-]{{1,64}}")
        if name in seen:
            raise RuntimeConfigError(f"{where}: tool '{name}' is named twice")
        seen.add(name)
        if not isinstance(description, str):
            raise RuntimeConfigError(f"{where}: 'description' must be a string")
        empty: dict[str, Any] = {"type": "object", "properties": {}}
        parameters: Any = tool.get("parameters") or empty
        if not isinstance(parameters, dict):
            raise RuntimeConfigError(f"{where}: 'parameters' must be a JSON schema object")
        tools.append((name, description, cast(dict[str, Any], parameters)))
    return tuple(tools)
