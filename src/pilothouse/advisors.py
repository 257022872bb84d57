"""Advisors: interceptors around each model call, and the built-in ones.

An advisor has a ``name``, an ``order`` and an async ``around(call, next)``:
it gets the :class:`AdvisedCall` and :data:`Next`, the rest of the chain.
It may change the call, answer without calling ``next`` (a cache hit),
inspect or replace the response, or raise :class:`ContentBlocked` to end
the turn with finish reason ``CF``. An :class:`AdvisorChain` runs advisors
highest order outermost; :func:`resolve_advisor` builds one from a catalog
advisor row. The built-ins are :class:`LoggingAdvisor`,
:class:`CacheAdvisor` (memory or Redis, through :class:`RedisClientPool`)
and :class:`ContentFilterAdvisor`. See ``docs/advisors.md``.

Importing this module loads pydantic-ai (advisors see its messages).
"""

from __future__ import annotations

__all__ = [
    "AdvisedCall",
    "Advisor",
    "AdvisorChain",
    "AdvisorConfigError",
    "CacheAdvisor",
    "CacheBackend",
    "ContentBlocked",
    "ContentFilterAdvisor",
    "LoggingAdvisor",
    "MemoryCache",
    "Next",
    "RedisCache",
    "RedisClientPool",
    "cache_key",
    "resolve_advisor",
]

from pilothouse.runtime._advisors import (
    AdvisedCall,
    Advisor,
    AdvisorChain,
    AdvisorConfigError,
    CacheAdvisor,
    ContentBlocked,
    ContentFilterAdvisor,
    LoggingAdvisor,
    Next,
    cache_key,
    resolve_advisor,
)
from pilothouse.runtime._cache import CacheBackend, MemoryCache, RedisCache, RedisClientPool
