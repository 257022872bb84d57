"""The errors of the knowledge package: each says what was wrong and what to do."""

from __future__ import annotations

__all__ = [
    "DimensionMismatchError",
    "DocumentError",
    "InputTooLongError",
    "KnowledgeError",
    "KnowledgeSetupError",
]

from pilothouse.errors import PilothouseError


class KnowledgeError(PilothouseError):
    """Base class of the knowledge package's errors."""


class KnowledgeSetupError(KnowledgeError):
    """A collection, store or embedding model cannot be used as configured."""


class DimensionMismatchError(KnowledgeError):
    """Vectors of one length met a store or model of another.

    Attributes:
        expected: the length the store or catalog holds.
        actual: the length that arrived.
    """

    def __init__(self, message: str, *, expected: int, actual: int) -> None:
        super().__init__(message)
        self.expected = expected
        self.actual = actual


class InputTooLongError(KnowledgeError):
    """A text is longer than its embedding model reads.

    Attributes:
        tokens: the text's length in the model's tokens.
        limit: what the model reads.
    """

    def __init__(self, message: str, *, tokens: int, limit: int) -> None:
        super().__init__(message)
        self.tokens = tokens
        self.limit = limit


class DocumentError(KnowledgeError):
    """A document could not be read, parsed or fetched."""
