"""When the relay tries an outbox row again after its publish failed.

A row the bus refuses (a topic the broker will not take, say) must fail
alone: the relay goes on with the other rows and tries this one again
after a delay that doubles with each failure, up to a bound. The state is
this process's: a restarted relay tries every unsent row once, then backs
off again.
"""

from __future__ import annotations

__all__ = ["PublishBackoff"]

from collections.abc import Callable, Collection
from dataclasses import dataclass
from time import monotonic


@dataclass(slots=True)
class _Failures:
    count: int
    next_try: float


class PublishBackoff:
    """Exponential, bounded, per-row delays between publish attempts.

    Args:
        first: seconds before the first retry.
        longest: the bound: no row waits longer between two attempts.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, first: float, longest: float, clock: Callable[[], float] = monotonic
    ) -> None:
        self._first = first
        self._longest = max(first, longest)
        self._clock = clock
        self._rows: dict[int, _Failures] = {}

    def due(self, row: int) -> bool:
        """Whether ``row`` may be tried now (never failed, or its delay is over)."""
        failures = self._rows.get(row)
        return failures is None or failures.next_try <= self._clock()

    def failed(self, row: int) -> tuple[int, float]:
        """Note a failed attempt; return the failures so far and the delay before the next."""
        failures = self._rows.get(row)
        count = 1 if failures is None else failures.count + 1
        delay = min(self._first * 2 ** (count - 1), self._longest)
        self._rows[row] = _Failures(count, self._clock() + delay)
        return count, delay

    def published(self, row: int) -> None:
        """Forget ``row``: the bus took it."""
        self._rows.pop(row, None)

    def keep(self, rows: Collection[int]) -> None:
        """Forget every row not in ``rows`` (published by another process, or gone)."""
        for row in [r for r in self._rows if r not in rows]:
            del self._rows[row]

    def __len__(self) -> int:
        """Rows backing off now."""
        return len(self._rows)
