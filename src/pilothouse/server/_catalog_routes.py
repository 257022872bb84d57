"""Catalog routes: CRUD per kind under ``/v1/catalog/{kind}``, and the whole catalog.

An entity travels as its spec document, the same mapping the catalog YAML
holds (``code`` first, fields at their default left out), plus ``version``.
Updates are optimistic: the client sends back the version it read, in
``If-Match`` (``GET`` answers it as the ``ETag``) or as ``version`` in the
body; a stale version is a 409 problem. Reads need any key of the tenant,
writes a key with the admin scope. Every read and write is scoped to the
key's tenant: another tenant's entity is a 404, exactly as a missing one.

``GET /v1/catalog`` exports the tenant's whole catalog as YAML (the default,
the CLI's format) or JSON (``Accept: application/json``); ``PUT
/v1/catalog`` imports a YAML or JSON document with the CLI's validation, all
or nothing.
"""

from __future__ import annotations

__all__ = ["KindName", "router"]

import json
import tempfile
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Body, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic_core import to_jsonable_python

from pilothouse.catalog import (
    KINDS,
    CatalogEntity,
    CatalogKind,
    CatalogRepository,
    export_catalog,
    export_document,
    import_catalog,
    spec_document,
)
from pilothouse.errors import CatalogValidationError, NotFoundError, ValidationIssue
from pilothouse.server._deps import (
    AdminPrincipal,
    Authenticated,
    Principal,
    ProblemError,
    State,
)
from pilothouse.server._problems import PROBLEM_RESPONSES

router = APIRouter(prefix="/v1/catalog", tags=["catalog"], responses=PROBLEM_RESPONSES)

KindName = Literal[
    "providers",
    "models",
    "configurations",
    "persona_types",
    "personas",
    "tool_types",
    "tools",
    "skill_types",
    "skills",
    "mcp_client_types",
    "mcp_clients",
    "advisor_types",
    "advisors",
    "vector_store_types",
    "vector_stores",
    "document_collections",
    "memory_strategy_types",
    "memory_strategies",
    "action_types",
    "actions",
    "applications",
    "agent_types",
    "agents",
]
"""Every catalog kind (kept equal to ``KINDS`` by a test), so OpenAPI lists them."""

EntityBody = Annotated[
    dict[str, Any],
    Body(
        description="The entity as in catalog YAML (e.g. ``{code, name, ...}``); "
        "on update optionally ``version``.",
        examples=[{"code": "EDITOR", "name": "Concise editor", "prompt": "Be brief."}],
    ),
]

_YAML = "application/yaml"


def _kind(name: str) -> CatalogKind:
    kind = KINDS.get(name)
    if kind is None:
        raise NotFoundError(f"unknown catalog kind '{name}'")
    return kind


def _entity(kind: CatalogKind, row: CatalogEntity) -> dict[str, Any]:
    # JSON-ready here, so prices stay exact decimal strings (FastAPI's own
    # encoder would turn Decimal into float) and dates ISO strings.
    document: dict[str, Any] = to_jsonable_python(spec_document(kind, kind.to_spec(row)))
    document["version"] = row.version
    return document


def _user(principal: Principal) -> str:
    # updated_by names the key, never the key itself.
    return f"api-key:{principal.key_prefix}"


def _etag(version: int) -> str:
    return f'"{version}"'


def _expected_version(if_match: str | None, body: dict[str, Any]) -> int:
    raw: Any = body.pop("version", None)
    if if_match is not None:
        raw = if_match.strip().removeprefix("W/").strip('"')
    if raw is None:
        raise ProblemError(
            428,
            "Precondition Required",
            "send the version you read, as 'If-Match: <version>' or 'version' in the body",
        )
    try:
        return int(raw)
    except (TypeError, ValueError):
        raise ProblemError(
            422,
            "Request validation failed",
            "the version must be an integer",
            errors=[{"field": "version", "rule": "must be an integer"}],
        ) from None


@router.get("/{kind}", summary="List the entities of a kind")
async def list_entities(
    kind: KindName,
    principal: Authenticated,
    state: State,
    active: Annotated[
        bool | None, Query(description="Only active (true) or inactive (false) entities.")
    ] = None,
) -> dict[str, list[dict[str, Any]]]:
    """Return ``{"items": [...]}``, sorted by business key."""
    catalog_kind = _kind(kind)
    # Rendered inside the session: a spec reads relationships lazily.
    async with state.database.sessions() as session:
        rows = await CatalogRepository(session, principal.tenant).list(catalog_kind)
        if active is not None:
            rows = [row for row in rows if row.active is active]
        return {"items": [_entity(catalog_kind, row) for row in rows]}


@router.post("/{kind}", status_code=201, summary="Create an entity (admin)")
async def create_entity(
    kind: KindName, body: EntityBody, principal: AdminPrincipal, state: State, response: Response
) -> dict[str, Any]:
    """Validate and add one entity; 201 with the stored entity (version 1)."""
    catalog_kind = _kind(kind)
    body.pop("version", None)
    async with state.database.sessions() as session, session.begin():
        repository = CatalogRepository(session, principal.tenant, user=_user(principal))
        row = await repository.create(catalog_kind, body)
        entity = _entity(catalog_kind, row)
    response.headers["ETag"] = _etag(entity["version"])
    response.headers["Location"] = f"/v1/catalog/{kind}/{row.key}"
    return entity


