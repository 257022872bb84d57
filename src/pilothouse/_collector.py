"""Pause the cyclic garbage collector while pilothouse builds what lives as long as the process.

Importing pilothouse and its dependencies, configuring the catalog's
mappings and building a provider's first model allocate about 170,000
objects that are never freed: classes, functions, SQLAlchemy metadata,
pydantic schemas, the price table of the model library. The collector
cannot free any of them, yet it starts a collection of the youngest
generation every 700 allocations and a full one each time ten of those have
promoted enough to grow the heap by a quarter, and every full collection
walks the whole heap. In a new process that was four full collections
before the first answer (0.47 s of CPU in the benchmark's cold start), and
together they freed 163 objects (``docs/benchmarks.md``, issue 12 item 15).
Mercurial's ``util.nogc`` does the same around its own allocation-heavy,
cycle-free work.

Only synchronous work is paused, so no other task of the application runs
while the collector is off; pauses nest and may come from several threads,
and the collector is switched back on only if it was on when the first
pause began (an application that keeps it off keeps it off).
"""

from __future__ import annotations

__all__ = ["collector_paused"]

import gc
import threading
from collections.abc import Generator
from contextlib import contextmanager


class _Pauses:
    """How many pauses are open, and whether the collector was on before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.was_enabled = False


_PAUSES = _Pauses()


@contextmanager
def collector_paused() -> Generator[None]:
    """Keep the cyclic collector off for the block (reference counting goes on).

    Use it only around synchronous work whose objects outlive it: imports,
    mapper configuration, building a client. Never around an ``await``.
    """
    with _PAUSES.lock:
        if _PAUSES.depth == 0:
            _PAUSES.was_enabled = gc.isenabled()
            gc.disable()
        _PAUSES.depth += 1
    try:
        yield
    finally:
        with _PAUSES.lock:
            _PAUSES.depth -= 1
            if _PAUSES.depth == 0 and _PAUSES.was_enabled:
                gc.enable()
