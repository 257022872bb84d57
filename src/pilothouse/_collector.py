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

:func:`freeze_once` goes further, where the deployment asks for it
(``Settings.freeze_heap``): after the process's first turn, every object
then alive moves to the collector's permanent generation (``gc.freeze``),
so no later full collection walks the start-up heap again. With 200 streams
at once a full collection came once or twice a round and stopped the event
loop for 112-319 ms on pilothouse's heap (about 256,000 tracked objects:
SQLAlchemy's metadata and mappings are most of what pydantic-ai's 170,000
lack); frozen, 7-52 ms (``docs/benchmarks.md``, issue 12 item 15).
"""

from __future__ import annotations

__all__ = ["collector_paused", "freeze_once"]

import gc
import logging
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

logger = logging.getLogger("pilothouse.collector")


class _Freeze:
    """Whether this process froze its heap (once is all it takes: what came after stays young)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False


_FREEZE = _Freeze()


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


def freeze_once() -> bool:
    """Move every object alive now out of the collector's walks, once per process.

    A collection of the two young generations first frees what recent work
    left (a full one would walk the very heap this spares). Objects frozen
    are still freed by reference counting; only a cycle among them that
    becomes garbage later is never collected, so the freeze comes after
    start-up and the first turn, when what is alive is what lives on.

    Returns:
        True when this call froze the heap; False when the process had.
    """
    with _FREEZE.lock:
        if _FREEZE.done:
            return False
        _FREEZE.done = True
    gc.collect(1)
    gc.freeze()
    logger.info("heap frozen after the first turn: %d objects", gc.get_freeze_count())
    return True
