"""What a test of an application built on pilothouse needs (see ``docs/testing.md``).

- :class:`ScriptedModel` answers from a script (:class:`Reply`,
  :class:`ToolCall`, :class:`Calls`, :class:`Json`, :class:`Fail`) and
  records what it was asked, so the whole run loop is tested without a
  provider.
- :func:`override` runs every Pilothouse on a scripted model inside a block.
- :func:`block_model_requests` refuses real model calls (a test session's
  guard), :func:`allow_model_requests` lets them through inside a block;
  a refused call raises :class:`ModelRequestsBlockedError`.
- :class:`CatalogBuilder` builds a catalog in code and imports it, without
  YAML files.
"""

from __future__ import annotations

__all__ = [
    "Calls",
    "CatalogBuilder",
    "Fail",
    "Json",
    "ModelRequestsBlockedError",
    "Reply",
    "ScriptedModel",
    "ScriptedRequest",
    "Step",
    "ToolCall",
    "allow_model_requests",
    "block_model_requests",
    "override",
]

from typing import TYPE_CHECKING, Any

from pilothouse.providers._guard import ModelRequestsBlockedError
from pilothouse.testing._override import allow_model_requests, block_model_requests, override
from pilothouse.testing._scripted import (
    Calls,
    Fail,
    Json,
    Reply,
    ScriptedModel,
    ScriptedRequest,
    Step,
    ToolCall,
)

if TYPE_CHECKING:
    from pilothouse.testing._catalog import CatalogBuilder


def __getattr__(name: str) -> Any:
    # The builder needs the catalog tooling (YAML, JSON Schema); a test that
    # only scripts a model does not load it, nor does the process it runs.
    if name == "CatalogBuilder":
        from pilothouse.testing._catalog import CatalogBuilder

        return CatalogBuilder
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
