"""What one script tool run may use, and the deployment's ceilings on it.

The operator sets ceilings (``Settings.script_max_*``); a tool's own
settings (``settings.timeout``, ``settings.max_output_bytes``,
``settings.max_processes``, ``settings.max_memory_mib``,
``settings.max_cpu_seconds``, ``settings.max_tmp_mib``) may lower them,
never raise them: a value above its ceiling is refused when the catalog is
written and, for a row stored before the ceiling was lowered, when the tool
is built.
"""

from __future__ import annotations

__all__ = ["DEFAULT_SCRIPT_TIMEOUT", "ScriptLimits"]

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Self

from pilothouse.tools._base import ToolError

if TYPE_CHECKING:
    from pilothouse.settings import Settings

DEFAULT_SCRIPT_TIMEOUT = 10.0
"""Seconds a script may run when neither its settings nor the ceiling say less."""

_DEFAULT_OUTPUT_BYTES = 64 * 1024
"""Bytes of output kept when the tool's settings do not say (the REST tools' default)."""


@dataclass(frozen=True)
class _Field:
    """One limit: its tool setting, its ceiling's variable, its unit and whether it is whole."""

    attribute: str
    setting: str
    variable: str
    unit: str
    whole: bool


_FIELDS = (
    _Field("timeout", "timeout", "PILOTHOUSE_SCRIPT_MAX_TIMEOUT", "s", False),
    _Field("output_bytes", "max_output_bytes", "PILOTHOUSE_SCRIPT_MAX_OUTPUT_BYTES", "bytes", True),
    _Field("processes", "max_processes", "PILOTHOUSE_SCRIPT_MAX_PROCESSES", "processes", True),
    _Field("memory_mib", "max_memory_mib", "PILOTHOUSE_SCRIPT_MAX_MEMORY_MIB", "MiB", True),
    _Field("cpu_seconds", "max_cpu_seconds", "PILOTHOUSE_SCRIPT_MAX_CPU_SECONDS", "s", True),
    _Field("tmp_mib", "max_tmp_mib", "PILOTHOUSE_SCRIPT_MAX_TMP_MIB", "MiB", True),
)


def _number(value: object, whole: bool) -> float | None:
    """``value`` as a positive number (whole when ``whole``), or None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    if whole and value != int(value):
        return None
    return float(value)


def _shown(value: float) -> str:
    """A number as written: whole ones without a fraction or an exponent."""
    return str(int(value)) if value == int(value) else f"{value:g}"


@dataclass(frozen=True)
class ScriptLimits:
    """What one script run may use; as the deployment's ceilings, the most any tool may ask.

    Attributes:
        timeout: wall-clock seconds before the script and everything it
            started are killed.
        output_bytes: bytes it may print on stdout (and on stderr); at the
            first byte past it the script is killed.
        processes: processes and threads it may run at once, itself included.
        memory_mib: MiB of memory each of its processes may allocate.
        cpu_seconds: CPU seconds each of its processes may use.
        tmp_mib: MiB it may write into its ``/tmp`` (and ``/dev/shm``); in
            trusted mode, the size of any one file it writes.
    """

    timeout: float = 60.0
    output_bytes: int = 1024 * 1024
    processes: int = 64
    memory_mib: int = 512
    cpu_seconds: int = 30
    tmp_mib: int = 64

    @classmethod
    def ceilings(cls, settings: Settings) -> Self:
        """The ceilings a deployment's ``Settings`` (its ``script_max_*`` fields) set."""
        return cls(
            timeout=settings.script_max_timeout,
            output_bytes=settings.script_max_output_bytes,
            processes=settings.script_max_processes,
            memory_mib=settings.script_max_memory_mib,
            cpu_seconds=settings.script_max_cpu_seconds,
            tmp_mib=settings.script_max_tmp_mib,
        )

    def problems(self, settings: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Each limit in a script tool's ``settings`` that these ceilings refuse.

        Args:
            settings: the tool row's ``settings``.

        Returns:
            ``(field, rule)`` pairs, the field as ``settings.<name>`` and the
            rule naming the ceiling and the variable that sets it.
        """
        found: list[tuple[str, str]] = []
        for field in _FIELDS:
            if field.setting not in settings:
                continue
            value = _number(settings[field.setting], field.whole)
            kind = "a positive whole number" if field.whole else "a positive number"
            if value is None:
                found.append((f"settings.{field.setting}", f"must be {kind} ({field.unit})"))
                continue
            ceiling = getattr(self, field.attribute)
            if value > ceiling:
                found.append(
                    (
                        f"settings.{field.setting}",
                        f"{_shown(value)} is above this deployment's ceiling of "
                        f"{_shown(ceiling)} {field.unit} ({field.variable}); write at most "
                        f"{_shown(ceiling)}, or ask the operator to raise the ceiling",
                    )
                )
        return found

    def for_tool(self, settings: Mapping[str, Any], tool_name: str) -> ScriptLimits:
        """The limits one tool runs with: its own settings, under these ceilings.

        A limit it does not set is the ceiling, except the timeout (10 s)
        and the output (64 KiB), whose defaults are lower.

        Raises:
            ToolError: a setting is not a positive number or is above its
                ceiling (a row stored before the ceiling was lowered).
        """
        problems = self.problems(settings)
        if problems:
            field, rule = problems[0]
            raise ToolError(f"tool '{tool_name}': {field}: {rule}")
        chosen: dict[str, Any] = {
            "timeout": min(DEFAULT_SCRIPT_TIMEOUT, self.timeout),
            "output_bytes": min(_DEFAULT_OUTPUT_BYTES, self.output_bytes),
        }
        for field in _FIELDS:
            if field.setting in settings:
                value = float(settings[field.setting])
                chosen[field.attribute] = int(value) if field.whole else value
        return replace(self, **chosen)

    def describe(self) -> str:
        """One line for logs and errors: every limit with its unit."""
        return (
            f"{self.processes} processes, {self.memory_mib} MiB memory per process, "
            f"{self.cpu_seconds} s CPU per process, {self.tmp_mib} MiB /tmp, "
            f"{_shown(self.timeout)} s wall time, {self.output_bytes} bytes output"
        )
