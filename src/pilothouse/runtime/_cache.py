"""Where the cache advisor keeps responses: an in-process LRU or Redis.

A backend stores opaque bytes under a key for a time. Backends translate
their own failures into :class:`CacheUnavailable`, in one place each, so the
cache advisor can fall back to calling the model: a cache must never be the
reason a turn fails.
"""

from __future__ import annotations

__all__ = [
    "CacheBackend",
    "CacheUnavailable",
    "MemoryCache",
    "RedisCache",
    "RedisClientPool",
    "RedisFactory",
]

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from pilothouse.errors import PilothouseError
from pilothouse.providers import redact

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger("pilothouse.advisor")

RedisFactory = Callable[[str], "Redis"]
"""Builds (or hands out a shared) Redis client for a URL."""


class CacheUnavailable(PilothouseError):
    """The cache backend could not be reached; the caller goes on without it."""


class CacheBackend(Protocol):
    """Stores bytes under a key for a limited time."""

    async def get(self, key: str) -> bytes | None:
        """Return the value stored under ``key``, or ``None`` when absent or expired.

        Raises:
            CacheUnavailable: the backend cannot be reached.
        """
        ...

    async def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        """Store ``value`` under ``key`` for ``ttl_seconds``.

        Raises:
            CacheUnavailable: the backend cannot be reached.
        """
        ...


class MemoryCache:
    """An in-process LRU cache with a time to live per entry.

    Args:
        max_entries: how many entries it keeps; the least recently used goes first.
        clock: monotonic seconds (tests inject a fake clock to expire entries).
    """

    def __init__(
        self, max_entries: int = 1000, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    async def get(self, key: str) -> bytes | None:
        """Return the live value under ``key`` and mark it recently used."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    async def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        """Store ``value``, evicting the least recently used entry when full."""
        self._entries[key] = (self._clock() + ttl_seconds, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)


class RedisCache:
    """A Redis-backed cache, shared by every process that uses the same server.

    After a failure it stops asking Redis for ``retry_after`` seconds, so an
    outage costs one connect timeout and one warning, not one per model call.

    Args:
        client: a ``redis.asyncio.Redis`` client.
        prefix: prepended to every key, so the cache keeps to its own keys.
        retry_after: seconds to bypass Redis after a failure.
        clock: monotonic seconds (replaceable in tests).
    """

    def __init__(
        self,
        client: Redis,
        *,
        prefix: str = "pilothouse:cache:",
        retry_after: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.prefix = prefix
        self._retry_after = retry_after
        self._clock = clock
        self._down_until = 0.0

    async def get(self, key: str) -> bytes | None:
        """Return the value under ``prefix + key``; ``None`` while Redis is bypassed."""
        if self._bypassed():
            return None
        try:
            value: bytes | str | None = await self.client.get(self.prefix + key)
        except Exception as exc:
            raise self._unavailable(exc) from exc
        if isinstance(value, str):
            # A client built with decode_responses=True hands back text.
            return value.encode()
        return value

    async def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
        """Store ``value`` with a millisecond expiry; skipped while Redis is bypassed."""
        if self._bypassed():
            return
        try:
            await self.client.set(self.prefix + key, value, px=max(1, round(ttl_seconds * 1000)))
        except Exception as exc:
            raise self._unavailable(exc) from exc

    def _bypassed(self) -> bool:
        return self._clock() < self._down_until

    def _unavailable(self, exc: Exception) -> Exception:
        from redis.exceptions import RedisError

        if not isinstance(exc, RedisError | OSError):
            # Not an outage but a bug (e.g. a wrong argument): let it surface.
            return exc
        self._down_until = self._clock() + self._retry_after
        return CacheUnavailable(f"redis: {type(exc).__name__}: {redact(str(exc))}")


class RedisClientPool:
    """Hands out one Redis client per URL and closes them all at shutdown.

    Pass it as ``redis_factory`` to :func:`resolve_advisor`, so actions that
    are compiled again (each catalog version) share connections instead of
    opening a new pool each time.

    Args:
        timeout_seconds: connect and socket timeout, so a hung server costs
            the turn at most this long.
    """

    def __init__(self, timeout_seconds: float = 0.5) -> None:
        self._timeout = timeout_seconds
        self._clients: dict[str, Redis] = {}

    def __call__(self, url: str) -> Redis:
        """Return the client for ``url``, creating it on first use."""
        client = self._clients.get(url)
        if client is None:
            from redis.asyncio import Redis

            # from_url's **kwargs are untyped in redis-py; the ones passed are documented.
            client = Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
                url, socket_timeout=self._timeout, socket_connect_timeout=self._timeout
            )
            self._clients[url] = client
        return client

    async def aclose(self) -> None:
        """Close every client handed out."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
