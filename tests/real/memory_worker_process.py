"""A memory worker that takes one extraction job and hangs in the model call (killed by the test).

Usage: python memory_worker_process.py DATABASE_URL [--leased]

With ``--leased`` it holds a process lease as a service does (its claimed
job names it as its owner). It prints ``claimed <job id>`` once the job is
its own (status ``running``), then waits forever inside the "model call",
as a worker does whose process is about to be killed.
"""

from __future__ import annotations

import sys

import anyio

from pilothouse.memory import EVERY_TENANT, MemoryExtractor, ScopedMemory
from pilothouse.memory._tables import MemoryJob
from pilothouse.store import Database
from pilothouse.store._leases import Leases, OwnerIdentity


async def main(url: str, leased: bool) -> None:
    database = Database(url)
    memory = ScopedMemory(database)

    async def hang(job: MemoryJob, system: str, user: str, schema: object) -> str:
        print(f"claimed {job.id}", flush=True)
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    leases = Leases(database, OwnerIdentity.of_this_process()) if leased else None
    extractor = MemoryExtractor(memory, hang, lease_seconds=600, leases=leases)
    await extractor.run_pending(limit=1, tenant=EVERY_TENANT)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], "--leased" in sys.argv[2:])
