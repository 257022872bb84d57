"""What several processes of one deployment share through Redis, when it is configured.

``PILOTHOUSE_REDIS_URL`` (``Settings.redis_url``) makes every worker and
replica of the service one coordinated whole:

- **rate limits**: one token bucket per key in Redis, taken by a Lua script
  (atomic: the read, the refill and the take are one step on the server, on
  the server's clock), so a key gets its rate once across all processes;
- **API-key revocation**: a revoke (from the service or ``pilothouse keys
  revoke``) is published on a channel; every process drops the key from its
  cache on receipt, so it is refused at once everywhere. Should the
  subscription drop, a process clears its whole cache when it subscribes
  again (a revoke may have been missed meanwhile), and the cache's short
  TTL (``PILOTHOUSE_SERVER_KEY_CACHE_SECONDS``) still bounds a key's life;
- **cancels**: a cancel for a turn another process runs is published to
  that process as well as written to the database; the owner stops the
  turn on receipt instead of at its next poll. The database request stays
  the fallback when a message is lost.

Every name lives under ``PILOTHOUSE_REDIS_PREFIX`` (``pilothouse:``), so
deployments (or tests) can share one Redis server. Without a URL nothing
here runs: limits and the key cache are per process, cancels go through
the database alone.
"""

from __future__ import annotations

__all__ = ["Coordination"]

import json
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import anyio

if TYPE_CHECKING:
    from redis.asyncio import Redis

logger = logging.getLogger(__name__)

# One token bucket per key: refill at per_minute/60 a second up to per_minute,
# take ``cost`` if there is enough. Returns "0" (allowed) or the seconds to
# wait. The server's TIME is the one clock every process agrees on.
_TAKE: Final = """
local capacity = tonumber(ARGV[1])
local cost = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rate = capacity / 60.0
local state = redis.call('HMGET', KEYS[1], 'tokens', 'updated')
local tokens = tonumber(state[1])
local updated = tonumber(state[2])
if tokens == nil or updated == nil then
  tokens = capacity
  updated = now
end
tokens = math.min(capacity, tokens + math.max(0, now - updated) * rate)
local wait = 0
if tokens >= cost then
  tokens = tokens - cost
elseif cost > capacity then
  wait = 60
else
  wait = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'updated', tostring(now))
redis.call('EXPIRE', KEYS[1], 120)
return tostring(wait)
"""

CancelHandler = Callable[[str, str, str], None]
"""Called with (owner, tenant, conversation uuid) of a published cancel."""
RevokedHandler = Callable[[str | None], None]
"""Called with a revoked key's prefix; None: forget every key (a missed message)."""


class Coordination:
    """The deployment's Redis: shared rate limits, revocations and cancels.

    Args:
        url: the Redis URL (``redis://host:6379/0``).
        prefix: put before every key and channel name.
    """

    def __init__(self, url: str, prefix: str) -> None:
        from redis.asyncio import Redis

        # from_url's **kwargs are untyped in redis-py; the ones passed are documented.
        self.client: Redis = Redis.from_url(  # pyright: ignore[reportUnknownMemberType]
            url, socket_connect_timeout=2, socket_timeout=5, health_check_interval=30
        )
        self.prefix = prefix
        self._cancel_channel = f"{prefix}cancel"
        self._revoked_channel = f"{prefix}keys-revoked"
        self._on_cancel: list[CancelHandler] = []
        self._on_revoked: list[RevokedHandler] = []
        self._take: Any = self.client.register_script(_TAKE)

    async def take(self, bucket: str, per_minute: int, cost: int = 1) -> float | None:
        """Take ``cost`` requests from the shared bucket; None, or the seconds to wait.

        Raises:
            redis.exceptions.RedisError: Redis could not be asked (the caller
                decides whether to fall back).
        """
        wait = float(
            await self._take(keys=[f"{self.prefix}rate:{bucket}"], args=[per_minute, cost])
        )
        return None if wait <= 0 else wait

    async def publish_cancel(self, owner: str, tenant: str, conversation_uuid: str) -> None:
        """Tell ``owner`` at once to cancel the conversation's running turn."""
        message = json.dumps({"owner": owner, "tenant": tenant, "uuid": conversation_uuid})
        await self.client.publish(self._cancel_channel, message)  # pyright: ignore[reportUnknownMemberType]

    async def publish_revoked(self, key_prefix: str) -> None:
        """Tell every process that the key with this prefix is revoked."""
        await self.client.publish(self._revoked_channel, key_prefix)  # pyright: ignore[reportUnknownMemberType]

    def on_cancel(self, handler: CancelHandler) -> None:
        """Call ``handler`` for every published cancel (while :meth:`listen` runs)."""
        self._on_cancel.append(handler)

    def on_revoked(self, handler: RevokedHandler) -> None:
        """Call ``handler`` for every published revocation (while :meth:`listen` runs)."""
        self._on_revoked.append(handler)

    def _dispatch(self, channel: str, data: str) -> None:
        if channel == self._revoked_channel:
            for handler in self._on_revoked:
                handler(data)
            return
        message = json.loads(data)
        for cancel in self._on_cancel:
            cancel(str(message["owner"]), str(message["tenant"]), str(message["uuid"]))

    async def listen(self, *, retry_seconds: float = 1.0) -> None:
        """Receive cancels and revocations until cancelled, subscribing again after a failure."""
        from redis.exceptions import RedisError

        while True:
            try:
                pubsub = self.client.pubsub(ignore_subscribe_messages=True)  # pyright: ignore[reportUnknownMemberType]
                try:
                    await pubsub.subscribe(self._cancel_channel, self._revoked_channel)
                    # Subscribed (again): a revoke published while not
                    # subscribed would be lost, so every cached key goes.
                    for handler in self._on_revoked:
                        handler(None)
                    async for message in pubsub.listen():  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                        if message.get("type") != "message":  # pyright: ignore[reportUnknownMemberType]
                            continue
                        channel = _text(message["channel"])
                        try:
                            self._dispatch(channel, _text(message["data"]))
                        except (ValueError, KeyError, TypeError):
                            logger.warning("ignored a malformed message on %s", channel)
                finally:
                    with anyio.CancelScope(shield=True):
                        await pubsub.aclose()
            except (RedisError, OSError) as exc:
                logger.warning(
                    "redis subscription lost (%s); subscribing again in %.0f s",
                    type(exc).__name__,
                    retry_seconds,
                )
                await anyio.sleep(retry_seconds)

    async def aclose(self) -> None:
        """Close the connections."""
        await self.client.aclose()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
