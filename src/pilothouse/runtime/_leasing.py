"""A serving process's lease: sweep orphaned turns, renew the heartbeat, take cancels.

:func:`keep_lease` is what ``pilothouse serve`` (each worker) runs beside
its requests. At start it registers this process as an owner with a
heartbeat and marks ``ST`` every running conversation no live process owns
(a crash left it). Then, in the background:

- every ``poll_seconds`` while turns run here: the cancel requests other
  processes recorded for them (:meth:`~pilothouse.store.Leases.request_cancel`)
  cancel them here, so the turn's own recorder writes ``TE``; with Redis
  configured the same cancel also arrives published, at once;
- every ``heartbeat_seconds``: the heartbeat, a sweep for owners that died
  since (another replica), and the removal of cancel requests nobody took.

Nothing of this runs per turn: a turn only names its owner in the statement
that takes the conversation.

:func:`ask_owner` is the other side: how a cancel reaches a turn another
live process runs.
"""

from __future__ import annotations

__all__ = ["ask_owner", "keep_lease"]

import logging
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING

import anyio

from pilothouse.store._base import utcnow
from pilothouse.store._leases import Orphan

if TYPE_CHECKING:
    from pilothouse.runtime._shared import Runtime

logger = logging.getLogger(__name__)

_STALE_REQUEST = timedelta(minutes=10)


def _log_swept(swept: list[Orphan]) -> None:
    for orphan in swept:
        logger.warning(
            "conversation %s (tenant %s) was left running: marked ST (%s)",
            orphan.uuid,
            orphan.tenant,
            orphan.why,
        )


async def _take_cancels(runtime: Runtime) -> None:
    requested_at = utcnow()
    for tenant, uuid in await runtime.leases.take_cancel_requests():
        # ``requested_at`` is no later than the request: a turn that began
        # after this poll started is not the one the request meant.
        if runtime.running.cancel(tenant, uuid, requested_at=requested_at, why="another process"):
            logger.info("conversation %s: cancelled at another process's request", uuid)


async def ask_owner(
    runtime: Runtime,
    tenant: str,
    conversation_uuid: str,
    running: bool,
    owner: str | None,
    wait: float,
) -> bool:
    """Ask another live process to stop the turn it runs, and wait for its end.

    The request is recorded in the database (and published on Redis when
    configured); this waits up to ``wait`` seconds for the owner to record
    ``TE``.

    Args:
        runtime: this process's runtime.
        tenant: the conversation's tenant.
        conversation_uuid: the conversation.
        running: whether it was seen ``RU``.
        owner: the owner it named then.
        wait: how long to wait for the turn's end.

    Returns:
        False when no other live process runs it (nothing was asked).
    """
    leases = runtime.leases
    if not (
        running
        and owner is not None
        and owner != leases.owner
        and await leases.owner_alive(owner)
        and await leases.request_cancel(tenant, conversation_uuid, owner, "cancelled")
    ):
        return False
    if runtime.coordination is not None:
        # At once, rather than at the owner's next poll of the database
        # (whose request stays, should the message be lost).
        try:
            await runtime.coordination.publish_cancel(owner, tenant, conversation_uuid)
        except Exception:
            logger.warning(
                "could not publish the cancel of %s on Redis; the owner's poll of "
                "the database takes it",
                conversation_uuid,
            )
    with anyio.move_on_after(wait):
        while (await leases.running_owner(tenant, conversation_uuid))[0]:
            await anyio.sleep(0.1)
    return True


def _cancel_handler(runtime: Runtime) -> Callable[[str, str, str], None]:
    """Cancel this process's turn when a cancel published on Redis names it."""

    def cancelled(owner: str, tenant: str, uuid: str) -> None:
        if owner != runtime.leases.owner:
            return
        # Received now: a turn of the conversation that began later is not
        # the one the cancel meant.
        if runtime.running.cancel(tenant, uuid, requested_at=utcnow(), why="another process"):
            logger.info("conversation %s: cancelled at another process's request (redis)", uuid)

    return cancelled


async def _recover_jobs(runtime: Runtime) -> None:
    # Memory extraction jobs a lost process held: pending again now, not
    # after their lease (each is logged).
    from pilothouse.memory._orphans import recover_orphaned_jobs

    await recover_orphaned_jobs(runtime.database, runtime.leases)


async def _renew(runtime: Runtime) -> None:
    leases = runtime.leases
    await leases.heartbeat()
    _log_swept(await leases.sweep())
    await _recover_jobs(runtime)
    await leases.forget_stale_requests(_STALE_REQUEST)


async def _background(runtime: Runtime, heartbeat_seconds: float, poll_seconds: float) -> None:
    now = time.monotonic()
    next_beat, next_poll = now + heartbeat_seconds, now + poll_seconds
    while True:
        # Each on its own clock: a rare cancel poll (Redis delivers cancels)
        # must not delay the heartbeat.
        await anyio.sleep(max(0.0, min(next_beat, next_poll) - time.monotonic()))
        # A database hiccup must not end the lease loop: the next tick retries.
        try:
            if time.monotonic() >= next_poll:
                next_poll = time.monotonic() + poll_seconds
                if len(runtime.running):
                    await _take_cancels(runtime)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + heartbeat_seconds
                await _renew(runtime)
        except Exception:
            logger.exception("the turn lease loop failed; retrying at the next tick")


@asynccontextmanager
async def keep_lease(
    runtime: Runtime, *, heartbeat_seconds: float = 5.0, poll_seconds: float = 0.5
) -> AsyncGenerator[list[Orphan]]:
    """Hold this process's lease while the block runs; yields the orphans swept at start.

    Args:
        runtime: the process's runtime.
        heartbeat_seconds: how often the heartbeat is renewed (keep it well
            under the lease, ``PILOTHOUSE_LEASE_SECONDS``).
        poll_seconds: how often running turns look for cancel requests.
    """
    leases = runtime.leases
    await leases.register(heartbeat=True)
    swept = await leases.sweep()
    _log_swept(swept)
    await _recover_jobs(runtime)
    coordination = runtime.coordination
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(_background, runtime, heartbeat_seconds, poll_seconds)
            if coordination is not None:
                coordination.on_cancel(_cancel_handler(runtime))
                group.start_soon(coordination.listen)
            try:
                yield swept
            finally:
                group.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await leases.unregister()
