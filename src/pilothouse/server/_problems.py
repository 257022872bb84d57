"""RFC 9457 problem details: the one error body shape of the HTTP service.

Every error the service answers, from a route, a dependency, a middleware or
an exception handler, is ``application/problem+json`` built here, so clients
parse one shape. :data:`HTTP_STATUS` is the service's one map from an
error's :class:`~pilothouse.errors.ErrorCategory` to its status;
:func:`error_problem` applies it. This module imports nothing else of the
server so the middlewares (which run outside FastAPI's exception handling)
can use it too.
"""

from __future__ import annotations

__all__ = [
    "HTTP_STATUS",
    "PROBLEM_MEDIA_TYPE",
    "PROBLEM_RESPONSES",
    "ProblemError",
    "error_headers",
    "error_problem",
    "field_path",
    "problem",
    "problem_body",
    "problem_responses",
]

import json
import math
import types
from collections.abc import Collection, Mapping, Sequence
from http import HTTPStatus
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import AliasChoices, BaseModel, Tag
from pydantic.fields import FieldInfo
from starlette.responses import JSONResponse

from pilothouse.errors import (
    BudgetExceededError,
    CatalogValidationError,
    ErrorCategory,
    InvalidFieldError,
    PilothouseError,
    ServiceUnavailableError,
    TooManyRequestsError,
)

PROBLEM_MEDIA_TYPE = "application/problem+json"

HTTP_STATUS: Mapping[ErrorCategory, int] = {
    ErrorCategory.INVALID_INPUT: 422,
    ErrorCategory.NOT_FOUND: 404,
    ErrorCategory.INVALID_STATE: 409,
    ErrorCategory.CONFLICT: 409,
    ErrorCategory.UNAUTHORIZED: 401,
    ErrorCategory.FORBIDDEN: 403,
    ErrorCategory.RATE_LIMITED: 429,
    ErrorCategory.BUDGET_EXCEEDED: 429,
    ErrorCategory.UNAVAILABLE: 503,
    ErrorCategory.UPSTREAM: 502,
    ErrorCategory.INTERNAL: 500,
}
"""The HTTP status of each error category (malformed bodies, which never reach
the facade, are 400; a body over the limit 413)."""


PROBLEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {"type": "object", "additionalProperties": True},
            "description": "One entry per broken rule: field and rule (and loc/msg/type "
            "for request validation; entity and code for catalog validation).",
        },
    },
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """Return OpenAPI ``responses`` documenting problem documents for ``statuses``."""
    return {
        status: {
            "description": _title(status),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": PROBLEM_SCHEMA}},
        }
        for status in statuses
    }


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


PROBLEM_RESPONSES = problem_responses(400, 401, 403, 404, 405, 409, 413, 422, 428, 429, 500)
"""The problems any authenticated route may answer, for ``APIRouter(responses=...)``."""


