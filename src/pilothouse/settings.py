"""Deployment settings, read from ``PILOTHOUSE_*`` environment variables.

A :class:`Settings` object is created once at the edge (CLI, server, tests)
and passed down; nothing reads the environment behind the caller's back.
"""

from __future__ import annotations

__all__ = ["Settings"]

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:
    from pilothouse.store import Database


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
        database_pool_size: connections kept open to a server database
            (PostgreSQL; SQLite uses one writer thread and ignores it).
        database_max_overflow: further connections opened under load.
        database_pool_timeout: seconds a transaction waits for a connection
            before it fails.
        provider_max_connections: connections to one provider kept open and
            in flight at once; more concurrent model calls wait for one.
        provider_connect_timeout: seconds to open a connection to a provider.
        provider_timeout: seconds a model call may take in all.
        script_tools: how catalog script tools run: ``sandbox`` (the
            default: in a bubblewrap sandbox without network, files or
            environment of the server; refused where ``bwrap`` is missing),
            ``trusted`` (a plain child process, for a single-tenant
            deployment that trusts every catalog writer) or ``off``. A
            deployment setting: no catalog or tenant field can change it.
        egress_allow: private or local hosts and networks (``10.0.0.0/8``,
            ``model-server.internal``, ``127.0.0.1``) that callers may make
            the service reach through the URLs they choose (``/v1/invoke``
            ``baseUrl`` and ``mcpServers``); public addresses are always
            allowed. Comma-separated in ``PILOTHOUSE_EGRESS_ALLOW``.
        lease_seconds: how long another host's serving process may go
            without a heartbeat before the turns it runs are presumed
            orphaned and marked ``ST`` (processes on this host are checked
            by their pid at once).
    """

    model_config = SettingsConfigDict(env_prefix="PILOTHOUSE_", extra="ignore")

    database_url: str = Field(default_factory=_default_database_url)
    secrets_file: Path | None = None
    tenant: str = "default"
    audit: bool = True
    user: str = "pilothouse"
    # Sized for hundreds of concurrent turns: a turn holds a connection only
    # for each short transaction, but SQLAlchemy's default (5 + 10) made
    # 1,000 concurrent conversations fail with pool timeouts (bench, issue 6).
    database_pool_size: int = Field(default=20, ge=1)
    database_max_overflow: int = Field(default=40, ge=0)
    database_pool_timeout: float = Field(default=30.0, gt=0)
    # httpx's default (100 connections, 20 kept alive) capped in-flight model
    # calls per provider at 100 and reconnected the rest.
    provider_max_connections: int = Field(default=1000, ge=1)
    provider_connect_timeout: float = Field(default=10.0, gt=0)
    provider_timeout: float = Field(default=600.0, gt=0)
    script_tools: Literal["sandbox", "trusted", "off"] = "sandbox"
    egress_allow: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list[str]())
    lease_seconds: float = Field(default=30.0, gt=0)

    @field_validator("egress_allow", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        # The environment gives one string: hosts and networks, comma-separated.
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("egress_allow")
    @classmethod
    def _valid_hosts(cls, value: list[str]) -> list[str]:
        from pilothouse.providers._egress import EgressPolicy

        EgressPolicy.parse(value)  # raises ValueError naming a bad entry
        return value

    def open_database(self) -> Database:
        """Return the configured database (not connected until first use)."""
        from pilothouse.store import Database

        return Database(
            self.database_url,
            pool_size=self.database_pool_size,
            max_overflow=self.database_max_overflow,
            pool_timeout=self.database_pool_timeout,
        )
