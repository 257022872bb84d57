"""The catalog half of the facade: validate, import, export and edit entities.

An entity travels as its spec document, the mapping the catalog YAML holds
(:class:`~pilothouse.types.CatalogEntry`). The catalog tooling (YAML,
validation, jsonschema) is imported by the methods that need it, so a
facade that never touches the catalog does not load it.
"""

from __future__ import annotations

__all__ = ["CatalogApi"]

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
from pydantic_core import to_jsonable_python

from pilothouse._facade.facet import Facet, checks_own_input
from pilothouse.errors import CatalogValidationError, NotFoundError, ValidationIssue
from pilothouse.store import Database
from pilothouse.types import CatalogCheck, CatalogEntry, KindForm

if TYPE_CHECKING:
    from pilothouse.catalog import CatalogKind, CatalogRepository
    from pilothouse.catalog._models import CatalogEntity
    from pilothouse.catalog._validate import ParsedCatalog
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.providers._secrets import SecretResolver
    from pilothouse.tools._code import CodePolicy
    from pilothouse.tools._limits import ScriptLimits
    from pilothouse.types import ImportSummary

EgressOf = Callable[[], "EgressPolicy | None"]
"""The writer's egress policy, or None where catalog URLs are not checked."""

SecretsOf = Callable[[], "SecretResolver | None"]
"""The writer's secrets, or None where references are not checked at write time."""

Found = list[tuple[tuple[str | int, ...], str]]


def _unknown_secrets(
    value: Any, secrets: SecretResolver, tenant: str, location: tuple[str | int, ...] = ()
) -> Found:
    """Each ``@secrets(NAME)`` in ``value`` (any depth) that the tenant's scope lacks."""
    from pilothouse.providers._secrets import secret_names

    found: Found = []
    if isinstance(value, str):
        for name in dict.fromkeys(secret_names(value)):
            if not secrets.defines(name):
                found.append(
                    (
                        location,
                        f"names the secret '{name}', which tenant '{tenant}' does not have: "
                        f"the operator defines it in the section [{tenant}] of the secrets "
                        "file or maps an environment variable to the tenant with "
                        "PILOTHOUSE_SECRETS_ENV; the server's environment is no tenant's "
                        "secret (see docs/security.md#secrets)",
                    )
                )
    elif isinstance(value, Mapping):
        for key, item in cast(Mapping[Any, Any], value).items():
            found += _unknown_secrets(item, secrets, tenant, (*location, str(key)))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(cast(Sequence[Any], value)):
            found += _unknown_secrets(item, secrets, tenant, (*location, index))
    return found


async def _served_write_issues(
    policy: EgressPolicy | None,
    secrets: SecretResolver | None,
    tenant: str,
    kind: CatalogKind,
    document: Mapping[str, Any],
    *,
    allow_stdio: bool,
    code_policy: CodePolicy,
) -> Found:
    """What the service refuses in one entity a tenant writes, with its location and the rule.

    Each name of server code the operator has not granted, each reference
    to a secret the tenant does not have, each address the
    tenant's egress policy refuses, and a stdio MCP client unless the
    operator allows them.
    """
    from pilothouse.catalog._urls import catalog_urls
    from pilothouse.errors import InvalidFieldError
    from pilothouse.tools._code import catalog_code_refusals

    found: Found = list(catalog_code_refusals(kind.name, document, code_policy))
    if secrets is not None:
        found += _unknown_secrets(document, secrets, tenant)
    if policy is None:
        return found
    if kind.name == "mcp_clients" and document.get("transport") == "stdio" and not allow_stdio:
        # A stdio client is a command the server runs, with its files,
        # environment and network: no tenant of a shared service may write one.
        found.append(
            (
                ("transport",),
                "a stdio MCP client runs a command on the server, which a tenant of the "
                "service may not write; connect to the server over streamable-http or sse "
                "with its url (the operator may allow stdio with "
                "PILOTHOUSE_TENANT_MCP_STDIO=true)",
            )
        )
    for item in catalog_urls(kind.name, document):
        try:
            await policy.check(item.url, ".".join(map(str, item.location)), schemes=item.schemes)
        except InvalidFieldError as exc:
            found.append((item.location, exc.rule))
    return found


def _script_limit_issues(
    limits: ScriptLimits, kind: CatalogKind, document: Mapping[str, Any]
) -> list[tuple[tuple[str | int, ...], str]]:
    """Each limit a script tool asks for above the deployment's ceiling, with its location."""
    settings = document.get("settings")
    if kind.name != "tools" or document.get("kind") != "script" or not isinstance(settings, dict):
        return []
    return [
        (tuple(field.split(".")), rule)
        for field, rule in limits.problems(cast(dict[str, Any], settings))
    ]


