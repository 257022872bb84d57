"""The per-call runtime config: option overrides and turn switches.

A runtime config uses the same normalized option names as a stored
Configuration (``temperature``, ``max_tokens``, ...) plus a few switches for
one turn. It is validated before the turn touches the store, so a bad one
loses nothing.
"""

from __future__ import annotations

__all__ = ["RuntimeConfig", "RuntimeConfigError"]

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from pilothouse.catalog._enums import InstructionMode
from pilothouse.errors import PilothouseError
from pilothouse.providers import ModelOptions

if TYPE_CHECKING:
    from pilothouse.runtime._toolexec import OverrideRule

_SWITCHES = {
    "audit": "audit",
    "instruction": "instruction",
    "instruction_mode": "instruction_mode",
    "instructionMode": "instruction_mode",
    "stream": "stream",
    "toolParameterOverride": "overrides",
    "tool_parameter_override": "overrides",
}


class RuntimeConfigError(PilothouseError):
    """A runtime config names an unknown key or has a bad value."""


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
    """

    options: ModelOptions = ModelOptions()
    audit: bool | None = None
    instruction: str | None = None
    instruction_mode: InstructionMode = InstructionMode.APPEND
    stream: bool | None = None
    overrides: tuple[OverrideRule, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> RuntimeConfig:
        """Validate a runtime-config mapping.

        Raises:
            RuntimeConfigError: an unknown key, or a value of the wrong type,
                named in the message.
        """
        if not raw:
            return cls()
        option_names = {f.name for f in fields(ModelOptions)}
        options: dict[str, Any] = {}
        switches: dict[str, Any] = {}
        for key, value in raw.items():
            if key in _SWITCHES:
                switches[_SWITCHES[key]] = value
            elif key in option_names:
                options[key] = value
            else:
                known = sorted({*option_names, *_SWITCHES})
                raise RuntimeConfigError(
                    f"runtime config: unknown key '{key}' (known: {', '.join(known)})"
                )
        try:
            parsed_options = ModelOptions.parse(options)
        except ValueError as exc:
            raise RuntimeConfigError(f"runtime config: {exc}") from None
        for name in ("audit", "stream"):
            if name in switches and not isinstance(switches[name], bool):
                raise RuntimeConfigError(f"runtime config: '{name}' must be true or false")
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
        from pilothouse.runtime._toolexec import OverrideRule

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
        )
