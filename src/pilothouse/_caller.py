"""Who started a conversation or a gateway call: the face and the API key.

Every face hands the facade a :class:`Caller` (``ph.for_tenant(tenant,
caller=...)``); the conversation row keeps it from its insert on, and a
gateway call's audit row keeps it too, so the record says which API key, by
prefix and name, came through which face. Never the key itself.
"""

from __future__ import annotations

__all__ = ["FACES", "Caller"]

from dataclasses import dataclass

FACES = (
    "rest",
    "openai",
    "invoke",
    "jsonrpc",
    "mcp",
    "bus",
    "cli",
    "playground",
    "python",
    "replay",
)
"""The faces a caller can come through (``python``: an application's own code;
``replay``: an evaluation replay, kept out of datasets and budgets)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling, as the record keeps it.

    Attributes:
        face: how the call came in, one of :data:`FACES`.
        key_prefix: the API key's public prefix (None when no key was
            presented: the CLI, stdio MCP, an application's own code, the bus).
        key_name: the key's name (the label given when it was created).
    """

    face: str
    key_prefix: str | None = None
    key_name: str | None = None

    def __post_init__(self) -> None:
        if self.face not in FACES:
            raise ValueError(f"unknown face {self.face!r}; the faces are {', '.join(FACES)}")

    def as_data(self) -> dict[str, str | None]:
        """The caller as a message's or a timeline event's ``caller`` holds it."""
        return {"face": self.face, "key_prefix": self.key_prefix, "key_name": self.key_name}
