"""The service's memory worker: extraction jobs and session-memory expiry, off the hot path.

``pilothouse serve`` runs one per process. Every ``memory_worker_seconds`` it
runs the pending extraction jobs (of every tenant: a job row names its
tenant), and every ``memory_expiry_seconds`` it deletes session memory past
its TTL. Several processes may run it at once: a job is claimed with a
conditional update, so each runs in exactly one of them.
"""

from __future__ import annotations

__all__ = ["memory_worker"]

import logging
import time

import anyio
from sqlalchemy.exc import SQLAlchemyError

from pilothouse.api import Pilothouse
from pilothouse.errors import PilothouseError

logger = logging.getLogger(__name__)


async def memory_worker(ph: Pilothouse, every: float, expire_every: float) -> None:
    """Run until cancelled: jobs each ``every`` seconds, expiry each ``expire_every``.

    ``ph`` is the process's facade; the worker is the operator's, so it runs
    every tenant's jobs (``Pilothouse.run_memory_jobs``), each for its own
    tenant, never a request's.
    """
    last_expiry = time.monotonic()
    while True:
        await anyio.sleep(every)
        try:
            outcomes = await ph.run_memory_jobs(limit=50)
            if outcomes:
                logger.info("memory worker: ran %d extraction jobs", len(outcomes))
            if time.monotonic() - last_expiry >= expire_every:
                last_expiry = time.monotonic()
                expired = await ph.expire_memory()
                if expired:
                    logger.info("memory worker: %d session memories expired", expired)
        except (PilothouseError, SQLAlchemyError, OSError) as exc:
            # The next round tries again; a job that failed keeps its error.
            logger.error("memory worker: round failed: %s", exc)
