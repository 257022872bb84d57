"""What a benchmark process costs: memory now and at peak, cores, full collections, loop lag.

Used by the scenario workers (``bench/concurrency.py``) and ``bench/heap_freeze.py``.
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    """This process's resident set size now, in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def cores_used() -> list[int]:
    """The cores any thread of this process may run on."""
    cores: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            cores |= os.sched_getaffinity(int(tid))
        except (ProcessLookupError, FileNotFoundError):
            pass
    return sorted(cores)


def maxrss_mb() -> float:
    """This process's peak resident set size so far (``ru_maxrss``), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class FullCollections:
    """Counts the cyclic collector's full (generation 2) collections and their CPU time.

    A full collection walks every tracked object of the process, so its
    cost is the heap's size, and one inside a round of streams delays every
    stream still waiting (docs/benchmarks.md).
    """

    def __init__(self) -> None:
        self.count = 0
        self.cpu_ms: list[float] = []
        self.tracked = 0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.process_time()
        else:
            self.count += 1
            self.cpu_ms.append((time.process_time() - self._began) * 1000)

    def __enter__(self) -> FullCollections:
        self.tracked = len(gc.get_objects())
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def facts(self) -> dict[str, Any]:
        """The round's full collections: how many, their CPU ms, tracked objects at the start."""
        return {"gc_full": self.count, "gc_full_ms": self.cpu_ms, "gc_tracked": self.tracked}


@dataclass
class Ticker:
    """Measures event-loop lag (a 10 ms sleep's overshoot) and samples RSS."""

    lags_ms: list[float] = field(default_factory=lambda: [])
    peak_rss_mb: float = 0.0
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.peak_rss_mb = rss_mb()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags_ms.append((time.perf_counter() - t - 0.01) * 1000)
            i += 1
            if i % 5 == 0:
                self.peak_rss_mb = max(self.peak_rss_mb, rss_mb())

    async def stop(self) -> dict[str, Any]:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self.peak_rss_mb = max(self.peak_rss_mb, rss_mb())
        lags = self.lags_ms
        return {
            "lag_p50_ms": statistics.median(lags) if lags else None,
            "lag_p99_ms": percentile(lags, 99),
            "lag_max_ms": max(lags) if lags else None,
            "lag_samples": len(lags),
        }


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]
