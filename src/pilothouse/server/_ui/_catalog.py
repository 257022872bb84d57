"""The catalog UI: list, create, edit and delete the entities of every kind.

Forms come from ``ph.catalog.form(kind)``; a submitted form becomes the
entity's document and is validated by the importer's own rules, so a
message here reads exactly as ``pilothouse catalog import`` prints it.
Edits are optimistic: the form carries the version it was read at, and a
stale one is shown as a conflict, the user's input kept.
"""

from __future__ import annotations

__all__ = ["router"]

from typing import Annotated, Any, get_args

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from pilothouse.errors import (
    CatalogValidationError,
    ConflictError,
    InvalidFieldError,
    NotFoundError,
    StaleVersionError,
)
from pilothouse.server._catalog_routes import KindName
from pilothouse.server._ui._base import UiAdmin, UiFacade, UiUser, render
from pilothouse.types import CatalogEntry, KindForm

router = APIRouter(include_in_schema=False)

KINDS: tuple[str, ...] = get_args(KindName)
"""Every catalog kind, in dependency order (as the importer reads them)."""

PAGE = 25
"""Entities a table shows at a time."""


GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Models and providers", ("providers", "models", "configurations")),
    (
        "Agents and prompts",
        (
            "action_types",
            "actions",
            "agent_types",
            "agents",
            "persona_types",
            "personas",
            "skill_types",
            "skills",
        ),
    ),  # fmt: skip
    (
        "Tools",
        (
            "tool_types",
            "tools",
            "mcp_client_types",
            "mcp_clients",
            "advisor_types",
            "advisors",
            "virtual_servers",
        ),
    ),
    (
        "Knowledge and memory",
        (
            "vector_store_types",
            "vector_stores",
            "document_collections",
            "memory_strategy_types",
            "memory_strategies",
        ),
    ),  # fmt: skip
    ("Administration", ("applications", "budgets")),
)
"""The catalog's navigation: the kinds grouped by what they are for."""


def _label(kind: str) -> str:
    return kind.replace("_", " ").capitalize()


async def _choices(user: UiUser, form: KindForm) -> dict[str, list[str]]:
    """The keys each reference field may pick from."""
    choices: dict[str, list[str]] = {}
    for form_field in form.fields:
        if form_field.target is not None and form_field.target not in choices:
            entries = await user.ph.catalog.list_entries(form_field.target)
            choices[form_field.target] = [e.key for e in entries]
    return choices


def _values(data: FormData) -> dict[str, str | list[str]]:
    values: dict[str, str | list[str]] = {}
    for name in data:
        if name in ("version", "_action"):
            continue
        items = [str(v) for v in data.getlist(name)]
        values[name] = items if len(items) > 1 else items[0]
    return values


async def _form_page(
    request: Request,
    user: UiUser,
    kind: str,
    *,
    key: str | None,
    document: dict[str, Any],
    version: int | None,
    status_code: int = 200,
    issues: list[str] | None = None,
    field_errors: dict[str, str] | None = None,
    conflict: str | None = None,
) -> HTMLResponse:
    form = user.ph.catalog.form(kind)
    return render(
        request,
        "catalog_form.html",
        status_code=status_code,
        user=user,
        kinds=KINDS,
        groups=GROUPS,
        kind=kind,
        label=_label(kind),
        form=form,
        key=key,
        document=document,
        version=version,
        choices=await _choices(user, form),
        issues=issues or [],
        field_errors=field_errors or {},
        conflict=conflict,
    )


def _issues(exc: CatalogValidationError) -> tuple[list[str], dict[str, str]]:
    """The importer's messages, and the first one per top-level field."""
    fields: dict[str, str] = {}
    for issue in exc.issues:
        top = issue.field.split(".")[0].split("[")[0]
        fields.setdefault(top, issue.rule)
    return [str(i) for i in exc.issues], fields


@router.get("/catalog")
async def catalog_home(user: UiFacade) -> RedirectResponse:
    """The catalog UI starts with the actions."""
    del user
    return RedirectResponse("/catalog/actions", status_code=303)


def _found(entries: list[CatalogEntry], q: str) -> list[CatalogEntry]:
    """The entries whose key, name or description holds ``q`` (case-insensitive)."""
    words = q.strip().casefold()
    if not words:
        return entries
    return [
        e
        for e in entries
        if any(
            words in str(v).casefold()
            for v in (e.key, e.document.get("name") or "", e.document.get("description") or "")
        )
    ]


