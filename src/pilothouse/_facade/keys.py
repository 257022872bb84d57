"""API keys: create, list, revoke and verify, with only a digest stored.

A key reads ``ph_<prefix>_<secret>``: the prefix (8 hex characters) finds the
row without storing the key and names the key in listings; the secret (43
URL-safe characters, 256 random bits from :mod:`secrets`) makes it
unguessable. The database keeps SHA-256 of the whole key: keys are random,
so a fast hash leaves nothing to brute-force, and verifying stays cheap on
every request.

Browser sessions (:meth:`KeyApi.open_session`) are kept the same way: the
browser's cookie holds a random session id, the ``ui_session`` table its
digest, the key's prefix and its expiry. A session acts for its key while
the key is active, until it expires or is ended.
"""

from __future__ import annotations

__all__ = ["KeyApi", "digest", "parse_key"]

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Row, Select, Table, Update, bindparam, delete, select, update

from pilothouse._facade.facet import Facet
from pilothouse.errors import InvalidFieldError, NotFoundError, UnauthorizedError
from pilothouse.store import Database
from pilothouse.store._access import ApiKey, UiSession
from pilothouse.store._base import utcnow
from pilothouse.types import ADMIN_SCOPE, MCP_TOOL_SCOPE, KeyInfo

if TYPE_CHECKING:
    from pilothouse._coordination import Coordination

_PREFIX_BYTES = 4


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


def _touch(connection: Connection, prefix: str, when: datetime) -> None:
    connection.execute(_touch_statement(), {"b_prefix": prefix, "b_when": when})


class KeyApi(Facet):
    """The API keys of the HTTP service (of every tenant: keys are the deployment's).

    Only a key's digest is stored; :meth:`create` is the one time the key
    itself is seen.
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        coordination: Callable[[], Coordination | None] = lambda: None,
    ) -> None:
        super().__init__(database, tenant)
        self._coordination = coordination

    async def create(
        self,
        *,
        tenant: str | None = None,
        name: str = "",
        admin: bool = False,
        mcp_tools: Sequence[str] = (),
    ) -> tuple[str, KeyInfo]:
        """Create a key.

        Args:
            tenant: the tenant the key acts for; the facade's by default.
            name: a label shown in listings.
            admin: allow catalog writes (the admin scope).
            mcp_tools: name patterns (globs) of the MCP server tools the key
                may list and call; empty for every tool of its tenant.

        Returns:
            The key (shown once; only its digest is stored) and its description.

        Raises:
            InvalidFieldError: an empty pattern or one with whitespace.
        """
        for pattern in mcp_tools:
            if not pattern or any(c.isspace() for c in pattern):
                raise InvalidFieldError(
                    "mcp_tools",
                    f"{pattern!r} is not a tool name pattern; write a name or a glob "
                    "such as 'action_*', without spaces",
                )
        await self._database.ensure_schema()
        prefix = secrets.token_hex(_PREFIX_BYTES)
        key = f"ph_{prefix}_{secrets.token_urlsafe(32)}"
        row = ApiKey(
            tenant=tenant or self.tenant,
            name=name,
            prefix=prefix,
            digest=digest(key),
            scopes=[*([ADMIN_SCOPE] if admin else []), *(MCP_TOOL_SCOPE + p for p in mcp_tools)],
            active=True,
            created_at=utcnow(),
        )
        async with self._database.sessions() as session, session.begin():
            session.add(row)
        return key, _info(row)

    async def list_keys(self, *, tenant: str | None = None) -> list[KeyInfo]:
        """Return the keys of one tenant, or of every tenant when None; oldest first."""
        await self._database.ensure_schema()
        statement = select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)
        if tenant is not None:
            statement = statement.where(ApiKey.tenant == tenant)
        async with self._database.sessions() as session:
            return [_info(row) for row in await session.scalars(statement)]

    async def revoke(self, prefix: str) -> KeyInfo:
        """Deactivate the key with this prefix; it is refused from then on.

        With Redis configured (``PILOTHOUSE_REDIS_URL``) the revocation is
        published, and every process of the service drops the key from its
        cache at once; without it, a server that remembers verified keys
        (for ``PILOTHOUSE_SERVER_KEY_CACHE_SECONDS``) may accept it until it
        reads it again.

        Raises:
            NotFoundError: no key has this prefix.
        """
        await self._database.ensure_schema()
        async with self._database.sessions() as session, session.begin():
            row = await session.scalar(select(ApiKey).where(ApiKey.prefix == prefix))
            if row is None:
                raise NotFoundError(f"no API key with prefix '{prefix}'")
            row.active = False
            info = _info(row)
        coordination = self._coordination()
        if coordination is not None:
            # After the commit: a process that drops the key and reads it
            # again must find it revoked.
            await coordination.publish_revoked(prefix)
        return info

    async def verify(self, key: str) -> KeyInfo | None:
        """Return the active key matching ``key`` exactly, else None."""
        prefix = parse_key(key)
        if prefix is None:
            return None
        # One short transaction through the store's fastest path (SQLAlchemy
        # Core, no ORM session): it runs on every request a cache does not answer.
        row = await self._database.transaction(_read_key, prefix)
        if row is None or not row.active:
            return None
        # Constant-time, so response timing says nothing about the digest.
        if not hmac.compare_digest(row.digest, digest(key)):
            return None
        return _info(row)

    async def touch(self, prefix: str) -> None:
        """Record that the key with this prefix was used now."""
        await self._database.transaction(_touch, prefix, utcnow())

    async def open_session(self, key: str, lifetime: float) -> str:
        """Open a browser session for ``key``; return its id (for a cookie, never stored).

        Sessions past their expiry are deleted on the way.

        Args:
            key: the API key logging in.
            lifetime: seconds until the session expires.

        Raises:
            UnauthorizedError: the key is unknown or revoked.
            InvalidFieldError: ``lifetime`` is not a positive number.
        """
        if not lifetime > 0:
            raise InvalidFieldError(
                "lifetime", f"must be a positive number of seconds, not {lifetime}"
            )
        info = await self.verify(key)
        if info is None:
            raise UnauthorizedError("the API key is unknown or revoked")
        session_id = secrets.token_urlsafe(32)
        now = utcnow()
        async with self._database.sessions() as session, session.begin():
            await session.execute(delete(UiSession).where(UiSession.expires_at <= now))
            session.add(
                UiSession(
                    digest=digest(session_id),
                    key_prefix=info.prefix,
                    created_at=now,
                    expires_at=now + timedelta(seconds=lifetime),
                )
            )
        return session_id

    async def session_key(self, session_id: str) -> KeyInfo | None:
        """The active key of an unexpired browser session, else None (ended, expired, revoked)."""
        statement = (
            select(ApiKey)
            .join(UiSession, UiSession.key_prefix == ApiKey.prefix)
            .where(
                UiSession.digest == digest(session_id),
                UiSession.expires_at > utcnow(),
                ApiKey.active.is_(True),
            )
        )
        async with self._database.sessions() as session:
            row = await session.scalar(statement)
            return None if row is None else _info(row)

    async def end_session(self, session_id: str) -> None:
        """End a browser session (logout): its id opens nothing from now on."""
        async with self._database.sessions() as session, session.begin():
            await session.execute(delete(UiSession).where(UiSession.digest == digest(session_id)))
