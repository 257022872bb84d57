"""Exporting a tenant's catalog as YAML in the import format.

The output is deterministic: kinds in dependency order, entities sorted by
business key (in Python, so SQLite and PostgreSQL collations agree), fields
in spec order with defaults left out. Importing an export into an empty
database reproduces the catalog, and exporting that again gives the same bytes.
"""

from __future__ import annotations

__all__ = ["export_catalog", "export_document", "spec_document"]

from collections.abc import Iterable
from typing import Any, cast

from pydantic import ValidationError
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
            document[kind.name] = [_exported(kind, row) for row in rows]
    return document


def _exported(kind: CatalogKind, row: Any) -> dict[str, Any]:
    """One entity's mapping, also when its keys are longer than today's lengths.

    A database whose upgrade stopped at too-long keys is exported so they can
    be shortened: each key the spec refuses is validated as a short stand-in
    and written back as it is stored.
    """
    try:
        return spec_document(kind, kind.to_spec(row))
    except ValidationError:
        pass
    stored: dict[str, str] = {}

    def stand_in(key: str) -> str:
        if len(key) <= 4:
            return key
        token = stored.setdefault(key, f"_{len(stored)}")
        return token

    document = spec_document(kind, kind.to_spec(row, stand_in))
    original = {token: key for key, token in stored.items()}

    def restore(value: Any) -> Any:
        return original.get(value, value) if isinstance(value, str) else value

    document[kind.key_field] = restore(document[kind.key_field])
    for ref in kind.refs:
        if ref.field in document:
            document[ref.field] = restore(document[ref.field])
    for link in kind.links:
        items: list[Any] = document.get(link.field, [])
        for index, item in enumerate(items):
            if isinstance(item, dict):
                entry = cast(dict[str, Any], item)
                for name in ("advisor", "tool"):
                    if name in entry:
                        entry[name] = restore(entry[name])
            else:
                items[index] = restore(item)
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