def problem_body(
    status: int,
    title: str | None,
    detail: str,
    *,
    errors: Sequence[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Return the problem document as a dict.

    ``type`` is ``about:blank`` unless ``extra`` names one: the status code
    and title say everything a client branches on, so no per-problem
    documentation URL is invented. A refused budget says ``budget-exceeded``
    (a 429 that waiting a minute does not cure) and adds its members.
    """
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or _title(status),
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = [dict(error) for error in errors]
    if extra:
        body.update(extra)
    return body


def problem(
    status: int,
    title: str | None,
    detail: str,
    *,
    errors: Sequence[Mapping[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> JSONResponse:
    """Return a ``application/problem+json`` response.

    Args:
        status: the HTTP status code.
        title: a short, fixed summary of the problem kind; None uses the
            status code's reason phrase.
        detail: what went wrong in this request, in words a user can act on.
        errors: one entry per broken rule (``field``/``loc`` and ``rule``/``msg``).
        headers: extra response headers (``Retry-After``, ``Allow``).
        extra: the problem's ``type`` and extension members, when it has its own.
    """
    return ProblemResponse(
        problem_body(status, title, detail, errors=errors, extra=extra),
        status_code=status,
        headers=dict(headers) if headers else None,
        media_type=PROBLEM_MEDIA_TYPE,
    )


class ProblemResponse(JSONResponse):
    """A JSON response that always encodes, whatever the client sent.

    A detail may quote the client's input, and JSON input may carry lone
    surrogates (such as an escaped U+D800) that UTF-8 cannot encode; ASCII-escaped JSON
    encodes them, so a bad request never turns into a 500.
    """

    def render(self, content: Any) -> bytes:
        """Encode ``content`` as ASCII-escaped JSON."""
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def retry_after_header(wait: float) -> str:
    """Return ``Retry-After`` in whole seconds, never 0 (a client would retry at once)."""
    return str(max(1, math.ceil(wait)))


def error_headers(exc: PilothouseError) -> dict[str, str]:
    """The headers an error calls for: ``WWW-Authenticate`` (401), ``Retry-After`` (429)."""
    if exc.category is ErrorCategory.UNAUTHORIZED:
        return {"WWW-Authenticate": 'Bearer realm="pilothouse"'}
    if isinstance(exc, TooManyRequestsError | ServiceUnavailableError):
        return {"Retry-After": retry_after_header(exc.retry_after)}
    if isinstance(exc, BudgetExceededError) and exc.retry_after is not None:
        return {"Retry-After": retry_after_header(exc.retry_after)}
    return {}


def budget_members(exc: BudgetExceededError) -> dict[str, Any]:
    """The problem members of a refused budget: its type, code, remaining amounts and reset."""
    return {
        "type": "budget-exceeded",
        "budget": exc.budget,
        "limit": exc.limit,
        "remaining": dict(exc.remaining),
        "resets_at": exc.resets_at,
    }


def error_problem(
    exc: PilothouseError,
    statuses: Mapping[ErrorCategory, int] = HTTP_STATUS,
    *,
    title: str | None = None,
) -> ProblemError:
    """Return the problem a pilothouse error answers, by its category.

    Args:
        exc: the error.
        statuses: the status of each category (a face with a contract of
            its own, such as ``/v1/invoke``, passes its variant).
        title: the problem's title; the status's reason phrase when None.

    A rule-by-rule error lists its rules in ``errors``; an unauthorized or
    rate-limited caller gets ``WWW-Authenticate`` or ``Retry-After``.
    """
    status = statuses[exc.category]
    headers = error_headers(exc)
    errors: list[dict[str, Any]] | None = None
    detail = exc.public_message
    if isinstance(exc, CatalogValidationError):
        errors = [
            {"entity": i.entity, "code": i.code, "field": i.field, "rule": i.rule}
            for i in exc.issues
        ]
        count = len(errors)
        title = title or "Catalog validation failed"
        detail = f"{count} rule{'s' if count != 1 else ''} broken; nothing was written"
    elif isinstance(exc, InvalidFieldError):
        errors = [{"field": exc.field, "rule": exc.rule}]
    extra = budget_members(exc) if isinstance(exc, BudgetExceededError) else None
    return ProblemError(status, title, detail, errors=errors, headers=headers or None, extra=extra)


def problem_bytes(status: int, title: str | None, detail: str) -> bytes:
    """Return a problem document encoded, for raw ASGI middlewares."""
    return json.dumps(problem_body(status, title, detail), ensure_ascii=True).encode("ascii")


class ProblemError(Exception):
    """Raise from a route or dependency to answer with a problem document.

    Args:
        status: the HTTP status code.
        title: a short summary; None uses the reason phrase.
        detail: what went wrong.
        errors: one entry per broken rule.
        headers: extra response headers.
        extra: the problem's own ``type`` and extension members.
    """

    def __init__(
        self,
        status: int,
        title: str | None,
        detail: str,
        errors: Sequence[Mapping[str, Any]] | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.extra = extra
        self.status = status
        self.title = title
        self.detail = detail
        self.errors = errors
        self.headers = headers

    def response(self) -> JSONResponse:
        """Return this problem as a response."""
        return problem(
            self.status,
            self.title,
            self.detail,
            errors=self.errors,
            headers=self.headers,
            extra=self.extra,
        )


def field_path(
    loc: Sequence[int | str],
    model: Any = None,
    *,
    skip: Collection[str] = (),
    empty: str = "body",
) -> str:
    """Return a validation error's location as the path the client wrote.

    Every face names the offending part of a request the same way:
    ``model.headers["X-Team"]``, ``mcpServers[0].url``. A field of a model is
    named as on the wire (its alias, else its name); a key of a mapping is
    the client's data, written as sent, quoted, in brackets, whatever its
    case or characters; an index is in brackets. pydantic's location does
    not say which of its parts is a field and which a key, so the model's
    fields are walked alongside it: a part naming a field of the model at
    hand is that field; inside a mapping the next part is a key. A part met
    where the type is not known (a field the model does not have, a value of
    any type) is written as it came.

    Args:
        loc: the error's location (``ErrorDetails["loc"]``).
        model: the type validated at the location's start (a pydantic
            model), or ``None`` where it is unknown.
        skip: parts to leave out: the tags of a tagged union, which name the
            form checked, no field of the wire.
        empty: the path of an error on the whole input.

    Returns:
        The path.
    """
    text = ""
    at: Any = model
    for part in loc:
        at = _plain(at)
        if isinstance(part, int):
            text += f"[{part}]"
            at = _item(at, part)
        elif part in skip:
            at = _tagged(at, part)
        elif isinstance(at, type) and issubclass(at, BaseModel):
            field = _model_field(at, part)
            name = part if field is None or field.alias is None else field.alias
            text += f".{name}" if text else name
            at = None if field is None else field.annotation
        elif get_origin(at) in (dict, Mapping):
            text += f"[{json.dumps(part, ensure_ascii=False)}]"
            at = get_args(at)[1] if len(get_args(at)) == 2 else None
        else:
            text += f".{part}" if text else part
            at = None
    return text or empty


def _plain(at: Any) -> Any:
    # Annotated[X, ...] and X | None are X where a location is concerned.
    while True:
        origin = get_origin(at)
        if origin is Annotated:
            at = get_args(at)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(at) if a is not type(None)]
            if len(members) != 1:
                return at
            at = members[0]
        else:
            return at


def _item(at: Any, index: int) -> Any:
    args = get_args(at)
    if get_origin(at) is tuple and not (len(args) == 2 and args[1] is Ellipsis):
        return args[index] if index < len(args) else None
    return args[0] if get_origin(at) in (list, tuple, set, frozenset, Sequence) and args else None


def _tagged(at: Any, tag: str) -> Any:
    # The member of a tagged union that ``tag`` names.
    if get_origin(at) not in (Union, types.UnionType):
        return None
    for member in get_args(at):
        if get_origin(member) is Annotated and any(
            isinstance(m, Tag) and m.tag == tag for m in get_args(member)[1:]
        ):
            return member
    return None


def _model_field(model: type[BaseModel], part: str) -> FieldInfo | None:
    for name, field in model.model_fields.items():
        names = {name, field.alias}
        if isinstance(field.validation_alias, str):
            names.add(field.validation_alias)
        elif isinstance(field.validation_alias, AliasChoices):
            names.update(c for c in field.validation_alias.choices if isinstance(c, str))
        if part in names:
            return field
    return None
