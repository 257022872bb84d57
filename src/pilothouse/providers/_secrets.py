"""Resolution of ``@secrets(NAME)`` references.

The catalog stores secret *references*, never values. A reference is resolved
from the environment first, then from an optional ``NAME=value`` file, at the
moment a provider spec is compiled; errors name the secret, never a value.
"""

from __future__ import annotations

__all__ = ["SECRET_REFERENCE", "SecretResolver", "is_secret_reference"]

import re
from collections.abc import Mapping
from pathlib import Path

from pilothouse.errors import SecretNotFoundError

SECRET_REFERENCE = re.compile(r"@secrets\(\s*([A-Za-z_][A-Za-z0-9_.\-]*)\s*\)")
"""Matches one ``@secrets(NAME)`` reference; group 1 is the name."""


def is_secret_reference(value: str) -> bool:
    """Tell whether ``value`` contains at least one ``@secrets(NAME)`` reference.

    Args:
        value: a catalog field value.

    Returns:
        True when the value refers to a secret, in whole or in part.
    """
    return SECRET_REFERENCE.search(value) is not None


class SecretResolver:
    """Replaces ``@secrets(NAME)`` references with their values.

    Args:
        env: the environment to look names up in first (usually ``os.environ``,
            passed in so tests and tenants can supply their own).
        secrets_file: an optional file of ``NAME=value`` lines, consulted when
            the environment lacks a name. Blank lines and ``#`` comments are
            skipped; a value may be wrapped in single or double quotes.
    """

    def __init__(self, env: Mapping[str, str], secrets_file: Path | None = None) -> None:
        self._env = env
        self._secrets_file = secrets_file
        self._file_values: dict[str, str] | None = None

    def resolve(self, value: str) -> str:
        """Return ``value`` with every reference replaced by the secret's value.

        Args:
            value: a whole reference (``@secrets(KEY)``) or text embedding one
                or more (``Bearer @secrets(TOKEN)``); text without references
                is returned unchanged.

        Returns:
            The resolved text.

        Raises:
            SecretNotFoundError: a referenced name is defined nowhere.
        """
        return SECRET_REFERENCE.sub(lambda match: self.lookup(match.group(1)), value)

    def lookup(self, name: str) -> str:
        """Return the value of one secret by name.

        Args:
            name: the secret's name, e.g. ``OPENAI_API_KEY``.

        Returns:
            The value from the environment, else from the secrets file.

        Raises:
            SecretNotFoundError: the name is defined nowhere.
        """
        if name in self._env:
            return self._env[name]
        file_values = self._load_file()
        if name in file_values:
            return file_values[name]
        where = "the environment"
        if self._secrets_file is not None:
            where += f" or the secrets file {self._secrets_file}"
        raise SecretNotFoundError(f"secret '{name}' is not defined in {where}")

    def _load_file(self) -> dict[str, str]:
        # Read once: the file is consulted on every catalog compile, and a
        # changed file is picked up by making a new resolver.
        if self._file_values is None:
            self._file_values = (
                _parse_secrets_file(self._secrets_file)
                if self._secrets_file is not None and self._secrets_file.is_file()
                else {}
            )
        return self._file_values


def _parse_secrets_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        name = name.strip()
        if name.startswith("export "):
            name = name.removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        values[name] = value
    return values
