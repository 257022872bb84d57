"""pilothouse.memory: chat memory and token counting.

:func:`select_history` picks the stored messages a turn sends to the model
under a :class:`MemoryPolicy` (FULL or WINDOW(n), with an optional token
budget); :func:`counter_for` gives the token counter for a model.
"""

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

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "NO_MEMORY",
    "EstimateCounter",
    "MemoryMessage",
    "MemoryPolicy",
    "TiktokenCounter",
    "TokenCounter",
    "counter_for",
    "message_tokens",
    "select_history",
]
