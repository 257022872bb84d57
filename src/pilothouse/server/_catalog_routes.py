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
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query, Request, Response
from fastapi.responses import JSONResponse

from pilothouse.api import loads_json
from pilothouse.server._deps import AdminFacade, AdminPrincipal, CheckedJsonRoute, Facade, Principal
from pilothouse.server._problems import PROBLEM_RESPONSES, ProblemError
from pilothouse.types import CatalogEntry

router = APIRouter(
    prefix="/v1/catalog",
    tags=["catalog"],
    responses=PROBLEM_RESPONSES,
    route_class=CheckedJsonRoute,
)

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
    "budgets",
    "virtual_servers",
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


def _entity(entry: CatalogEntry) -> dict[str, Any]:
    return {**entry.document, "version": entry.version}


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
    ph: Facade,
    active: Annotated[
        bool | None, Query(description="Only active (true) or inactive (false) entities.")
    ] = None,
) -> dict[str, list[dict[str, Any]]]:
    """Return ``{"items": [...]}``, sorted by business key."""
    return {"items": [_entity(e) for e in await ph.catalog.list_entries(kind, active=active)]}


@router.post("/{kind}", status_code=201, summary="Create an entity (admin)")
async def create_entity(
    kind: KindName,
    body: EntityBody,
    principal: AdminPrincipal,
    ph: AdminFacade,
    response: Response,
) -> dict[str, Any]:
    """Validate and add one entity; 201 with the stored entity (version 1)."""
    body.pop("version", None)
    entry = await ph.catalog.create(kind, body, user=_user(principal))
    response.headers["ETag"] = _etag(entry.version)
    response.headers["Location"] = f"/v1/catalog/{kind}/{entry.key}"
    return _entity(entry)


@router.get("/{kind}/{key}", summary="Read one entity")
async def get_entity(kind: KindName, key: str, ph: Facade, response: Response) -> dict[str, Any]:
    """Return the entity with its ``version`` (also the ``ETag``)."""
    entry = await ph.catalog.get(kind, key)
    response.headers["ETag"] = _etag(entry.version)
    return _entity(entry)


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
    ph: AdminFacade,
    response: Response,
    if_match: Annotated[str | None, Header(description='The version read, e.g. "3".')] = None,
) -> dict[str, Any]:
    """Replace every field of the entity; its version is bumped when something changed."""
    expected = _expected_version(if_match, body)
    entry = await ph.catalog.update(
        kind, key, body, expected_version=expected, user=_user(principal)
    )
    response.headers["ETag"] = _etag(entry.version)
    return _entity(entry)


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
    ph: AdminFacade,
    if_match: Annotated[str | None, Header(description="Refuse if changed since.")] = None,
) -> Response:
    """Remove the entity; 409 naming every referrer when it is in use."""
    expected = _expected_version(if_match, {}) if if_match is not None else None
    await ph.catalog.delete(kind, key, expected_version=expected, user=_user(principal))
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
async def export_whole(request: Request, ph: Facade) -> Response:
    """Return the tenant's catalog in the format ``pilothouse catalog export`` writes."""
    if _wants_json(request):
        return JSONResponse(await ph.catalog.export_document())
    return Response(await ph.catalog.export(), media_type=_YAML)


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
async def import_whole(
    request: Request, principal: AdminPrincipal, ph: AdminFacade
) -> dict[str, Any]:
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
            # The input rules name a field holding a NUL, NaN or a huge integer (422).
            document = loads_json(text)
        except json.JSONDecodeError as exc:
            raise ProblemError(
                400, "Malformed JSON", f"the request body is not valid JSON: {exc.msg}"
            ) from None
        except RecursionError:
            raise ProblemError(400, "Malformed JSON", "the request body nests too deeply") from None
        # JSON is YAML, but re-dumping it keeps one code path and its line numbers.
        text = json.dumps(document, indent=1)
    summary = await ph.catalog.import_text(text, source="body", user=_user(principal))
    return {
        "revision": summary.revision,
        "changed": summary.changed,
        "counts": {
            kind: {"created": c.created, "updated": c.updated, "unchanged": c.unchanged}
            for kind, c in summary.counts.items()
        },
    }
