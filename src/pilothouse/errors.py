"""The exceptions pilothouse raises.

Third-party errors are translated into these at the boundary of the adapter
that met them, so callers (API, CLI, HTTP service) handle one hierarchy and
can turn each into a clear message or status code without a stack trace.
"""

from __future__ import annotations

__all__ = [
    "BadRequestError",
    "CatalogValidationError",
    "ConflictError",
    "ContentFilterError",
    "InvalidStateError",
    "NotFoundError",
    "PilothouseError",
    "ProviderAuthError",
    "ProviderConnectionError",
    "ProviderError",
    "ProviderServerError",
    "ProviderTimeoutError",
    "RateLimitError",
    "SecretNotFoundError",
    "StaleVersionError",
    "UnparseableResponseError",
    "ValidationIssue",
]

from dataclasses import dataclass


class PilothouseError(Exception):
    """Base class of every error pilothouse raises on purpose."""


@dataclass(frozen=True)
class ValidationIssue:
    """One broken rule, located as precisely as the input allows.

    Attributes:
        entity: the entity kind, e.g. ``action``.
        code: the business key of the offending entity, when known.
        field: the dotted field path.
        rule: what is wrong, in words a user can act on.
        file: the source file, when the input came from one.
        line: the 1-based line in ``file``, when known.
    """

    entity: str
    code: str | None
    field: str
    rule: str
    file: str | None = None
    line: int | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = f"{self.file}:{self.line if self.line is not None else 0}: "
        who = f"{self.entity} '{self.code}'" if self.code is not None else self.entity
        return f"{where}{who}: {self.field}: {self.rule}"


class CatalogValidationError(PilothouseError):
    """The catalog input breaks one or more rules; nothing was written."""

    def __init__(self, issues: list[ValidationIssue]) -> None:
        self.issues = issues
        super().__init__("\n".join(str(i) for i in issues))


class NotFoundError(PilothouseError):
    """A referenced entity or conversation does not exist for this tenant."""


class ConflictError(PilothouseError):
    """The request conflicts with the stored state (e.g. a duplicate key)."""


class StaleVersionError(ConflictError):
    """An update was made against a version that is no longer current."""


class InvalidStateError(PilothouseError):
    """The operation is not allowed in the conversation's current status."""


class SecretNotFoundError(PilothouseError):
    """A ``@secrets(NAME)`` reference names a secret that is not defined."""


class ProviderError(PilothouseError):
    """A model provider failed; subclasses say how, so retries can decide."""

    retryable: bool = False


class ProviderAuthError(ProviderError):
    """The provider rejected the credentials (401/403)."""


class RateLimitError(ProviderError):
    """The provider throttled the call (429).

    Attributes:
        retry_after: seconds the provider asked us to wait, when it said.
    """

    retryable = True

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time."""

    retryable = True


class ProviderConnectionError(ProviderError):
    """The provider could not be reached (refused, reset, DNS)."""

    retryable = True


class BadRequestError(ProviderError):
    """The provider refused the request as malformed (400/404/422)."""


class ProviderServerError(ProviderError):
    """The provider failed on its side (5xx)."""

    retryable = True


class ContentFilterError(ProviderError):
    """The provider's content filter blocked the prompt or the answer."""


class UnparseableResponseError(ProviderError):
    """The provider answered with something that could not be parsed."""

    retryable = True
