"""The test hooks of the model factory: a model override, and a guard on real calls.

:class:`~pilothouse.providers.ModelFactory` asks here first on every call.
Both hooks are driven by :mod:`pilothouse.testing`:

- ``override(model=...)`` answers every catalog model with one model (a
  :class:`~pilothouse.testing.ScriptedModel`) inside a block. The override is
  a context variable, as ``Agent.override`` in pydantic-ai: it holds in the
  block and in the tasks started from it, and nowhere else, so tests running
  side by side never see each other's model.
- The guard refuses a real model call while model requests are blocked. It
  reads pydantic-ai's process-wide switch ``pydantic_ai.models.
  ALLOW_MODEL_REQUESTS``, the one pydantic-ai's own provider models obey, so
  one switch covers both and a test suite that already sets it needs nothing
  more.
"""

from __future__ import annotations

__all__ = ["ModelRequestsBlockedError", "check_model_requests", "model_override"]

from contextvars import ContextVar
from typing import TYPE_CHECKING

from pilothouse.catalog._enums import ProviderKind
from pilothouse.errors import PilothouseError

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from pilothouse.providers._spec import ModelSpec

model_override: ContextVar[Model | None] = ContextVar("pilothouse_model_override", default=None)
"""The model that answers every catalog model in the current context, if any."""


class ModelRequestsBlockedError(PilothouseError):
    """A real model was about to be called while model requests are blocked (in tests)."""

    def __init__(self, spec: ModelSpec) -> None:
        provider = spec.provider
        super().__init__(
            f"model '{spec.code}' ({provider.kind.value} model '{spec.model_name}' of provider "
            f"'{provider.code}') was about to be called, but real model requests are blocked "
            "(pydantic_ai.models.ALLOW_MODEL_REQUESTS is False). Script its answers with "
            "`with pilothouse.testing.override(model=ScriptedModel([...])):`, or allow real "
            "calls in this block with `with pilothouse.testing.allow_model_requests():`"
        )
        self.model_code = spec.code


def check_model_requests(spec: ModelSpec) -> None:
    """Refuse to call ``spec``'s real model while model requests are blocked.

    A model of kind ``test`` is never real: the factory refuses to build it
    with its own message.

    Raises:
        ModelRequestsBlockedError: pydantic-ai's ``ALLOW_MODEL_REQUESTS`` is False.
    """
    # Imported here: the factory's module stays free of pydantic-ai until a
    # model is used, and by then pydantic-ai is loaded.
    from pydantic_ai import models

    if not models.ALLOW_MODEL_REQUESTS and spec.provider.kind is not ProviderKind.TEST:
        raise ModelRequestsBlockedError(spec)
