"""Running a Pilothouse on a scripted model, and refusing real model calls in tests.

Both act where every catalog model is fetched for a call (the model factory
of each :class:`~pilothouse.api.Pilothouse`), so they need no handle on the
Pilothouse itself: code under test that builds its own is covered too.
"""

from __future__ import annotations

__all__ = ["allow_model_requests", "block_model_requests", "override"]

from collections.abc import Generator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

from pilothouse.providers._guard import model_override

if TYPE_CHECKING:
    from pydantic_ai.models import Model

# Generic so that ``with override(model=ScriptedModel(...)) as model`` keeps
# the ScriptedModel type for the assertions on it.
_ModelT = TypeVar("_ModelT", bound="Model")


@contextmanager
def override(*, model: _ModelT) -> Generator[_ModelT, None, None]:
    """Answer every catalog model with ``model`` inside the block.

    Every Pilothouse running a turn in this block, or in a task started from
    it, calls ``model`` instead of the model its action names, whatever the
    provider; real model requests need not be allowed. A Pilothouse built
    with ``Pilothouse(..., model=...)`` keeps that model. Blocks nest; the
    innermost wins.

    Example:
        ```python
        with override(model=ScriptedModel(["A short summary."])) as model:
            result = await ph.command.send_message(conversation.uuid, "Summarize this.")
        assert result.output == "A short summary."
        assert model.remaining == 0
        ```

    Args:
        model: a pydantic-ai model, usually a
            :class:`~pilothouse.testing.ScriptedModel`.

    Yields:
        ``model``, to assert on what it was asked.
    """
    token = model_override.set(model)
    try:
        yield model
    finally:
        model_override.reset(token)


@contextmanager
def _allow(allow: bool) -> Generator[None, None, None]:
    # pydantic-ai's switch, so that its own provider models obey it too; set
    # and restored by pydantic-ai's helper, not by writing its global here.
    from pydantic_ai.models import override_allow_model_requests

    with override_allow_model_requests(allow):
        yield


@contextmanager
def block_model_requests() -> Generator[None, None, None]:
    """Refuse every real model call inside the block (a test session, usually).

    A turn whose model is real, rather than scripted with :func:`override`
    or ``Pilothouse(..., model=...)``, fails with
    :class:`~pilothouse.providers.ModelRequestsBlockedError`, which names the
    model and says how to script or allow it. The switch is pydantic-ai's
    ``pydantic_ai.models.ALLOW_MODEL_REQUESTS``, process-wide: setting it to
    False in a ``conftest.py`` works as well.

    Example:
        ```python
        @pytest.fixture(autouse=True, scope="session")
        def no_real_models() -> Generator[None, None, None]:
            with block_model_requests():
                yield
        ```
    """
    with _allow(False):
        yield


@contextmanager
def allow_model_requests() -> Generator[None, None, None]:
    """Allow real model calls inside the block, where they are blocked around it."""
    with _allow(True):
        yield
