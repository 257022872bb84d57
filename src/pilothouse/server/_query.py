"""Query parameters a route does not declare are refused, not ignored.

FastAPI reads the query parameters a route declares and drops the rest, so
``GET /v1/conversations?stauts=CO`` answered every conversation as if the
filter had been given. Every route of the API (``/v1/...`` and
``/jsonrpc``) now answers 422 naming an undeclared parameter, in the same
problem shape as an undeclared body field. The OpenAI-compatible routes
keep OpenAI's own tolerance of query strings (clients of other OpenAI
flavours add ``api-version``); the playground's pages read their own.
"""

from __future__ import annotations

__all__ = ["refuse_undeclared_query"]

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import BaseModel

_OPENAI_PATHS = ("/v1/chat/", "/v1/models", "/v1/embeddings")
"""Routes that answer in OpenAI's wire format, query strings included."""


def _query_names(dependant: Dependant) -> frozenset[str]:
    """The query parameter names a route's dependant reads, its dependencies' included."""
    names: set[str] = set()
    pending = [dependant]
    while pending:
        current = pending.pop()
        for field in current.query_params:
            annotation = field.field_info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                # A query model (Annotated[Model, Query()]): its fields are the names.
                fields = annotation.model_fields.items()
                names.update(info.alias or name for name, info in fields)
            else:
                names.add(field.alias)
        pending.extend(current.dependencies)
    return frozenset(names)


async def refuse_undeclared_query(request: Request) -> None:
    """An app-wide dependency: 422 for a query parameter the matched API route does not read.

    Raises:
        RequestValidationError: naming each undeclared parameter.
    """
    if not request.query_params:
        return  # the common case, at no cost
    route = request.scope.get("route")
    path = request.url.path
    if not isinstance(route, APIRoute) or not (path.startswith("/v1/") or path == "/jsonrpc"):
        return
    if path.startswith(_OPENAI_PATHS):
        return
    # Walked per request that has a query string (listings, not turns): a few fields.
    declared = _query_names(route.dependant)
    unknown = [name for name in request.query_params if name not in declared]
    if unknown:
        accepted = ", ".join(sorted(declared)) or "none"
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": f"Extra inputs are not permitted (this route reads: {accepted})",
                    "type": "extra_forbidden",
                }
                for name in dict.fromkeys(unknown)
            ]
        )
