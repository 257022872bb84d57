"""The service's cache of verified API keys, in front of ``ph.keys``.

Keys are created, listed, revoked and verified by the facade
(:class:`~pilothouse.api.KeyApi`; only a digest is stored). A request
presents its key every time, so :class:`KeyCache` remembers the keys found
valid in the last few seconds and a busy key costs no database read per
request.
"""

from __future__ import annotations

__all__ = ["KeyCache"]

import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from pilothouse.api import KeyApi
from pilothouse.types import KeyInfo


@dataclass(frozen=True)
class _Verified:
    info: KeyInfo
    until: float


class KeyCache:
    """Verifies keys, remembering the ones found valid for a few seconds.

    A valid key is remembered under a SHA-256 digest of the whole key (never
    the key itself), so a request presenting it again within ``ttl`` seconds
    costs no database read. Unknown and revoked keys are never remembered:
    they are looked up on every request, and a key created while the server
    runs works at once. The price is that a key revoked from another
    process (``pilothouse keys revoke``) keeps working in a running server
    for at most ``ttl`` seconds; :meth:`revoke` (same process) and
    :meth:`forget` take effect at once.

    Args:
        keys: where keys are verified and revoked.
        ttl: seconds a verified key is trusted without a read; 0 or less
            reads the database on every request.
        clock: a monotonic clock in seconds (injectable for tests).
        limit: the most keys remembered; the oldest is dropped beyond it.
    """

    def __init__(
        self,
        keys: KeyApi,
        ttl: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        limit: int = 10_000,
    ) -> None:
        self._keys = keys
        self.ttl = ttl
        self._clock = clock
        self._limit = limit
        self._verified: dict[str, _Verified] = {}

    async def verify(self, key: str) -> KeyInfo | None:
        """Return the active key matching ``key`` exactly, else None."""
        key_digest = hashlib.sha256(key.encode()).hexdigest()
        found = self._verified.get(key_digest)
        if found is not None:
            if self._clock() < found.until:
                return found.info
            del self._verified[key_digest]
        info = await self._keys.verify(key)
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
        info = await self._keys.revoke(prefix)
        self.forget(prefix)
        return info