@router.get("/{kind}/{key}", summary="Read one entity")
async def get_entity(
    kind: KindName, key: str, principal: Authenticated, state: State, response: Response
) -> dict[str, Any]:
    """Return the entity with its ``version`` (also the ``ETag``)."""
    catalog_kind = _kind(kind)
    async with state.database.sessions() as session:
        row = await CatalogRepository(session, principal.tenant).get(catalog_kind, key)
        entity = _entity(catalog_kind, row)
    response.headers["ETag"] = _etag(entity["version"])
    return entity


@router.put(
    "/{kind}/{key}",
    summary="Replace an entity (admin); optimistic on its version",
    responses={409: {"description": "The version is stale or the key conflicts."}},
)
async def update_entity(
    kind: KindName,
    key: str,
    body: EntityBody,
    principal: AdminPrincipal,
    state: State,
    response: Response,
    if_match: Annotated[str | None, Header(description='The version read, e.g. "3".')] = None,
) -> dict[str, Any]:
    """Replace every field of the entity; its version is bumped when something changed."""
    catalog_kind = _kind(kind)
    expected = _expected_version(if_match, body)
    async with state.database.sessions() as session, session.begin():
        repository = CatalogRepository(session, principal.tenant, user=_user(principal))
        row = await repository.update(catalog_kind, key, body, expected)
        entity = _entity(catalog_kind, row)
    response.headers["ETag"] = _etag(entity["version"])
    return entity


@router.delete(
    "/{kind}/{key}",
    status_code=204,
    summary="Delete an entity nothing references (admin)",
    responses={409: {"description": "Another entity references it (named in the detail)."}},
)
async def delete_entity(
    kind: KindName,
    key: str,
    principal: AdminPrincipal,
    state: State,
    if_match: Annotated[str | None, Header(description="Refuse if changed since.")] = None,
) -> Response:
    """Remove the entity; 409 naming every referrer when it is in use."""
    catalog_kind = _kind(kind)
    expected = _expected_version(if_match, {}) if if_match is not None else None
    async with state.database.sessions() as session, session.begin():
        repository = CatalogRepository(session, principal.tenant, user=_user(principal))
        await repository.delete(catalog_kind, key, expected)
    return Response(status_code=204)


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return "json" in accept and "yaml" not in accept


@router.get(
    "",
    summary="Export the whole catalog (YAML by default, JSON on Accept: application/json)",
    response_class=Response,
    responses={200: {"content": {_YAML: {}, "application/json": {}}}},
)
async def export_whole(request: Request, principal: Authenticated, state: State) -> Response:
    """Return the tenant's catalog in the format ``pilothouse catalog export`` writes."""
    async with state.database.sessions() as session:
        if _wants_json(request):
            document = await export_document(session, principal.tenant)
            return JSONResponse(to_jsonable_python(document))
        text = await export_catalog(session, principal.tenant)
    return Response(text, media_type=_YAML)


def _located(issue: ValidationIssue) -> ValidationIssue:
    # The temporary file's path means nothing to the client; the line does.
    return ValidationIssue(issue.entity, issue.code, issue.field, issue.rule, "body", issue.line)


async def _import_text(state: State, tenant: str, text: str, user: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="pilothouse-import-") as folder:
        path = Path(folder) / "catalog.yaml"
        await anyio.Path(path).write_text(text, encoding="utf-8")
        try:
            summary = await import_catalog(state.database, tenant, [path], user=user)
        except CatalogValidationError as exc:
            raise CatalogValidationError([_located(i) for i in exc.issues]) from None
    return {
        "revision": summary.revision,
        "changed": summary.changed,
        "counts": {
            kind: {"created": c.created, "updated": c.updated, "unchanged": c.unchanged}
            for kind, c in summary.counts.items()
        },
    }


@router.put(
    "",
    summary="Import a whole catalog document, YAML or JSON (admin); all or nothing",
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                _YAML: {"schema": {"type": "string"}},
                "application/json": {"schema": {"type": "object"}},
            },
        }
    },
)
async def import_whole(request: Request, principal: AdminPrincipal, state: State) -> dict[str, Any]:
    """Validate the document like ``pilothouse catalog import``, then upsert it.

    Entities not in the document are kept. Returns the new revision and the
    created/updated/unchanged counts per kind.
    """
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError(400, "Bad Request", "the catalog document must be UTF-8") from None
    if "json" in request.headers.get("content-type", ""):
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ProblemError(
                400, "Malformed JSON", f"the request body is not valid JSON: {exc.msg}"
            ) from None
        # JSON is YAML, but re-dumping it keeps one code path and its line numbers.
        text = json.dumps(document, indent=1)
    return await _import_text(state, principal.tenant, text, _user(principal))
