"""pilothouse: governed access from business applications to large language models.

``from pilothouse import Pilothouse`` is the facade (:mod:`pilothouse.api`);
it is imported on first use, so ``import pilothouse`` stays cheap.
"""

from __future__ import annotations

__all__ = ["Pilothouse", "SyncPilothouse", "__version__"]

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse, SyncPilothouse

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("Pilothouse", "SyncPilothouse"):
        from pilothouse import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