def _kind(name: str) -> CatalogKind:
    from pilothouse.catalog import catalog_kind

    try:
        return catalog_kind(name)
    except KeyError as exc:
        raise NotFoundError(str(exc.args[0])) from None


def _entry(kind: CatalogKind, row: CatalogEntity) -> CatalogEntry:
    from pilothouse.catalog import spec_document

    # JSON-ready here, so prices stay exact decimal strings and dates ISO strings.
    document: dict[str, Any] = to_jsonable_python(spec_document(kind, kind.to_spec(row)))
    return CatalogEntry(
        kind=kind.name, key=row.key, version=row.version, active=row.active, document=document
    )


class CatalogApi(Facet):
    """Reads and changes the catalog of one tenant.

    Writes are validated exactly as ``pilothouse catalog import`` validates
    files, and are all or nothing. Every write bumps the tenant's catalog
    revision, so compiled actions are compiled again on their next turn.

    In the HTTP service every address an entity names (a provider's
    ``base_url``, a REST tool's URL, an OpenAPI document, an MCP client's
    ``url``, a vector store's ``connection``) must pass the tenant's egress
    policy too; a refused one is a validation issue naming the field.

    Args:
        database: the catalog's database.
        tenant: whose catalog.
        user: written to ``updated_by`` when a write names nobody.
        egress: the tenant's egress policy when writes are checked against
            it (``Pilothouse(catalog_egress=True)``).
        secrets: the tenant's secrets when writes are checked against them
            (the same switch): a reference to a secret the tenant does not
            have is refused, naming the field and the secret.
        allow_stdio: with ``egress``, tenants may write stdio MCP clients
            (``Settings.tenant_mcp_stdio``); commands the server runs.
        code_policy: what the entities may name as Python code (python tools'
            and advisors' ``implementation``, gateways' ``token_exchange``):
            the operator's grants (``Settings.catalog_code``) where tenants
            write the catalog; any importable name when None.
        script_limits: the deployment's ceilings on script tools' limits
            (``Settings.script_max_*``); a tool asking for more is refused.
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        user: str,
        *,
        egress: EgressOf | None = None,
        secrets: SecretsOf | None = None,
        allow_stdio: bool = False,
        code_policy: CodePolicy | None = None,
        script_limits: ScriptLimits | None = None,
    ) -> None:
        super().__init__(database, tenant)
        self._user = user
        self._egress: EgressOf = egress or (lambda: None)
        self._secrets: SecretsOf = secrets or (lambda: None)
        self._allow_stdio = allow_stdio
        self._code_policy = code_policy
        self._script_limits = script_limits

    def _policies(
        self,
    ) -> tuple[EgressPolicy | None, SecretResolver | None, CodePolicy] | None:
        """The writer's egress, secrets and code policies, or None when none is checked."""
        from pilothouse.tools._code import CodePolicy

        policy, secrets = self._egress(), self._secrets()
        code_policy = self._code_policy or CodePolicy.open()
        if policy is None and secrets is None and not code_policy.restricted:
            return None
        return policy, secrets, code_policy

    async def _check_document(self, kind: CatalogKind, document: Mapping[str, Any]) -> None:
        """Refuse one entity naming code, secrets or addresses the tenant may not use.

        And a script tool whose limits are above the deployment's ceilings.
        """
        policies = self._policies()
        if policies is None and self._script_limits is None:
            return
        from pilothouse.catalog import spec_document
        from pilothouse.catalog._validate import parse_spec

        spec = parse_spec(kind, document)  # raises every broken rule, as the write would
        written = spec_document(kind, spec)
        found = (
            _script_limit_issues(self._script_limits, kind, written)
            if self._script_limits is not None
            else []
        )
        if policies is not None:
            found += await _served_write_issues(
                policies[0],
                policies[1],
                self.tenant,
                kind,
                written,
                allow_stdio=self._allow_stdio,
                code_policy=policies[2],
            )
        if found:
            raise CatalogValidationError(
                [
                    ValidationIssue(kind.entity_name, spec.key, ".".join(map(str, loc)), rule)
                    for loc, rule in found
                ]
            )

    def _import_check(self) -> Callable[[ParsedCatalog], Any] | None:
        """The import's check of every entity (code, secrets, addresses, script limits)."""
        policies = self._policies()
        limits = self._script_limits
        if policies is None and limits is None:
            return None
        allow_stdio, tenant = self._allow_stdio, self.tenant

        async def check(parsed: ParsedCatalog) -> list[ValidationIssue]:
            from pilothouse.catalog import spec_document

            issues: list[ValidationIssue] = []
            for entries in parsed.entries.values():
                for entry in entries:
                    document = spec_document(entry.kind, entry.spec)
                    found = (
                        _script_limit_issues(limits, entry.kind, document)
                        if limits is not None
                        else []
                    )
                    if policies is not None:
                        found += await _served_write_issues(
                            policies[0],
                            policies[1],
                            tenant,
                            entry.kind,
                            document,
                            allow_stdio=allow_stdio,
                            code_policy=policies[2],
                        )
                    for location, rule in found:
                        issues.append(entry.issue(location, rule))
            return issues

        return check

    def _repository(self, session: Any, user: str | None = None) -> CatalogRepository:
        from pilothouse.catalog import CatalogRepository

        return CatalogRepository(session, self.tenant, user=user or self._user)

    async def validate(
        self, paths: Sequence[Path], *, against_stored: bool = False
    ) -> CatalogCheck:
        """Check catalog files without writing anything.

        Args:
            paths: files or folders (every ``*.yaml``/``*.yml`` below, sorted).
            against_stored: also accept references to the tenant's stored
                catalog, as an import does.

        Raises:
            CatalogValidationError: one issue per broken rule, located by file and line.
        """
        from pilothouse.catalog import ExistingCatalog, catalog_kind, load_existing, validate_paths

        existing = ExistingCatalog()
        if against_stored:
            await self._database.ensure_schema()
            async with self._database.sessions() as session:
                existing = await load_existing(session, self.tenant)
        parsed, issues = validate_paths(paths, existing)
        if not issues and self._script_limits is not None:
            # The deployment's ceilings, as an import here would check them.
            from pilothouse.catalog import spec_document

            for entries in parsed.entries.values():
                for entry in entries:
                    document = spec_document(entry.kind, entry.spec)
                    for location, rule in _script_limit_issues(
                        self._script_limits, entry.kind, document
                    ):
                        issues.append(entry.issue(location, rule))
        if issues:
            raise CatalogValidationError(issues)
        counts = parsed.counts()
        return CatalogCheck(
            files=len(parsed.files),
            entities=len(parsed),
            counts=counts,
            entity_names={kind: catalog_kind(kind).entity_name for kind in counts},
        )

    async def import_files(
        self, paths: Sequence[Path], *, user: str | None = None
    ) -> ImportSummary:
        """Validate catalog files, then upsert them into the tenant's catalog, all or nothing.

        Entities not in the files are kept.

        Args:
            paths: files or folders.
            user: written to ``updated_by``.

        Raises:
            CatalogValidationError: the files break rules; nothing was written.
            ConflictError: the database refused a write; nothing was written.
        """
        from pilothouse.catalog import import_catalog

        return await import_catalog(
            self._database, self.tenant, paths, user=user or self._user, check=self._import_check()
        )

    async def import_documents(
        self, documents: Sequence[Mapping[str, Any]], *, user: str | None = None
    ) -> ImportSummary:
        """Like :meth:`import_files`, for documents given in memory.

        Args:
            documents: shaped as the YAML files (kind names to lists of
                entities), e.g. built by ``pilothouse.testing.CatalogBuilder``;
                read in order, as files are. Issues name no file or line.
            user: written to ``updated_by``.
        """
        from pilothouse.catalog import import_documents

        return await import_documents(
            self._database,
            self.tenant,
            documents,
            user=user or self._user,
            check=self._import_check(),
        )

    @checks_own_input("text")
    async def import_text(
        self, text: str, *, source: str = "document", user: str | None = None
    ) -> ImportSummary:
        """Like :meth:`import_files`, for one YAML (or JSON) document given as text.

        Args:
            text: the document.
            source: what issues name as their file, e.g. ``body``.
            user: written to ``updated_by``.
        """
        with tempfile.TemporaryDirectory(prefix="pilothouse-import-") as folder:
            path = Path(folder) / "catalog.yaml"
            await anyio.Path(path).write_text(text, encoding="utf-8")
            try:
                return await self.import_files([path], user=user)
            except CatalogValidationError as exc:
                # The temporary file's path means nothing to the caller; the line does.
                raise CatalogValidationError(
                    [
                        ValidationIssue(i.entity, i.code, i.field, i.rule, source, i.line)
                        for i in exc.issues
                    ]
                ) from None

    async def export(self, kinds: Sequence[str] | None = None) -> str:
        """Return the tenant's catalog as YAML, in the format the imports read.

        Args:
            kinds: only these kinds (plural names, e.g. ``actions``); every kind by default.

        Raises:
            NotFoundError: an unknown kind (the message suggests the closest).
        """
        from pilothouse.catalog import export_catalog

        for name in kinds or ():
            _kind(name)
        # Works on a database whose upgrade stopped at too-long keys: exporting
        # is the way to shorten them.
        await self._readable()
        async with self._database.sessions() as session:
            return await export_catalog(session, self.tenant, kinds)

    async def export_document(self) -> dict[str, Any]:
        """Return the tenant's catalog as a JSON-ready document (kind name to entities)."""
        from pilothouse.catalog import export_document

        await self._database.ensure_schema()
        async with self._database.sessions() as session:
            document = await export_document(session, self.tenant)
        result: dict[str, Any] = to_jsonable_python(document)
        return result

    async def list_entries(self, kind: str, *, active: bool | None = None) -> list[CatalogEntry]:
        """Return the entities of a kind, sorted by business key.

        Args:
            kind: the kind's plural name, e.g. ``actions``.
            active: only active (True) or inactive (False) entities.

        Raises:
            NotFoundError: an unknown kind.
        """
        catalog_kind = _kind(kind)
        await self._database.ensure_schema()
        # Rendered inside the session: a spec reads relationships lazily.
        async with self._database.sessions() as session:
            rows = await self._repository(session).list(catalog_kind)
            return [
                _entry(catalog_kind, row) for row in rows if active is None or row.active is active
            ]

    async def get(self, kind: str, key: str) -> CatalogEntry:
        """Return one entity.

        Raises:
            NotFoundError: an unknown kind, or no such entity for this tenant.
        """
        catalog_kind = _kind(kind)
        await self._database.ensure_schema()
        async with self._database.sessions() as session:
            return _entry(catalog_kind, await self._repository(session).get(catalog_kind, key))

    async def create(
        self, kind: str, document: Mapping[str, Any], *, user: str | None = None
    ) -> CatalogEntry:
        """Validate and add one entity (version 1).

        Args:
            kind: the kind's plural name.
            document: the entity as in catalog YAML.
            user: written to ``updated_by``.

        Raises:
            CatalogValidationError: the document breaks rules.
            ConflictError: the key is taken.
        """
        catalog_kind = _kind(kind)
        await self._check_document(catalog_kind, document)
        await self._database.ensure_schema()
        async with self._database.sessions() as session, session.begin():
            row = await self._repository(session, user).create(catalog_kind, dict(document))
            # Rendering reads the new row's links (skills, tools, ...), not
            # loaded yet: in the session's greenlet, where lazy loads may run.
            return await session.run_sync(lambda _: _entry(catalog_kind, row))

    async def update(
        self,
        kind: str,
        key: str,
        document: Mapping[str, Any],
        *,
        expected_version: int,
        user: str | None = None,
    ) -> CatalogEntry:
        """Replace every field of an entity, if it is still at ``expected_version``.

        Its version is bumped when something changed.

        Raises:
            NotFoundError: no such entity.
            StaleVersionError: the entity changed since ``expected_version``.
            CatalogValidationError: the document breaks rules.
        """
        catalog_kind = _kind(kind)
        await self._check_document(catalog_kind, document)
        await self._database.ensure_schema()
        async with self._database.sessions() as session, session.begin():
            repository = self._repository(session, user)
            row = await repository.update(catalog_kind, key, dict(document), expected_version)
            # As in create: the replaced links load lazily while rendering.
            return await session.run_sync(lambda _: _entry(catalog_kind, row))

    async def delete(
        self,
        kind: str,
        key: str,
        *,
        expected_version: int | None = None,
        user: str | None = None,
    ) -> None:
        """Delete an entity nothing references.

        Raises:
            NotFoundError: no such entity.
            ConflictError: another entity references it (named in the message).
            StaleVersionError: it changed since ``expected_version``.
        """
        catalog_kind = _kind(kind)
        await self._database.ensure_schema()
        async with self._database.sessions() as session, session.begin():
            await self._repository(session, user).delete(catalog_kind, key, expected_version)

    def form(self, kind: str) -> KindForm:
        """Return the form of a kind: its fields, widgets and reference targets.

        Raises:
            NotFoundError: an unknown kind.
        """
        from pilothouse._facade.forms import describe_kind

        return describe_kind(_kind(kind).name)

    def document_from_form(
        self, kind: str, values: Mapping[str, str | Sequence[str]]
    ) -> dict[str, Any]:
        """Turn a submitted form of ``kind`` into its document, for :meth:`create`/:meth:`update`.

        Raises:
            NotFoundError: an unknown kind.
            InvalidFieldError: an unknown field, or a value that does not parse.
        """
        from pilothouse._facade.forms import document_from_form

        return document_from_form(self.form(kind), values)

    def entry(self, entity: CatalogEntity) -> CatalogEntry:
        """Return a catalog row the query API returned as its spec document.

        Raises:
            NotFoundError: the row is of no catalog kind.
        """
        from pilothouse.catalog import KINDS

        for kind in KINDS.values():
            if type(entity) is kind.model:
                return _entry(kind, entity)
        raise NotFoundError(f"{type(entity).__name__} is no catalog kind")
