"""Model profiles: how the run loop must talk to a model, as data.

A provider's quirks (what its server refuses, what its small models do
badly) are flags of a :class:`ModelProfile` attached to the model spec, as
pydantic-ai attaches a ``ModelProfile`` to each model. The run loop reads
the flags and never asks which provider it talks to, so a scripted model
given the local profile behaves exactly as the embedded model does.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PROFILE", "LOCAL_PROFILE", "ModelProfile", "profile_for"]

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Final

from pilothouse.catalog._enums import ProviderKind


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What the run loop must know about a model beyond its catalog capabilities.

    Attributes:
        grammar_output: structured output is asked for as a JSON grammar
            (llama.cpp's ``json_object`` response format with a schema)
            rather than through native JSON mode or an output tool, which
            the server refuses.
        streams_with_tools: the model can stream a response while tools are
            offered (pilothouse's own llama.cpp chat handler can;
            llama-cpp-python's ``chatml-function-calling`` cannot:
            "Automatic streaming tool choice is not supported"); when False
            such calls are not streamed.
        tool_results_as_text: after one round of tool calls, the results go
            back as one user message and the next request offers no tools.
            Small models call the same tool again rather than read its
            result from a tool message (measured with SmolLM2).
        takes_parallel_tool_calls: the server reads OpenAI's
            ``parallel_tool_calls`` (llama-cpp-python's does not: the run
            loop keeps the first call of an answer instead).
    """

    grammar_output: bool = False
    streams_with_tools: bool = True
    tool_results_as_text: bool = False
    takes_parallel_tool_calls: bool = True


DEFAULT_PROFILE: Final = ModelProfile()
"""What a hosted model's API does: native output modes, streaming with tools."""

LOCAL_PROFILE: Final = ModelProfile(
    grammar_output=True,
    streams_with_tools=True,
    tool_results_as_text=True,
    takes_parallel_tool_calls=False,
)
"""The embedded llama.cpp server with pilothouse's chat handler, and its small model."""

LOCAL_FOREIGN_HANDLER_PROFILE: Final = replace(LOCAL_PROFILE, streams_with_tools=False)
"""The embedded server with another of llama-cpp-python's chat formats."""

_BY_KIND: Final[Mapping[ProviderKind, ModelProfile]] = {ProviderKind.LOCAL: LOCAL_PROFILE}

_OWN_HANDLER = "pilothouse"
"""The local server's default chat format (``providers/_llama_chat.py``)."""


def profile_for(kind: ProviderKind, settings: Mapping[str, object] | None = None) -> ModelProfile:
    """Return the profile of the models a provider kind serves.

    Args:
        kind: the provider's kind.
        settings: the provider's settings; a ``local`` provider's
            ``chat_format`` decides whether it streams while tools are offered.
    """
    if kind is ProviderKind.LOCAL and (settings or {}).get("chat_format", _OWN_HANDLER) != (
        _OWN_HANDLER
    ):
        return LOCAL_FOREIGN_HANDLER_PROFILE
    return _BY_KIND.get(kind, DEFAULT_PROFILE)
