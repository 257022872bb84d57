"""Deployment settings, read from ``PILOTHOUSE_*`` environment variables.

A :class:`Settings` object is created once at the edge (CLI, server, tests)
and passed down; nothing reads the environment behind the caller's back.
"""

from __future__ import annotations

__all__ = ["Settings"]

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_database_url() -> str:
    return f"sqlite+aiosqlite:///{Path('.pilothouse') / 'pilothouse.db'}"


class Settings(BaseSettings):
    """Settings of one pilothouse deployment.

    Attributes:
        database_url: SQLAlchemy async URL, e.g. ``sqlite+aiosqlite:///x.db``
            or ``postgresql+asyncpg://user@host:5432/db``.
        secrets_file: optional ``NAME=value`` file that ``@secrets(NAME)``
            references resolve from (after the environment).
        tenant: the tenant used when a caller names none.
        audit: whether conversations record their audit timeline by default.
        user: the name written to ``updated_by`` for catalog changes.
    """

    model_config = SettingsConfigDict(env_prefix="PILOTHOUSE_", extra="ignore")

    database_url: str = Field(default_factory=_default_database_url)
    secrets_file: Path | None = None
    tenant: str = "default"
    audit: bool = True
    user: str = "pilothouse"
