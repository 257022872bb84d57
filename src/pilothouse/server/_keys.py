"""API keys: create, list, revoke and verify, with only a digest stored.

A key reads ``ph_<prefix>_<secret>``: the prefix (8 hex characters) finds the
row without storing the key and names the key in listings; the secret (43
URL-safe characters, 256 random bits from :mod:`secrets`) makes it
unguessable. The database keeps SHA-256 of the whole key: keys are random,
so a fast hash leaves nothing to brute-force, and verifying stays cheap on
every request. :class:`KeyCache` remembers keys verified in the last few
seconds, so a busy key costs no database read per request.
"""

from __future__ import annotations

__all__ = [
    "ADMIN_SCOPE",
    "KeyCache",
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
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import Connection, Row, Select, Table, Update, bindparam, select, update

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


def _info(row: ApiKey | Row[*tuple[Any, ...]]) -> KeyInfo:
    """The key's public facts, from its ORM row or a Core row of the same columns."""
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


_API_KEY = cast(Table, ApiKey.__table__)


@cache
def _find_statement() -> Select[*tuple[Any, ...]]:
    # Built once: on every request's path, and a statement object keeps its
    # cache key. Only the columns a request needs.
    columns = _API_KEY.c
    return select(
        columns.prefix,
        columns.digest,
        columns.tenant,
        columns.name,
        columns.scopes,
        columns.active,
        columns.created_at,
        columns.last_used_at,
    ).where(columns.prefix == bindparam("b_prefix"))


@cache
def _touch_statement() -> Update:
    columns = _API_KEY.c
    return (
        update(_API_KEY)
        .where(columns.prefix == bindparam("b_prefix"))
        .values(last_used_at=bindparam("b_when"))
    )


def _read_key(connection: Connection, prefix: str) -> Row[*tuple[Any, ...]] | None:
    return connection.execute(_find_statement(), {"b_prefix": prefix}).first()


def _verified(row: Row[*tuple[Any, ...]] | None, key_digest: str) -> KeyInfo | None:
    if row is None or not row.active:
        return None
    # Constant-time, so response timing says nothing about the digest.
    if not hmac.compare_digest(row.digest, key_digest):
        return None
    return _info(row)


async def find_key(database: Database, key: str) -> KeyInfo | None:
    """Return the active key matching ``key`` exactly, else None."""
    prefix = parse_key(key)
    if prefix is None:
        return None
    # One short transaction through the store's fastest path (SQLAlchemy
    # Core, no ORM session): it runs on every request a cache does not answer.
    return _verified(await database.transaction(_read_key, prefix), digest(key))


async def touch_key(database: Database, prefix: str, when: datetime) -> None:
    """Record that the key was used at ``when``."""
    await database.transaction(_touch, prefix, when)


def _touch(connection: Connection, prefix: str, when: datetime) -> None:
    connection.execute(_touch_statement(), {"b_prefix": prefix, "b_when": when})


@dataclass(frozen=True)
class _Verified:
    info: KeyInfo
    until: float


class KeyCache:
    """Verifies keys, remembering the ones found valid for a few seconds.

    A valid key is remembered under the digest of the whole key (never the
    key itself), so a request presenting it again within ``ttl`` seconds
    costs no database read. Unknown and revoked keys are never remembered:
    they are looked up on every request, and a key created while the server
    runs works at once. The price is that a key revoked from another
    process (``pilothouse keys revoke``) keeps working in a running server
    for at most ``ttl`` seconds; :meth:`revoke` (same process) and
    :meth:`forget` take effect at once.

    Args:
        database: where keys are stored.
        ttl: seconds a verified key is trusted without a read; 0 or less
            reads the database on every request.
        clock: a monotonic clock in seconds (injectable for tests).
        limit: the most keys remembered; the oldest is dropped beyond it.
    """

    def __init__(
        self,
        database: Database,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        limit: int = 10_000,
    ) -> None:
        self._db = database
        self.ttl = ttl
        self._clock = clock
        self._limit = limit
        self._verified: dict[str, _Verified] = {}

    async def verify(self, key: str) -> KeyInfo | None:
        """Return the active key matching ``key`` exactly, else None."""
        prefix = parse_key(key)
        if prefix is None:
            return None
        key_digest = digest(key)
        found = self._verified.get(key_digest)
        if found is not None:
            if self._clock() < found.until:
                return found.info
            del self._verified[key_digest]
        info = _verified(await self._db.transaction(_read_key, prefix), key_digest)
        if info is not None and self.ttl > 0:
            if len(self._verified) >= self._limit:
                # Oldest first: dicts keep insertion order.
                del self._verified[next(iter(self._verified))]
            self._verified[key_digest] = _Verified(info, self._clock() + self.ttl)
        return info

    def forget(self, prefix: str | None = None) -> None:
        """Drop the remembered key with this prefix (every key when None)."""
        if prefix is None:
            self._verified.clear()
            return
        for key_digest in [d for d, v in self._verified.items() if v.info.prefix == prefix]:
            del self._verified[key_digest]

    async def revoke(self, prefix: str) -> KeyInfo:
        """Revoke the key with this prefix; this process refuses it at once.

        Raises:
            NotFoundError: no key has this prefix.
        """
        info = await revoke_key(self._db, prefix)
        self.forget(prefix)
        return info
