"""Resolution of ``@secrets(NAME)`` references, each tenant in its own scope.

The catalog stores secret *references*, never values. A reference is resolved
at the moment a provider spec is compiled or a tool is called; errors name the
secret, never a value.

In a deployment (:class:`DeploymentSecrets`) every tenant has its own scope:
its section of the secrets file (``[acme]``; lines before any section are the
default tenant's, ``[*]`` is every tenant's) and the environment variables the
operator mapped to it (``Settings.secrets_env``). The process environment is
never a tenant's secret source otherwise: a tenant writes the catalog, and a
reference to ``PILOTHOUSE_DATABASE_URL`` must not carry the server's own
configuration to a host the tenant chose. A resolver always serves one scope,
and the row's tenant picks it (:meth:`SecretSource.for_tenant`), so a row
stored for one tenant never resolves another's secret.
"""

from __future__ import annotations

__all__ = [
    "EVERY_TENANT",
    "SECRET_REFERENCE",
    "DeploymentSecrets",
    "SecretResolver",
    "SecretSource",
    "is_secret_reference",
    "parse_env_mapping",
    "secret_names",
]

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

from pilothouse.errors import SecretNotFoundError

SECRET_REFERENCE = re.compile(r"@secrets\(\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*\)")
"""Matches one ``@secrets(NAME)`` reference; group 1 is the name."""

EVERY_TENANT = "*"
"""The section of the secrets file, and the key of ``secrets_env``, every tenant shares."""

_ENV_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_SECTION = re.compile(r"^\[\s*([^\]]+?)\s*\]$")
_DOCS = "docs/security.md#secrets"


def is_secret_reference(value: str) -> bool:
    """Tell whether ``value`` contains at least one ``@secrets(NAME)`` reference.

    Args:
        value: a catalog field value.

    Returns:
        True when the value refers to a secret, in whole or in part.
    """
    return SECRET_REFERENCE.search(value) is not None


def secret_names(value: str) -> list[str]:
    """The names ``value`` refers to, in order (``Bearer @secrets(A)`` gives ``["A"]``).

    Args:
        value: a catalog field value.

    Returns:
        Every referenced name, repeats kept.
    """
    return [match.group(1) for match in SECRET_REFERENCE.finditer(value)]


class SecretSource(Protocol):
    """Where resolvers come from: one scope per tenant.

    A plain :class:`SecretResolver` is one scope and serves every tenant it is
    given to (tests, a single-tenant program); :class:`DeploymentSecrets`
    gives each tenant its own.
    """

    def for_tenant(self, tenant: str) -> SecretResolver:
        """The resolver of ``tenant``'s secrets.

        Args:
            tenant: the tenant whose catalog row holds the reference.

        Returns:
            A resolver that knows only that tenant's secrets.
        """
        ...


