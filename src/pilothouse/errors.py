"""The exceptions pilothouse raises, and the category each belongs to.

Third-party errors are translated into these at the boundary of the adapter
that met them, so callers (API, CLI, HTTP service) handle one hierarchy and
can turn each into a clear message or status code without a stack trace.

Every error has an :class:`ErrorCategory` (``error.category``): what kind of
failure it is, whatever the face that reports it. A face (the REST routes,
the OpenAI-compatible endpoint, JSON-RPC, the CLI) maps each category once,
in one table of its own, instead of testing exception classes one by one;
``error.public_message`` is the text that may leave the process.
"""

from __future__ import annotations

__all__ = [
    "BadRequestError",
    "BudgetExceededError",
    "CatalogValidationError",
    "ConflictError",
    "ContentFilterError",
    "ErrorCategory",
    "ForbiddenError",
    "InvalidFieldError",
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
    "ServiceUnavailableError",
    "StaleVersionError",
    "TooManyRequestsError",
    "UnauthorizedError",
    "UnparseableResponseError",
    "ValidationIssue",
]

from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar


class ErrorCategory(StrEnum):
    """What kind of failure an error is, for the faces that report it.

    Each face maps every category once (HTTP status, JSON-RPC code, exit
    code); a new error class only has to name its category.
    """

    INVALID_INPUT = "invalid_input"
    """The request is well-formed but its content is refused (a bad value, a
    reference to nothing usable, an unfilled template)."""
    NOT_FOUND = "not_found"
    """What the request names does not exist for the tenant."""
    INVALID_STATE = "invalid_state"
    """Not allowed in the current status (a running or finished conversation,
    an inactive action)."""
    CONFLICT = "conflict"
    """Conflicts with stored data (a duplicate key, a stale version, a
    referenced entity)."""
    UNAUTHORIZED = "unauthorized"
    """No valid credentials."""
    FORBIDDEN = "forbidden"
    """Valid credentials without the right to do this."""
    RATE_LIMITED = "rate_limited"
    """The caller sent too many requests; ``retry_after`` says how long to wait."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """A budget's limit would be crossed: the call was refused before it was sent."""
    UNAVAILABLE = "unavailable"
    """The service cannot answer now (it is shutting down); ``retry_after``
    says when to try again, on another instance if there is one."""
    UPSTREAM = "upstream"
    """A third party (a model provider) failed; its own message stays inside."""
    INTERNAL = "internal"
    """A fault of pilothouse or its deployment, not of the request."""


class PilothouseError(Exception):
    """Base class of every error pilothouse raises on purpose.

    Attributes:
        category: what kind of failure it is (class-level; bad input unless
            a subclass says otherwise).
    """

    category: ClassVar[ErrorCategory] = ErrorCategory.INVALID_INPUT

    @property
    def public_message(self) -> str:
        """The message a face may show a caller; the error's own text unless it could leak."""
        return str(self)


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


class InvalidFieldError(PilothouseError):
    """One field of a request is refused; ``field`` names it, ``rule`` says why.

    Args:
        field: the field's path as the caller wrote it, e.g. ``tools[0]``.
        rule: what is wrong, in words a user can act on.
    """

    def __init__(self, field: str, rule: str) -> None:
        super().__init__(f"{field}: {rule}")
        self.field = field
        self.rule = rule


class NotFoundError(PilothouseError):
    """A referenced entity or conversation does not exist for this tenant."""

    category = ErrorCategory.NOT_FOUND


class ConflictError(PilothouseError):
    """The request conflicts with the stored state (e.g. a duplicate key)."""

    category = ErrorCategory.CONFLICT


class StaleVersionError(ConflictError):
    """An update was made against a version that is no longer current."""


class InvalidStateError(PilothouseError):
    """The operation is not allowed in the current state.

    A conversation's status, or a database whose schema is not pilothouse's.
    """

    category = ErrorCategory.INVALID_STATE


class UnauthorizedError(PilothouseError):
    """The caller presented no valid credentials (a missing, unknown or revoked key)."""

    category = ErrorCategory.UNAUTHORIZED


