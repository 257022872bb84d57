"""Importing catalog files: validate everything, then upsert in one transaction.

An import is all-or-nothing: every entity is checked first (against the
files and the tenant's stored catalog), and the writes happen in a single
transaction that any failure, including one only the database detects,
rolls back whole. Entities are matched by (tenant, business key); one whose
stored form already equals the file is not written, so importing the same
files twice changes nothing, not even versions. Entities stored but absent
from the files are left alone.
"""

from __future__ import annotations

__all__ = ["ImportSummary", "KindCounts", "apply_catalog", "import_catalog", "import_documents"]

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession

from pilothouse.catalog._kinds import KINDS
from pilothouse.catalog._models import CatalogEntity
from pilothouse.catalog._repository import bump_revision, load_rows, read_revision
from pilothouse.catalog._validate import (
    ExistingCatalog,
    ParsedCatalog,
    load_existing,
    validate_documents,
    validate_paths,
)
from pilothouse.errors import CatalogValidationError, ConflictError, ValidationIssue
from pilothouse.store import Database
from pilothouse.store._base import utcnow


@dataclass
class KindCounts:
    """What an import did to one kind."""

    created: int = 0
    updated: int = 0
    unchanged: int = 0


@dataclass
class ImportSummary:
    """What an import did, by kind name in dependency order.

    Attributes:
        counts: created/updated/unchanged per kind present in the files.
        revision: the tenant's catalog revision after the import.
    """

    counts: dict[str, KindCounts] = field(default_factory=dict[str, KindCounts])
    revision: int = 0

    @property
    def changed(self) -> bool:
        """Whether anything was created or updated."""
        return any(c.created or c.updated for c in self.counts.values())


async def apply_catalog(
    session: AsyncSession, tenant: str, parsed: ParsedCatalog, *, user: str
) -> ImportSummary:
    """Upsert validated entities into a tenant's catalog, in the caller's transaction.

    Args:
        session: a session inside a transaction the caller commits or rolls back.
        tenant: whose catalog.
        parsed: entities that passed :func:`validate_paths` without issues.
        user: written to ``updated_by`` of every row changed.

    Returns:
        What changed; the revision is bumped once if anything did.
    """
    rows = await load_rows(session, tenant)
    summary = ImportSummary()
    created: set[int] = set()

    def resolve(kind: str, key: str) -> CatalogEntity:
        return rows[kind][key]

    # Rows are made up front so references between new entities (a skill's
    # parent, an agent's goal action) resolve whatever their order; nothing
    # is flushed before every row is complete.
    with session.no_autoflush:
        for kind in KINDS.values():
            for entry in parsed.entries.get(kind.name, []):
                if entry.spec.key not in rows[kind.name]:
                    row = kind.model(tenant=tenant)
                    setattr(row, kind.key_field, entry.spec.key)
                    rows[kind.name][entry.spec.key] = row
                    created.add(id(row))
        for kind in KINDS.values():
            for entry in parsed.entries.get(kind.name, []):
                counts = summary.counts.setdefault(kind.name, KindCounts())
                row = rows[kind.name][entry.spec.key]
                is_new = id(row) in created
                if not is_new and kind.to_spec(row) == entry.spec:
                    counts.unchanged += 1
                    continue
                kind.apply(row, entry.spec, resolve)
                # Set explicitly so a change to link rows alone still bumps
                # the entity's version.
                row.updated_by = user
                row.updated_at = utcnow()
                session.add(row)
                if is_new:
                    counts.created += 1
                else:
                    counts.updated += 1
    await session.flush()
    if summary.changed:
        summary.revision = await bump_revision(session, tenant)
    else:
        summary.revision = await read_revision(session, tenant)
    return summary


Check = Callable[[ParsedCatalog], Awaitable[list[ValidationIssue]]]
"""A further check of validated entities before they are written (the egress policy)."""


async def import_catalog(
    database: Database,
    tenant: str,
    paths: Sequence[Path],
    *,
    user: str = "pilothouse",
    check: Check | None = None,
) -> ImportSummary:
    """Validate catalog files and import them into a tenant, all or nothing.

    Args:
        database: the target database (its schema is upgraded if needed).
        tenant: whose catalog.
        paths: files or folders of ``*.yaml``/``*.yml``.
        user: written to ``updated_by``.
        check: run on the validated entities before anything is written;
            its issues refuse the import like validation's.

    Returns:
        What changed.

    Raises:
        CatalogValidationError: the files break rules; nothing was written.
        ConflictError: the database refused a write; nothing was written.
    """
    return await _import(
        database, tenant, lambda existing: validate_paths(paths, existing), user, check
    )


async def import_documents(
    database: Database,
    tenant: str,
    documents: Sequence[Mapping[str, Any]],
    *,
    user: str = "pilothouse",
    check: Check | None = None,
) -> ImportSummary:
    """Validate catalog documents given in memory and import them, all or nothing.

    The same rules and the same import as :func:`import_catalog`, for
    documents shaped as the YAML files (kind names to lists of entities),
    e.g. built by :class:`pilothouse.testing.CatalogBuilder`. Issues name no
    file or line.

    Args:
        database: the target database (its schema is upgraded if needed).
        tenant: whose catalog.
        documents: the documents, read in order as files are.
        user: written to ``updated_by``.
        check: as in :func:`import_catalog`.

    Returns:
        What changed.

    Raises:
        CatalogValidationError: the documents break rules; nothing was written.
        ConflictError: the database refused a write; nothing was written.
    """

    def validate(existing: ExistingCatalog) -> tuple[ParsedCatalog, list[ValidationIssue]]:
        parsed, issues = validate_documents(documents, existing)
        return parsed, [replace(issue, file=None) for issue in issues]

    return await _import(database, tenant, validate, user, check)


async def _import(
    database: Database,
    tenant: str,
    validate: Callable[[ExistingCatalog], tuple[ParsedCatalog, list[ValidationIssue]]],
    user: str,
    check: Check | None = None,
) -> ImportSummary:
    await database.ensure_schema()
    async with database.sessions() as session:
        try:
            async with session.begin():
                existing = await load_existing(session, tenant)
                # Parsing and validating YAML is CPU work: off the event loop,
                # so a large (or hostile) document never stalls other requests.
                parsed, issues = await anyio.to_thread.run_sync(validate, existing)
                if not issues and check is not None:
                    issues = await check(parsed)
                if issues:
                    raise CatalogValidationError(issues)
                return await apply_catalog(session, tenant, parsed, user=user)
        except DBAPIError as exc:
            detail = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else "refused"
            raise ConflictError(
                f"the database refused the import, nothing was written: {detail}"
            ) from None