class SecretResolver:
    """Replaces ``@secrets(NAME)`` references with the values of one scope.

    Args:
        env: the names to look up first (a test's or a program's own mapping;
            a deployment passes one tenant's values through
            :class:`DeploymentSecrets`, never ``os.environ`` whole).
        secrets_file: an optional file of ``NAME=value`` lines, consulted when
            ``env`` lacks a name: its lines before any ``[section]``. Blank
            lines and ``#`` comments are skipped; a value may be wrapped in
            single or double quotes.
        where: what errors say the name is missing from.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        secrets_file: Path | None = None,
        *,
        where: str | None = None,
    ) -> None:
        self._env = env
        self._secrets_file = secrets_file
        self._file_values: dict[str, str] | None = None
        if where is None:
            where = "the environment"
            if secrets_file is not None:
                where += f" or the secrets file {secrets_file}"
        self._where = where

    def for_tenant(self, tenant: str) -> SecretResolver:
        """This resolver: one scope, shared by every tenant it serves.

        Args:
            tenant: ignored; a deployment's scopes come from :class:`DeploymentSecrets`.

        Returns:
            ``self``.
        """
        del tenant
        return self

    def resolve(self, value: str) -> str:
        """Return ``value`` with every reference replaced by the secret's value.

        Args:
            value: a whole reference (``@secrets(KEY)``) or text embedding one
                or more (``Bearer @secrets(TOKEN)``); text without references
                is returned unchanged.

        Returns:
            The resolved text.

        Raises:
            SecretNotFoundError: a referenced name is not in this scope.
        """
        return SECRET_REFERENCE.sub(lambda match: self.lookup(match.group(1)), value)

    def defines(self, name: str) -> bool:
        """Tell whether this scope has a secret called ``name``.

        Args:
            name: the secret's name.

        Returns:
            True when :meth:`lookup` would find it.
        """
        return name in self._env or name in self._load_file()

    def lookup(self, name: str) -> str:
        """Return the value of one secret by name.

        Args:
            name: the secret's name, e.g. ``OPENAI_API_KEY``.

        Returns:
            The value from ``env``, else from the secrets file.

        Raises:
            SecretNotFoundError: the name is not in this scope.
        """
        if name in self._env:
            return self._env[name]
        file_values = self._load_file()
        if name in file_values:
            return file_values[name]
        raise SecretNotFoundError(f"secret '{name}' is not defined in {self._where}")

    def _load_file(self) -> dict[str, str]:
        # Read once: the file is consulted on every catalog compile, and a
        # changed file is picked up by making a new resolver.
        if self._file_values is None:
            self._file_values = (
                parse_secrets_file(self._secrets_file).get(None, {})
                if self._secrets_file is not None and self._secrets_file.is_file()
                else {}
            )
        return self._file_values


class DeploymentSecrets:
    """A deployment's secrets: one scope per tenant, none from the environment unless mapped.

    A tenant's scope is, in this order: the environment variables
    ``env_mapping`` maps to it, its section of the secrets file, then what
    both give every tenant (``*``). Lines of the file before any section
    belong to ``default_tenant``.

    Args:
        environ: the process environment, read only for mapped names.
        secrets_file: the ``NAME=value`` file with ``[tenant]`` sections, if any.
        env_mapping: tenant (or ``*``) to entries ``NAME`` (the variable of
            that name) or ``NAME=VARIABLE`` (``@secrets(NAME)`` reads
            ``VARIABLE``), as :func:`parse_env_mapping` checks them.
        default_tenant: whose the file's lines before any section are.
    """

    def __init__(
        self,
        environ: Mapping[str, str],
        secrets_file: Path | None = None,
        env_mapping: Mapping[str, Sequence[str]] | None = None,
        *,
        default_tenant: str = "default",
    ) -> None:
        self._secrets_file = secrets_file
        # Only the mapped variables are kept: the rest of the environment is
        # nobody's secret, so this object never holds it.
        self._mapped = {
            tenant: {
                name: environ[variable]
                for name, variable in parse_env_mapping(tenant, entries).items()
                if variable in environ
            }
            for tenant, entries in (env_mapping or {}).items()
        }
        self._default_tenant = default_tenant
        self._sections: dict[str | None, dict[str, str]] | None = None
        self._scopes: dict[str, SecretResolver] = {}

    def for_tenant(self, tenant: str) -> SecretResolver:
        """The resolver of ``tenant``'s scope (made once per tenant).

        Args:
            tenant: the tenant whose catalog row holds the reference.

        Returns:
            A resolver of that tenant's secrets only.
        """
        scope = self._scopes.get(tenant)
        if scope is None:
            values: dict[str, str] = {}
            sections = self._file_sections()
            own_file = dict(sections.get(tenant, {}))
            if tenant == self._default_tenant:
                own_file = {**sections.get(None, {}), **own_file}
            # Later updates win: shared first, then the tenant's own; within
            # each, the file first, then the operator's mapped variables.
            for source in (
                sections.get(EVERY_TENANT, {}),
                self._mapped.get(EVERY_TENANT, {}),
                own_file,
                self._mapped.get(tenant, {}),
            ):
                values.update(source)
            where = (
                f"the secrets of tenant '{tenant}' (its section of the secrets file or the "
                f"environment variables PILOTHOUSE_SECRETS_ENV maps to it; see {_DOCS})"
            )
            scope = SecretResolver(values, where=where)
            self._scopes[tenant] = scope
        return scope

    def _file_sections(self) -> dict[str | None, dict[str, str]]:
        # Read once, as SecretResolver does: a new Pilothouse reads it again.
        if self._sections is None:
            path = self._secrets_file
            self._sections = parse_secrets_file(path) if path is not None and path.is_file() else {}
        return self._sections


def parse_env_mapping(tenant: str, entries: Sequence[str]) -> dict[str, str]:
    """Check one tenant's entries of ``Settings.secrets_env``: secret name to variable.

    Args:
        tenant: the tenant (or ``*``) the entries are for, named in errors.
        entries: ``NAME`` (``@secrets(NAME)`` reads the variable ``NAME``) or
            ``NAME=VARIABLE``.

    Returns:
        Each secret name with the environment variable it reads.

    Raises:
        ValueError: an entry that is not a secret name and a variable name.
    """
    mapping: dict[str, str] = {}
    for entry in entries:
        name, separator, variable = (part.strip() for part in entry.partition("="))
        if not separator:
            variable = name
        if not _SECRET_NAME.match(name) or not _ENV_VARIABLE.match(variable):
            raise ValueError(
                f"secrets_env entry '{entry}' of tenant '{tenant}' is not NAME or "
                "NAME=VARIABLE (letters, digits and _; a secret name may also hold . and -)"
            )
        mapping[name] = variable
    return mapping


def parse_secrets_file(path: Path) -> dict[str | None, dict[str, str]]:
    """Read a secrets file: each ``[section]``'s ``NAME=value`` lines.

    Args:
        path: the file.

    Returns:
        Section name (a tenant, ``*``, or None for the lines before any
        section) to its values.
    """
    sections: dict[str | None, dict[str, str]] = {}
    values = sections.setdefault(None, {})
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        section = _SECTION.match(line)
        if section is not None:
            values = sections.setdefault(section.group(1), {})
            continue
        if "=" not in line:
            continue
        name, _, value = line.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name.removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[name] = value
    return sections
