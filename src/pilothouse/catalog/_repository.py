"""Tenant-scoped reads and writes of catalog entities, for the API and the service.

Every query filters on the tenant, so one tenant can neither read nor guess
another's rows: a key that exists only elsewhere is simply "not found". The
repository flushes but never commits: the caller owns the transaction, so
several writes (or an import) succeed or fail together.
"""

from __future__ import annotations

__all__ = ["CatalogRepository", "bump_revision", "load_rows", "read_revision"]

from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.exc import StaleDataError

from pilothouse.catalog._kinds import KINDS, CatalogKind, catalog_kind
from pilothouse.catalog._models import CatalogEntity, CatalogRevision, Model
from pilothouse.catalog._spec import CatalogSpec
from pilothouse.catalog._validate import (
    Entry,
    gateway_namespace_issues,
    is_embedding_only,
    load_existing,
    parse_spec,
    qa_model_rule,
    skill_cycle_issues,
    virtual_server_issues,
)
from pilothouse.errors import (
    CatalogValidationError,
    ConflictError,
    NotFoundError,
    StaleVersionError,
    ValidationIssue,
)
from pilothouse.store._base import utcnow


async def load_rows(session: AsyncSession, tenant: str) -> dict[str, dict[str, CatalogEntity]]:
    """Load every catalog row of a tenant, by kind name and key.

    With all rows in the session, relationships between them resolve from
    the identity map without further queries.
    """
    rows: dict[str, dict[str, CatalogEntity]] = {}
    for kind in KINDS.values():
        found = await session.scalars(select(kind.model).where(kind.model.tenant == tenant))
        rows[kind.name] = {row.key: row for row in found}
    return rows


async def read_revision(session: AsyncSession, tenant: str) -> int:
    """Return the tenant's catalog revision (0 before its first write)."""
    row = await session.get(CatalogRevision, tenant)
    return 0 if row is None else row.revision


async def bump_revision(session: AsyncSession, tenant: str) -> int:
    """Advance the tenant's catalog revision, invalidating compiled actions.

    Returns:
        The new revision.
    """
    row = await session.get(CatalogRevision, tenant, with_for_update=True)
    if row is None:
        row = CatalogRevision(tenant=tenant, revision=1, updated_at=utcnow())
        session.add(row)
    else:
        row.revision += 1
        row.updated_at = utcnow()
    await session.flush()
    return row.revision


def _database_conflict(exc: DBAPIError) -> ConflictError:
    detail = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else "refused"
    return ConflictError(f"the database refused the change: {detail}")


