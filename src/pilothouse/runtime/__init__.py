"""The run loop: prompt assembly, options, model calls, structured output, events.

:class:`Runner` runs one turn of a conversation end to end; prompt parts come
from :class:`PromptContributor` implementations; turn events reach
subscribers through :class:`EventHub`.
"""

from pilothouse.runtime._compile import ActionCompiler, CompiledAction
from pilothouse.runtime._config import RuntimeConfig, RuntimeConfigError
from pilothouse.runtime._events import (
    EventHub,
    StatusChanged,
    TextDelta,
    ThinkingDelta,
    ToolCallRequested,
    TurnEvent,
    TurnFinished,
    TurnResult,
    TurnRetry,
)
from pilothouse.runtime._prompt import (
    DEFAULT_INSTRUCTION,
    PromptContext,
    PromptContributor,
    TemplateError,
    default_contributors,
)
from pilothouse.runtime._retry import RetryPolicy
from pilothouse.runtime._runner import Runner
from pilothouse.runtime._telemetry import ModelCallSpan, Telemetry

__all__ = [
    "DEFAULT_INSTRUCTION",
    "ActionCompiler",
    "CompiledAction",
    "EventHub",
    "ModelCallSpan",
    "PromptContext",
    "PromptContributor",
    "RetryPolicy",
    "Runner",
    "RuntimeConfig",
    "RuntimeConfigError",
    "StatusChanged",
    "Telemetry",
    "TemplateError",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallRequested",
    "TurnEvent",
    "TurnFinished",
    "TurnResult",
    "TurnRetry",
    "default_contributors",
]
