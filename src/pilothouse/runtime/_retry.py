"""When to try a failed model call again, and how long to wait first.

Network errors, 5xx and 429 back off exponentially with jitter (a 429's
``Retry-After`` is a floor, never cut short); an unparseable response backs
off linearly, since waiting longer does not make a model answer better.
"""

from __future__ import annotations

__all__ = ["RetryPolicy"]

import random
from dataclasses import dataclass, field

from pilothouse.errors import ProviderError, RateLimitError, UnparseableResponseError

_MAX_DELAY = 60.0

# Shared: a policy is built for every model call, and seeding a generator of
# its own each time reads the OS entropy pool for nothing.
_JITTER = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    """Retry count and base delay, from the action's configuration.

    Attributes:
        count: retries after the first attempt.
        delay: base delay in seconds.
        rng: the jitter source (seedable in tests).
    """

    count: int
    delay: float
    rng: random.Random = field(default_factory=lambda: _JITTER, compare=False)

    def should_retry(self, error: ProviderError, attempt: int) -> bool:
        """Tell whether attempt number ``attempt`` (1-based) may be followed by another."""
        return error.retryable and attempt <= self.count

    def delay_for(self, error: ProviderError, attempt: int) -> float:
        """Return seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if isinstance(error, UnparseableResponseError):
            return min(self.delay * attempt, _MAX_DELAY)
        backoff = self.delay * (2 ** (attempt - 1))
        # Full jitter between half and the whole backoff spreads out the
        # retries of many turns that failed together.
        wait = backoff * (0.5 + self.rng.random() / 2)
        if isinstance(error, RateLimitError) and error.retry_after is not None:
            wait = max(wait, error.retry_after)
        return min(wait, max(_MAX_DELAY, getattr(error, "retry_after", 0) or 0))