class CatalogRepository:
    """Create, read, update and delete catalog entities of one tenant.

    Args:
        session: an open session; the caller commits or rolls back.
        tenant: the tenant every operation is scoped to.
        user: written to ``updated_by`` on every change.
    """

    def __init__(self, session: AsyncSession, tenant: str, *, user: str = "pilothouse") -> None:
        self.session = session
        self.tenant = tenant
        self.user = user

    async def _find(self, kind: CatalogKind, key: str) -> CatalogEntity | None:
        query = select(kind.model).where(kind.model.tenant == self.tenant, kind.key_column() == key)
        return (await self.session.scalars(query)).one_or_none()

    async def list(
        self, kind: str | CatalogKind, *, active_only: bool = False
    ) -> list[CatalogEntity]:
        """List the entities of a kind, sorted by business key.

        Args:
            kind: a kind name (``actions``) or kind.
            active_only: leave out inactive entities.

        Returns:
            The rows, with their relationships loaded.
        """
        kind = catalog_kind(kind)
        query = select(kind.model).where(kind.model.tenant == self.tenant)
        if active_only:
            query = query.where(kind.model.active.is_(True))
        rows = list(await self.session.scalars(query))
        return sorted(rows, key=lambda row: row.key)

    async def get(self, kind: str | CatalogKind, key: str) -> CatalogEntity:
        """Return one entity by business key.

        Raises:
            NotFoundError: when this tenant has no such entity.
        """
        kind = catalog_kind(kind)
        row = await self._find(kind, key)
        if row is None:
            raise NotFoundError(f"{kind.entity_name} '{key}' not found")
        return row

    async def get_spec(self, kind: str | CatalogKind, key: str) -> CatalogSpec:
        """Return one entity as its spec (the API's response body)."""
        kind = catalog_kind(kind)
        return kind.to_spec(await self.get(kind, key))

    async def _apply(self, kind: CatalogKind, row: CatalogEntity, spec: CatalogSpec) -> None:
        targets: dict[tuple[str, str], CatalogEntity] = {}
        entry = Entry(kind, spec)
        issues: list[ValidationIssue] = []
        for location, target, key in kind.references(spec):
            found = await self._find(KINDS[target], key)
            if found is None:
                rule = f"unknown {KINDS[target].entity_name} '{key}'"
                issues.append(entry.issue(location, rule))
            else:
                targets[target, key] = found
                if (
                    kind.name == "document_collections"
                    and location == ("qa_model",)
                    and isinstance(found, Model)
                    and is_embedding_only(found.capabilities)
                ):
                    issues.append(entry.issue(location, qa_model_rule(key)))
        if kind.name == "skills":
            existing = await load_existing(self.session, self.tenant, ["skills"])
            issues += skill_cycle_issues([entry], existing)
        if kind.name == "tools":
            existing = await load_existing(self.session, self.tenant, ["tools"])
            issues += gateway_namespace_issues([entry], existing)
            issues += virtual_server_issues([], [entry], existing)
        if kind.name == "virtual_servers":
            existing = await load_existing(self.session, self.tenant, ["tools"])
            issues += virtual_server_issues([entry], [], existing)
        if issues:
            raise CatalogValidationError(issues)
        kind.apply(row, spec, lambda target, key: targets[target, key])
        row.updated_by = self.user
        row.updated_at = utcnow()

    async def _flush(self, kind: CatalogKind, key: str) -> None:
        try:
            await self.session.flush()
        except StaleDataError:
            raise StaleVersionError(
                f"{kind.entity_name} '{key}' was changed by someone else meanwhile; "
                "read it again and retry"
            ) from None
        except DBAPIError as exc:
            raise _database_conflict(exc) from None

    async def create(
        self, kind: str | CatalogKind, spec: CatalogSpec | Mapping[str, Any]
    ) -> CatalogEntity:
        """Add an entity.

        Args:
            kind: the kind name or kind.
            spec: its spec, or a mapping to validate into one.

        Returns:
            The new row (version 1).

        Raises:
            CatalogValidationError: the spec breaks a rule or references an
                unknown entity.
            ConflictError: the key is taken in this tenant.
        """
        kind = catalog_kind(kind)
        spec = parse_spec(kind, spec)
        if await self._find(kind, spec.key) is not None:
            raise ConflictError(f"{kind.entity_name} '{spec.key}' already exists")
        row = kind.model(tenant=self.tenant)
        setattr(row, kind.key_field, spec.key)
        await self._apply(kind, row, spec)
        self.session.add(row)
        await self._flush(kind, spec.key)
        await bump_revision(self.session, self.tenant)
        return row

    async def update(
        self,
        kind: str | CatalogKind,
        key: str,
        spec: CatalogSpec | Mapping[str, Any],
        expected_version: int,
    ) -> CatalogEntity:
        """Replace an entity's fields and links with ``spec``.

        Args:
            kind: the kind name or kind.
            key: the business key of the entity to change.
            spec: the whole new spec (its key must be ``key``).
            expected_version: the version the caller read; the update is
                refused when the entity changed since.

        Returns:
            The row; its version is bumped only when something changed.

        Raises:
            NotFoundError: no such entity in this tenant.
            StaleVersionError: ``expected_version`` is not the current version.
            CatalogValidationError: the spec breaks a rule.
        """
        kind = catalog_kind(kind)
        row = await self.get(kind, key)
        spec = parse_spec(kind, spec)
        if spec.key != key:
            rule = f"must stay '{key}': a key cannot be changed (delete and create instead)"
            raise CatalogValidationError([Entry(kind, spec).issue((kind.key_field,), rule)])
        if row.version != expected_version:
            raise StaleVersionError(
                f"{kind.entity_name} '{key}' is at version {row.version}, not "
                f"{expected_version}: it was changed meanwhile; read it again and retry"
            )
        if kind.to_spec(row) == spec:
            return row
        await self._apply(kind, row, spec)
        await self._flush(kind, key)
        await bump_revision(self.session, self.tenant)
        return row

    async def referrers(self, kind: str | CatalogKind, row: CatalogEntity) -> list[str]:
        """Name every entity of this tenant that references ``row``.

        Returns:
            ``"action 'SUMBRAND' (persona)"``-style descriptions, sorted.
        """
        kind = catalog_kind(kind)
        found: list[str] = []
        for other in KINDS.values():
            model: Any = other.model
            for ref in other.refs:
                if ref.target != kind.name:
                    continue
                query = select(other.key_column()).where(
                    model.tenant == self.tenant, getattr(model, ref.fk) == row.id
                )
                if other is kind:
                    query = query.where(model.id != row.id)
                found += [
                    f"{other.entity_name} '{k}' ({ref.field})" for k in await self._keys(query)
                ]
            for link in other.links:
                if link.target != kind.name:
                    continue
                link_model: Any = link.link_model
                query = (
                    select(other.key_column())
                    .join(link_model, getattr(link_model, link.owner_fk) == model.id)
                    .where(
                        model.tenant == self.tenant, getattr(link_model, link.target_fk) == row.id
                    )
                )
                found += [
                    f"{other.entity_name} '{k}' ({link.field})" for k in await self._keys(query)
                ]
        if kind.name == "tools":
            # A virtual server's single operations name their gateway in JSON.
            from pilothouse.catalog._virtual import VirtualServer, split_operation

            servers = await self.session.execute(
                select(VirtualServer.code, VirtualServer.operations).where(
                    VirtualServer.tenant == self.tenant
                )
            )
            found += [
                f"virtual server '{code}' (operations)"
                for code, operations in servers
                if any(split_operation(str(m))[0] == row.key for m in operations or [])
            ]
        return sorted(set(found))

    async def _keys(self, query: Any) -> list[str]:
        return [str(k) for k in await self.session.scalars(query)]

    async def delete(
        self, kind: str | CatalogKind, key: str, expected_version: int | None = None
    ) -> None:
        """Remove an entity that nothing references.

        Args:
            kind: the kind name or kind.
            key: its business key.
            expected_version: when given, refuse if the entity changed since.

        Raises:
            NotFoundError: no such entity in this tenant.
            ConflictError: another entity references it (named in the message).
            StaleVersionError: ``expected_version`` is not the current version.
        """
        kind = catalog_kind(kind)
        row = await self.get(kind, key)
        if expected_version is not None and row.version != expected_version:
            raise StaleVersionError(
                f"{kind.entity_name} '{key}' is at version {row.version}, not "
                f"{expected_version}: it was changed meanwhile; read it again and retry"
            )
        users = await self.referrers(kind, row)
        if users:
            raise ConflictError(
                f"{kind.entity_name} '{key}' cannot be deleted: used by {', '.join(users)}"
            )
        # A Core DELETE lets the database cascade the link rows; the ORM would
        # first try to load collections that are deliberately not loadable.
        model: Any = kind.model
        statement = delete(model).where(model.id == row.id, model.version == row.version)
        try:
            result: Any = await self.session.execute(statement)
        except DBAPIError as exc:
            raise _database_conflict(exc) from None
        if result.rowcount != 1:
            raise StaleVersionError(
                f"{kind.entity_name} '{key}' was changed by someone else meanwhile; "
                "read it again and retry"
            )
        self.session.expunge(row)
        await bump_revision(self.session, self.tenant)

    async def revision(self) -> int:
        """Return the tenant's catalog revision (0 before its first write)."""
        return await read_revision(self.session, self.tenant)