class ForbiddenError(PilothouseError):
    """The caller's credentials do not allow this operation."""

    category = ErrorCategory.FORBIDDEN


class TooManyRequestsError(PilothouseError):
    """The caller is over its rate limit.

    Attributes:
        retry_after: seconds until a request would be accepted again.
    """

    category = ErrorCategory.RATE_LIMITED

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class BudgetExceededError(PilothouseError):
    """A model call would cross a budget's limit, so it was refused before it left.

    Attributes:
        budget: the budget's code.
        limit: which limit: ``money``, ``input_tokens``, ``output_tokens`` or ``turns``.
        remaining: what is left of each of the budget's limits this period
            (money as a decimal string).
        resets_at: when the period starts again (ISO 8601, UTC); None for a
            ``total`` budget.
        retry_after: seconds until then (None for a ``total`` budget).
    """

    category = ErrorCategory.BUDGET_EXCEEDED

    def __init__(
        self,
        message: str,
        *,
        budget: str,
        limit: str,
        remaining: dict[str, str],
        resets_at: str | None,
        retry_after: float | None,
    ) -> None:
        super().__init__(message)
        self.budget = budget
        self.limit = limit
        self.remaining = remaining
        self.resets_at = resets_at
        self.retry_after = retry_after


class ServiceUnavailableError(PilothouseError):
    """The service cannot take the request now; it may later.

    It is stopping (the request's turn was stopped and recorded ``TE``), or
    its PostgreSQL server refused a new connection (``max_connections``).

    Attributes:
        retry_after: seconds after which a retry may find a running service.
    """

    category = ErrorCategory.UNAVAILABLE

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class SecretNotFoundError(PilothouseError):
    """A ``@secrets(NAME)`` reference names a secret that is not defined."""


class ProviderError(PilothouseError):
    """A model provider failed; subclasses say how, so retries can decide."""

    category = ErrorCategory.UPSTREAM
    retryable: bool = False
    suggestions: tuple[str, ...] = ("check the provider's status and its logs",)
    """What a user can do about it (seed 001: errors carry a description and suggestions)."""

    @property
    def public_message(self) -> str:
        """Only the kind of failure: a provider's message may echo URLs, headers or keys."""
        return f"the model provider failed ({type(self).__name__})"

    def described(self) -> str:
        """The error's description followed by its suggestions, one sentence."""
        return f"{type(self).__name__}: {self}; suggestions: {'; '.join(self.suggestions)}"


class ProviderAuthError(ProviderError):
    """The provider rejected the credentials (401/403)."""

    suggestions = ("check the provider's api_key (or the secret it names) and its headers",)


class RateLimitError(ProviderError):
    """The provider throttled the call (429).

    Attributes:
        retry_after: seconds the provider asked us to wait, when it said.
    """

    retryable = True
    suggestions = ("lower the request rate or concurrency", "raise the provider's quota")

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderTimeoutError(ProviderError):
    """The provider did not answer in time."""

    retryable = True
    suggestions = (
        "lower max_tokens or raise the request timeout",
        "check that the model server is not overloaded",
    )


class ProviderConnectionError(ProviderError):
    """The provider could not be reached (refused, reset, DNS)."""

    retryable = True
    suggestions = (
        "check that the provider's base_url is right and the server is running",
        "check the network between this service and the provider",
    )


class BadRequestError(ProviderError):
    """The provider refused the request as malformed (400/404/422)."""

    suggestions = ("check the model name and the options the model supports",)


class ProviderServerError(ProviderError):
    """The provider failed on its side (5xx)."""

    retryable = True
    suggestions = ("retry later; check the provider's status and its logs",)


class ContentFilterError(ProviderError):
    """The provider's content filter blocked the prompt or the answer."""


class UnparseableResponseError(ProviderError):
    """The provider answered with something that could not be parsed."""

    retryable = True
    suggestions = (
        "check that base_url points at an OpenAI-compatible /v1 endpoint",
        "check the model server's logs for the answer it sent",
    )
