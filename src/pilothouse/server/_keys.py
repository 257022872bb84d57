"""API keys: create, list, revoke and verify, with only a digest stored.

A key reads ``ph_<prefix>_<secret>``: the prefix (8 hex characters) finds the
row without storing the key and names the key in listings; the secret (43
URL-safe characters, 256 random bits from :mod:`secrets`) makes it
unguessable. The database keeps SHA-256 of the whole key: keys are random,
so a fast hash leaves nothing to brute-force, and verifying stays cheap on
every request.
"""

from __future__ import annotations

__all__ = [
    "ADMIN_SCOPE",
    "KeyInfo",
    "create_key",
    "digest",
    "find_key",
    "list_keys",
    "parse_key",
    "revoke_key",
    "touch_key",
]

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update

from pilothouse.errors import NotFoundError
from pilothouse.store import Database
from pilothouse.store._access import ApiKey
from pilothouse.store._base import utcnow

ADMIN_SCOPE = "admin"
_PREFIX_BYTES = 4


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown about a key: everything but the key itself."""

    prefix: str
    name: str
    tenant: str
    scopes: tuple[str, ...]
    active: bool
    created_at: datetime
    last_used_at: datetime | None


def _info(row: ApiKey) -> KeyInfo:
    return KeyInfo(
        prefix=row.prefix,
        name=row.name,
        tenant=row.tenant,
        scopes=tuple(str(s) for s in row.scopes),
        active=row.active,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
    )


def digest(key: str) -> str:
    """Return the SHA-256 hex digest stored for ``key``."""
    return hashlib.sha256(key.encode()).hexdigest()


def parse_key(key: str) -> str | None:
    """Return the prefix of a well-formed key, else None."""
    parts = key.split("_", 2)
    if len(parts) != 3 or parts[0] != "ph" or not parts[1] or not parts[2]:
        return None
    return parts[1]


async def create_key(
    database: Database, tenant: str, *, name: str = "", admin: bool = False
) -> tuple[str, KeyInfo]:
    """Create a key for ``tenant``.

    Returns:
        The key (shown once; only its digest is stored) and its description.
    """
    await database.ensure_schema()
    prefix = secrets.token_hex(_PREFIX_BYTES)
    key = f"ph_{prefix}_{secrets.token_urlsafe(32)}"
    row = ApiKey(
        tenant=tenant,
        name=name,
        prefix=prefix,
        digest=digest(key),
        scopes=[ADMIN_SCOPE] if admin else [],
        active=True,
        created_at=utcnow(),
    )
    async with database.sessions() as session, session.begin():
        session.add(row)
    return key, _info(row)


async def list_keys(database: Database, tenant: str | None = None) -> list[KeyInfo]:
    """Return every key (of one tenant, when given), oldest first."""
    await database.ensure_schema()
    statement = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
    if tenant is not None:
        statement = statement.where(ApiKey.tenant == tenant)
    async with database.sessions() as session:
        return [_info(row) for row in await session.scalars(statement)]


async def revoke_key(database: Database, prefix: str) -> KeyInfo:
    """Deactivate the key with this prefix; it is refused from then on.

    Raises:
        NotFoundError: no key has this prefix.
    """
    await database.ensure_schema()
    async with database.sessions() as session, session.begin():
        row = await session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
        if row is None:
            raise NotFoundError(f"no API key with prefix '{prefix}'")
        row.active = False
        return _info(row)


async def find_key(database: Database, key: str) -> KeyInfo | None:
    """Return the active key matching ``key`` exactly, else None."""
    prefix = parse_key(key)
    if prefix is None:
        return None
    async with database.sessions() as session:
        row = await session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
        if row is None or not row.active:
            return None
        # Constant-time, so response timing says nothing about the digest.
        if not hmac.compare_digest(row.digest, digest(key)):
            return None
        return _info(row)


async def touch_key(database: Database, prefix: str, when: datetime) -> None:
    """Record that the key was used at ``when``."""
    async with database.sessions() as session, session.begin():
        await session.execute(
            update(ApiKey).where(ApiKey.prefix == prefix).values(last_used_at=when)
        )
