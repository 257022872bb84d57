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
together they freed 163 objects (``docs/benchmarks.md``).
Mercurial's ``util.nogc`` does the same around its own allocation-heavy,
cycle-free work.

Only synchronous work is paused, so no other task of the application runs
while the collector is off; pauses nest and may come from several threads,
and the collector is switched back on only if it was on when the first
pause began (an application that keeps it off keeps it off).

When the last pause ends, what it built goes straight to the oldest
generation (``gc.freeze()`` then ``gc.unfreeze()``). Left young, the next
youngest-generation collection walks all of it (100,000 objects and more
after the imports) and the next middle one walks it again before it ages
out: 180-220 ms of the cold start's CPU. In the oldest generation only full
collections walk it, as they walk the rest of the start-up heap; the cycles
the imports left behind, which the young collections would have freed, wait
for the next full collection (or the exit) instead. Skipped while anything holds objects frozen (an
application's own ``gc.freeze`` or :func:`freeze_once`): unfreezing would
undo that.

:func:`leave_heap_at_exit` (``Settings.fast_exit``, on by default) moves the
heap out of the collector's walks in an exit handler. An interpreter that
ends collects the whole heap twice and frees every cycle in it one by one;
for pilothouse's start-up heap that was 0.54-0.6 s, most of what its cold
start cost more than pydantic-ai's (``docs/benchmarks.md``). Objects freed by
reference counting at exit still are; only reference cycles alive at exit
are left to the operating system, and their finalizers (``__del__``,
weak-reference callbacks) do not run then, which Python does not promise
for objects alive at exit anyway.

:func:`freeze_once` goes further, where the deployment asks for it
(``Settings.freeze_heap``): after the process's first turn, every object
then alive moves to the collector's permanent generation (``gc.freeze``),
so no later full collection walks the start-up heap again. With 200 streams
at once a full collection came once or twice a round and stopped the event
loop for 112-319 ms on pilothouse's heap (about 256,000 tracked objects:
SQLAlchemy's metadata and mappings are most of what pydantic-ai's 170,000
lack); frozen, 7-52 ms (``docs/benchmarks.md``).
"""

from __future__ import annotations

__all__ = ["collector_paused", "freeze_once", "leave_heap_at_exit"]

import atexit
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


class _Once:
    """Something a process does once, whichever thread asks first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = False

    def claim(self) -> bool:
        """Return True to the first caller only."""
        with self._lock:
            if self._done:
                return False
            self._done = True
            return True


_FREEZE = _Once()
"""The heap frozen after the first turn (once is all it takes: what came after stays young)."""

_AT_EXIT = _Once()
"""The exit-time freeze registered (one handler is enough)."""


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
                _promote()
                gc.enable()


def _promote() -> None:
    """Move every tracked object to the oldest generation, unless some are frozen."""
    # unfreeze() empties the permanent generation into the oldest one, so
    # with anything frozen it would thaw the application's (or
    # freeze_once's) frozen heap.
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


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
    if not _FREEZE.claim():
        return False
    gc.collect(1)
    gc.freeze()
    logger.info("heap frozen after the first turn: %d objects", gc.get_freeze_count())
    return True


def leave_heap_at_exit() -> bool:
    """Register, once per process, an exit handler that freezes the heap.

    The interpreter's last collections then skip every object alive at
    exit; see the module's docstring for what that saves and what it
    leaves undone.

    Returns:
        True when this call registered the handler; False when the process had.
    """
    if not _AT_EXIT.claim():
        return False
    atexit.register(gc.freeze)
    return True
