"""pilothouse.memory: chat memory, token counting, and scoped long-term memory.

:func:`select_history` picks the stored messages a turn sends to the model
under a :class:`MemoryPolicy` (FULL, WINDOW(n) or SCOPED, with an optional
token budget); :func:`counter_for` gives the token counter for a model.
:class:`ScopedMemory` keeps memory records of four scopes (session, user,
agent, organization) with their vectors; :class:`MemoryExtractor` turns a
turn into ADD / UPDATE / DELETE / NOOP decisions off the hot path. The
scoped parts load numpy and the embedder on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pilothouse._lazy import lazy_exports
from pilothouse.memory._chat import (
    NO_MEMORY,
    MemoryMessage,
    MemoryPolicy,
    message_tokens,
    select_history,
)
from pilothouse.memory._tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    EstimateCounter,
    TiktokenCounter,
    TokenCounter,
    counter_for,
)

if TYPE_CHECKING:
    from pilothouse.memory._extract import MemoryExtractor
    from pilothouse.memory._store import RankWeights, ScopedMemory, SessionLimits
    from pilothouse.memory._types import EVERY_TENANT, EveryTenant

__all__ = [
    "EVERY_TENANT",
    "MESSAGE_OVERHEAD_TOKENS",
    "NO_MEMORY",
    "EstimateCounter",
    "EveryTenant",
    "MemoryExtractor",
    "MemoryMessage",
    "MemoryPolicy",
    "RankWeights",
    "ScopedMemory",
    "SessionLimits",
    "TiktokenCounter",
    "TokenCounter",
    "counter_for",
    "message_tokens",
    "select_history",
]

_LAZY: dict[str, tuple[str, ...]] = {
    "_extract": ("MemoryExtractor",),
    "_store": ("RankWeights", "ScopedMemory", "SessionLimits"),
    "_types": ("EVERY_TENANT", "EveryTenant"),
}
_MODULE_OF, __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
