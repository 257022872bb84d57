"""Request limits: body size (413) and per-key request rate (429 with Retry-After).

Rates are counted in memory, per process (a deployment with several
workers gets ``workers x rate`` per key at most), unless the deployment
shares a Redis (``PILOTHOUSE_REDIS_URL``): then :class:`SharedRateLimiter`
takes every request from one bucket per key in Redis, across all workers
and replicas, and falls back to the process's own bucket while Redis
cannot be reached.
"""

from __future__ import annotations

__all__ = ["UPLOAD_ROUTE", "BodySizeLimitMiddleware", "RateLimiter", "SharedRateLimiter"]

import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.exceptions import HTTPException

from pilothouse.server._problems import PROBLEM_MEDIA_TYPE, problem_bytes

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from pilothouse.api import Coordination

logger = logging.getLogger(__name__)


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """A token bucket per key: ``per_minute`` requests a minute, bursts up to that.

    Args:
        per_minute: the sustained rate and the bucket's capacity; 0 or less
            disables limiting.
        clock: a monotonic clock in seconds (injectable for tests).
    """

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._clock = clock
        self._buckets: dict[str, _Bucket] = {}

    def acquire(self, key: str, cost: int = 1) -> float | None:
        """Take ``cost`` tokens for ``key``, or none when there are not enough.

        Args:
            key: whose bucket.
            cost: how many requests this counts as (a JSON-RPC batch's calls).

        Returns:
            None when the request may proceed, else the seconds until a
            token is available (for ``Retry-After``).
        """
        if self.per_minute <= 0:
            return None
        now = self._clock()
        rate = self.per_minute / 60.0
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.per_minute), now)
        else:
            bucket.tokens = min(
                float(self.per_minute), bucket.tokens + (now - bucket.updated) * rate
            )
            bucket.updated = now
        if bucket.tokens >= cost:
            bucket.tokens -= cost
            return None
        if cost > self.per_minute:
            # More than a whole bucket: never possible; wait a full minute.
            return 60.0
        return (cost - bucket.tokens) / rate


class SharedRateLimiter:
    """A rate limit shared by every process through Redis, else this process's own.

    Args:
        local: the process's token buckets: used without Redis, and while
            Redis cannot be reached (a warning is logged, at most once a
            minute).
        coordination: the deployment's Redis, or None.
        name: which limit (keys of different limits never share a bucket).
    """

    def __init__(self, local: RateLimiter, coordination: Coordination | None, name: str) -> None:
        self.local = local
        self.coordination = coordination
        self.name = name
        self._warned = float("-inf")

    @property
    def per_minute(self) -> int:
        """The limit, requests a minute."""
        return self.local.per_minute

    async def acquire(self, key: str, cost: int = 1) -> float | None:
        """Take ``cost`` requests for ``key``; None, or the seconds until there are enough."""
        if self.coordination is None or self.local.per_minute <= 0:
            return self.local.acquire(key, cost)
        from redis.exceptions import RedisError

        try:
            return await self.coordination.take(f"{self.name}:{key}", self.local.per_minute, cost)
        except (RedisError, OSError) as exc:
            now = time.monotonic()
            if now - self._warned >= 60:
                self._warned = now
                logger.warning(
                    "redis unreachable (%s): the %s limit is counted per process meanwhile",
                    type(exc).__name__,
                    self.name,
                )
            return self.local.acquire(key, cost)


class _TooLarge(HTTPException):
    # An HTTPException, because FastAPI turns any other error met while it
    # reads the body into a 400 "error parsing the body"; this one it
    # re-raises, and the app's handler answers 413 problem+json.
    def __init__(self, max_bytes: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {max_bytes} bytes")


def _answered(path: str, routes: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``routes`` or below one (``/mcp/<name>``)."""
    return any(path == route or path.startswith(route.rstrip("/") + "/") for route in routes)


UPLOAD_ROUTE = re.compile(r"/v1/knowledge/collections/[^/]+/documents")
"""The document upload route, whose bodies have their own limit (``max_upload_bytes``)."""


class BodySizeLimitMiddleware:
    """Refuse request bodies above ``max_bytes`` with 413 problem+json.

    A declared ``Content-Length`` above the limit is refused before the body
    is read; a chunked body is counted as it streams and refused once it
    passes the limit, so an oversize body is never buffered whole.

    Args:
        app: the wrapped application.
        max_bytes: the largest accepted body; 0 or less disables the check.
        answered_by_route: paths whose route applies the same limit itself,
            answering in its own protocol (the MCP transports: a JSON-RPC
            error their clients report).
        routes: routes with a limit of their own, as ``(method, path
            pattern, max_bytes)`` (document uploads take files far larger
            than any JSON body); 0 or less disables the check there.
    """

    def __init__(
        self,
        app: ASGIApp,
        max_bytes: int,
        answered_by_route: tuple[str, ...] = (),
        routes: Sequence[tuple[str, re.Pattern[str], int]] = (),
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.answered_by_route = answered_by_route
        self.routes = tuple(routes)

    def _limit(self, scope: Scope) -> int:
        method, path = scope.get("method", ""), scope.get("path", "")
        for route_method, pattern, limit in self.routes:
            if method == route_method and pattern.fullmatch(path):
                return limit
        return self.max_bytes

    async def _refuse(self, send: Send, limit: int) -> None:
        body = problem_bytes(
            413,
            "Payload Too Large",
            f"the request body exceeds the limit of {limit} bytes",
        )
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or self.max_bytes <= 0
            or _answered(str(scope.get("path", "")), self.answered_by_route)
        ):
            await self.app(scope, receive, send)
            return
        limit = self._limit(scope)
        if limit <= 0:
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > limit:
                    await self._refuse(send, limit)
                    return
        received = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _TooLarge(limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            # Only answer when the app has not begun its own response.
            if not started:
                await self._refuse(send, limit)
