"""The run loop: prompt assembly, options, model calls, structured output, events.

:class:`Runtime` holds what one process shares (model clients, compile
cache, tools, event hub, store, running turns); ``runtime.runner(tenant)``
is a :class:`Runner`, the tenant's view, which runs one turn of a
conversation end to end. Prompt parts come from :class:`PromptContributor`
implementations; turn events reach subscribers through :class:`EventHub`;
a turn ends in a :class:`TurnResult`.
"""

from pilothouse.runtime._compile import ActionCompiler, CompiledAction
from pilothouse.runtime._config import RuntimeConfig, RuntimeConfigError
from pilothouse.runtime._events import (
    EventHub,
    Question,
    ReturnedCall,
    StatusChanged,
    TextDelta,
    ThinkingDelta,
    ToolCallFinished,
    ToolCallRecord,
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
from pilothouse.runtime._shared import Runtime
from pilothouse.runtime._telemetry import ModelCallSpan, Telemetry

__all__ = [
    "DEFAULT_INSTRUCTION",
    "ActionCompiler",
    "CompiledAction",
    "EventHub",
    "ModelCallSpan",
    "PromptContext",
    "PromptContributor",
    "Question",
    "RetryPolicy",
    "ReturnedCall",
    "Runner",
    "Runtime",
    "RuntimeConfig",
    "RuntimeConfigError",
    "StatusChanged",
    "Telemetry",
    "TemplateError",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallFinished",
    "ToolCallRecord",
    "ToolCallRequested",
    "TurnEvent",
    "TurnFinished",
    "TurnResult",
    "TurnRetry",
    "default_contributors",
]
