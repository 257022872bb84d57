"""Exporting a tenant's catalog as YAML in the import format.

The output is deterministic: kinds in dependency order, entities sorted by
business key (in Python, so SQLite and PostgreSQL collations agree), fields
in spec order with defaults left out. Importing an export into an empty
database reproduces the catalog, and exporting that again gives the same bytes.
"""

from __future__ import annotations

__all__ = ["export_catalog", "export_document", "spec_document"]

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from pilothouse.catalog._kinds import KINDS, CatalogKind, catalog_kind
from pilothouse.catalog._spec import CatalogSpec
from pilothouse.catalog._yaml import dump_yaml


def spec_document(kind: CatalogKind, spec: CatalogSpec) -> dict[str, Any]:
    """Return one entity as the mapping written to YAML.

    The key comes first and ``active`` last, so the file reads like a
    hand-written one; fields at their default are left out.
    """
    data = spec.model_dump(by_alias=True, exclude_defaults=True)
    key = data.pop(kind.key_field)
    active = data.pop("active", None)
    document = {kind.key_field: key, **data}
    if active is not None:
        document["active"] = active
    return document


async def export_document(
    session: AsyncSession, tenant: str, kinds: Iterable[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Read a tenant's catalog as a document of kind names to entity mappings.

    Args:
        session: an open session.
        tenant: whose catalog.
        kinds: only these kind names (default: every kind).

    Returns:
        Kinds in dependency order, each with at least one entity, sorted by key.
    """
    wanted = {catalog_kind(k).name for k in kinds} if kinds is not None else set(KINDS)
    document: dict[str, list[dict[str, Any]]] = {}
    for kind in KINDS.values():
        if kind.name not in wanted:
            continue
        rows = list(await session.scalars(select(kind.model).where(kind.model.tenant == tenant)))
        if rows:
            rows.sort(key=lambda row: row.key)
            document[kind.name] = [spec_document(kind, kind.to_spec(row)) for row in rows]
    return document


async def export_catalog(
    session: AsyncSession, tenant: str, kinds: Iterable[str] | None = None
) -> str:
    """Write a tenant's catalog as YAML in the format :func:`import_catalog` reads.

    Args:
        session: an open session.
        tenant: whose catalog.
        kinds: only these kind names (default: every kind).

    Returns:
        The YAML text (empty when the catalog is).
    """
    document = await export_document(session, tenant, kinds)
    return dump_yaml(document) if document else ""