@router.get("/catalog/{kind}")
async def list_kind(
    request: Request,
    user: UiFacade,
    kind: KindName,
    q: Annotated[str, Query(max_length=200)] = "",
    page: Annotated[int, Query(ge=1, le=100_000)] = 1,
) -> HTMLResponse:
    """The entities of a kind, in a table: ``q`` searches keys, names and descriptions."""
    entries = await user.ph.catalog.list_entries(kind)
    found = _found(entries, q)
    pages = max(1, -(-len(found) // PAGE))
    page = min(page, pages)
    form = user.ph.catalog.form(kind)
    return render(
        request,
        "catalog_list.html",
        user=user,
        kinds=KINDS,
        groups=GROUPS,
        kind=kind,
        label=_label(kind),
        form=form,
        entries=found[(page - 1) * PAGE : page * PAGE],
        total=len(entries),
        matching=len(found),
        q=q,
        page=page,
        pages=pages,
        notice=request.query_params.get("notice"),
    )


def _defaults(form: KindForm) -> dict[str, Any]:
    """Each field's default, for the fields that have one worth showing."""
    return {f.name: f.default for f in form.fields if f.default not in (None, [], {})}


@router.get("/catalog/{kind}/new")
async def new_entity(request: Request, user: UiFacade, kind: KindName) -> HTMLResponse:
    """An empty form, defaults filled in."""
    defaults = _defaults(user.ph.catalog.form(kind))
    return await _form_page(request, user, kind, key=None, document=defaults, version=None)


@router.post("/catalog/{kind}/new")
async def create_entity(request: Request, user: UiAdmin, kind: KindName) -> Response:
    """Validate and create; the form again with the importer's messages when refused."""
    values = _values(await request.form())
    try:
        document = user.ph.catalog.document_from_form(kind, values)
        entry = await user.ph.catalog.create(kind, document, user=f"ui:{user.principal.key_prefix}")
    except InvalidFieldError as exc:
        return await _form_page(
            request, user, kind, key=None, document=dict(values), version=None,
            status_code=422, issues=[str(exc)], field_errors={exc.field: exc.rule},
        )  # fmt: skip
    except CatalogValidationError as exc:
        issues, fields = _issues(exc)
        return await _form_page(
            request, user, kind, key=None, document=dict(values), version=None,
            status_code=422, issues=issues, field_errors=fields,
        )  # fmt: skip
    except ConflictError as exc:
        return await _form_page(
            request, user, kind, key=None, document=dict(values), version=None,
            status_code=409, issues=[str(exc)],
        )  # fmt: skip
    notice = f"Created {user.ph.catalog.form(kind).entity_name} {entry.key}."
    return RedirectResponse(f"/catalog/{kind}?notice={notice}", status_code=303)


@router.get("/catalog/{kind}/{key}")
async def edit_entity(request: Request, user: UiFacade, kind: KindName, key: str) -> HTMLResponse:
    """The entity's form, at the version read.

    The stored document leaves out the fields at their default (``active:
    true`` among them): they are filled in, so that a checkbox left alone is
    saved as it was, not as an unticked box's false.
    """
    entry = await user.ph.catalog.get(kind, key)
    document = {**_defaults(user.ph.catalog.form(kind)), **entry.document}
    return await _form_page(request, user, kind, key=key, document=document, version=entry.version)


@router.post("/catalog/{kind}/{key}")
async def update_entity(request: Request, user: UiAdmin, kind: KindName, key: str) -> Response:
    """Save an edit, if nobody changed the entity since it was read; else show the conflict."""
    data = await request.form()
    values = _values(data)
    version = int(str(data.get("version") or 0))
    try:
        document = user.ph.catalog.document_from_form(kind, values)
        entry = await user.ph.catalog.update(
            kind, key, document, expected_version=version, user=f"ui:{user.principal.key_prefix}"
        )
    except StaleVersionError:
        current = await user.ph.catalog.get(kind, key)
        conflict = (
            f"Someone else saved this {current.kind[:-1].replace('_', ' ')} while you were "
            f"editing it: you edited version {version}, it is now version {current.version}. "
            "Your changes are below and were not saved; open the current version in another "
            "tab, then save again to overwrite it."
        )
        return await _form_page(
            request, user, kind, key=key, document=dict(values), version=current.version,
            status_code=409, conflict=conflict,
        )  # fmt: skip
    except InvalidFieldError as exc:
        return await _form_page(
            request, user, kind, key=key, document=dict(values), version=version,
            status_code=422, issues=[str(exc)], field_errors={exc.field: exc.rule},
        )  # fmt: skip
    except CatalogValidationError as exc:
        issues, fields = _issues(exc)
        return await _form_page(
            request, user, kind, key=key, document=dict(values), version=version,
            status_code=422, issues=issues, field_errors=fields,
        )  # fmt: skip
    notice = (
        f"Saved {user.ph.catalog.form(kind).entity_name} {entry.key} (version {entry.version})."
    )
    return RedirectResponse(f"/catalog/{kind}?notice={notice}", status_code=303)


@router.post("/catalog/{kind}/{key}/delete")
async def delete_entity(request: Request, user: UiAdmin, kind: KindName, key: str) -> Response:
    """Delete an entity nothing references; the referrers are named otherwise."""
    data = await request.form()
    raw = data.get("version")
    try:
        await user.ph.catalog.delete(
            kind,
            key,
            expected_version=int(str(raw)) if raw else None,
            user=f"ui:{user.principal.key_prefix}",
        )
    except (ConflictError, NotFoundError) as exc:
        entries = await user.ph.catalog.list_entries(kind)
        return render(
            request,
            "catalog_list.html",
            status_code=409 if isinstance(exc, ConflictError) else 404,
            user=user,
            kinds=KINDS,
            groups=GROUPS,
            kind=kind,
            label=_label(kind),
            form=user.ph.catalog.form(kind),
            entries=entries,
            notice=None,
            error=str(exc),
        )
    return RedirectResponse(f"/catalog/{kind}?notice=Deleted {key}.", status_code=303)
