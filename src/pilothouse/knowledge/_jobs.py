"""Ingestion in the background: a job row with its progress, the work in this process.

A caller that cannot wait for a large ingestion starts a job
(:meth:`IngestJobs.start`): the collection is checked at once (a missing one
is refused there), a ``knowledge_ingest_job`` row is written ``running``
under this process's lease, and the ingestion runs as a task of this
process, writing its progress (documents done, chunks cut, chunks embedded)
to the row at most every :data:`PROGRESS_SECONDS` and at every document's
end. The documents themselves are held by the task only, never stored: a
job whose process stopped (killed, restarted, closed) cannot go on, so a
status read marks it ``failed`` and says why, rather than leaving it
``running`` for ever. The documents it wrote stay; ingesting the same
sources again skips them as unchanged.

A synchronous ingestion (:meth:`IngestJobs.slot`) holds its documents and
this process's CPU as a job does, so it is counted with the tenant's jobs:
one tenant runs at most :data:`MAX_RUNNING_JOBS` ingestions of either kind
at once in one process.

The rows hold a collection code, counts and the per-document outcome
(sources and errors): no user's data, so a user's erasure has nothing here.
"""

from __future__ import annotations

__all__ = ["MAX_RUNNING_JOBS", "PROGRESS_SECONDS", "IngestJobs", "result_json"]

import asyncio
import logging
import time
import uuid as uuid_module
from collections import Counter
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update

from pilothouse.errors import NotFoundError, TooManyRequestsError
from pilothouse.knowledge._tables import IngestJob
from pilothouse.knowledge._types import IngestJobStatus, IngestProgress, IngestResult
from pilothouse.store._base import utcnow

if TYPE_CHECKING:
    from pilothouse.store import Database
    from pilothouse.store._leases import Leases

logger = logging.getLogger("pilothouse.knowledge")

PROGRESS_SECONDS = 0.5
"""Least time between two progress writes of one job (a document's end is always written)."""

MAX_RUNNING_JOBS = 4
"""The most ingestions one tenant runs at once in one process: jobs and synchronous ones together.

An ingestion holds its documents in memory (an upload up to 50 MiB) until it
ends, and reads, cuts and embeds them on this process's CPU, whether it runs
as a job or while its request waits: without one bound over both, one
tenant's stream of requests of either kind would take the memory and CPU
every tenant shares.
"""

_RETRY_SECONDS = 5.0
"""The wait a refused ingestion request is told (``Retry-After``)."""

_STOPPED = (
    "the service stopped before the job finished: ingest the same sources again "
    "(documents already written are skipped as unchanged)"
)

Ingestion = Callable[[Callable[[IngestProgress], Awaitable[None]]], Awaitable[IngestResult]]
"""Runs the ingestion, reporting each step to the callback it is given."""


def result_json(result: IngestResult) -> dict[str, Any]:
    """An ingestion's outcome as JSON: counts by status and each document's."""
    statuses = ("added", "replaced", "unchanged", "skipped", "failed")
    return {
        "collection": result.collection,
        "chunk_size": result.chunk_size,
        "chunk_overlap": result.chunk_overlap,
        "model": result.model,
        "counts": {status: result.count(status) for status in statuses},
        "documents": [
            {
                "source": d.source,
                "status": d.status,
                "chunks": d.chunks,
                "document_id": d.document_id,
                "error": d.error,
            }
            for d in result.documents
        ],
    }


def _status(row: IngestJob) -> IngestJobStatus:
    state = row.status if row.status in ("running", "done", "failed") else "running"
    return IngestJobStatus(
        job_id=row.job_id,
        collection=row.collection,
        status=state,
        documents_total=row.documents_total,
        documents_done=row.documents_done,
        chunks_total=row.chunks_total,
        chunks_embedded=row.chunks_embedded,
        result=row.result,
        error=row.error,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
    )


class _Progress:
    """Counts one job's steps and writes them to its row, throttled."""

    def __init__(self, jobs: IngestJobs, job_id: str, total: int) -> None:
        self.jobs = jobs
        self.job_id = job_id
        self.total = total
        self.done = 0
        self.chunks: dict[int, int] = {}
        self.embedded: dict[int, int] = {}
        self.written_at = 0.0

    async def __call__(self, event: IngestProgress) -> None:
        self.total = max(self.total, event.total)
        if event.chunks:
            self.chunks[event.index] = event.chunks
        if event.event == "embedding":
            self.embedded[event.index] = event.embedded
        elif event.event == "done":
            self.done += 1
            if event.status in ("added", "replaced"):
                self.embedded[event.index] = self.chunks.get(event.index, 0)
        elif event.event == "failed":
            self.done += 1
        now = time.monotonic()
        if event.event in ("done", "failed") or now - self.written_at >= PROGRESS_SECONDS:
            self.written_at = now
            await self.jobs.write(
                self.job_id,
                documents_total=self.total,
                documents_done=self.done,
                chunks_total=sum(self.chunks.values()),
                chunks_embedded=sum(self.embedded.values()),
            )


class IngestJobs:
    """The background ingestions of one process.

    Args:
        database: where the job rows are.
        leases: this process's lease; a job names it, so a status read in
            any process can tell a job whose process is gone.
    """

    def __init__(self, database: Database, leases: Leases) -> None:
        self.database = database
        self.leases = leases
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._tenants: dict[str, str] = {}
        self._synchronous: Counter[str] = Counter()

    def _admit(self, tenant: str) -> None:
        """Refuse a new ingestion of a tenant already running the most at once.

        Raises:
            TooManyRequestsError: the tenant's running jobs and synchronous
                ingestions in this process make :data:`MAX_RUNNING_JOBS`.
        """
        jobs = sum(1 for owner in self._tenants.values() if owner == tenant)
        running = jobs + self._synchronous[tenant]
        if running >= MAX_RUNNING_JOBS:
            raise TooManyRequestsError(
                f"{running} ingestions of this tenant are running ({jobs} of them background "
                f"jobs), the most at once: send this one again when one of them has finished "
                f"(after {_RETRY_SECONDS:g} s, or when GET of a job reads it done)",
                retry_after=_RETRY_SECONDS,
            )

    @asynccontextmanager
    async def slot(self, tenant: str) -> AsyncGenerator[None]:
        """Count a synchronous ingestion of ``tenant`` with its jobs while the block runs.

        Raises:
            TooManyRequestsError: the tenant runs :data:`MAX_RUNNING_JOBS`
                ingestions (jobs and synchronous ones) in this process already.
        """
        # Checked and counted before the first await: requests arriving
        # together cannot all pass the check.
        self._admit(tenant)
        self._synchronous[tenant] += 1
        try:
            yield
        finally:
            self._synchronous[tenant] -= 1
            if self._synchronous[tenant] <= 0:
                del self._synchronous[tenant]

    async def start(
        self, tenant: str, collection: str, documents: int, ingestion: Ingestion
    ) -> IngestJobStatus:
        """Write a ``running`` job and start ``ingestion`` as a task of this process.

        Args:
            tenant: whose collection.
            collection: the collection's code (checked by the caller).
            documents: how many sources were named.
            ingestion: runs the ingestion with the job's progress callback.

        Returns:
            The job as it starts.

        Raises:
            TooManyRequestsError: the tenant runs :data:`MAX_RUNNING_JOBS`
                ingestions (jobs and synchronous ones) in this process already.
        """
        self._admit(tenant)
        job_id = str(uuid_module.uuid4())
        # Counted from here, before the first await: requests arriving together
        # cannot all pass the check above.
        self._tenants[job_id] = tenant
        try:
            return await self._start(job_id, tenant, collection, documents, ingestion)
        except BaseException:
            self._tenants.pop(job_id, None)
            raise

    async def _start(
        self, job_id: str, tenant: str, collection: str, documents: int, ingestion: Ingestion
    ) -> IngestJobStatus:
        await self.leases.register()
        async with self.database.sessions() as session, session.begin():
            row = IngestJob(
                job_id=job_id,
                tenant=tenant,
                collection=collection,
                status="running",
                owner=self.leases.owner,
                documents_total=documents,
                documents_done=0,
                chunks_total=0,
                chunks_embedded=0,
            )
            session.add(row)
            await session.flush()
            started = _status(row)
        progress = _Progress(self, job_id, documents)
        task = asyncio.get_running_loop().create_task(self._run(job_id, ingestion, progress))
        self._tasks[job_id] = task
        task.add_done_callback(lambda _: self._ended(job_id))
        return started

    def _ended(self, job_id: str) -> None:
        self._tasks.pop(job_id, None)
        self._tenants.pop(job_id, None)

    async def _run(self, job_id: str, ingestion: Ingestion, progress: _Progress) -> None:
        try:
            result = await ingestion(progress)
        except asyncio.CancelledError:
            await self.write(job_id, status="failed", error=_STOPPED, finished_at=utcnow())
            raise
        except Exception as exc:  # a failed job must say why, whatever the error
            logger.exception("ingestion job %s failed", job_id)
            await self.write(job_id, status="failed", error=str(exc)[:4000], finished_at=utcnow())
            return
        await self.write(
            job_id,
            status="done",
            documents_total=max(progress.total, len(result.documents)),
            documents_done=len(result.documents),
            chunks_total=sum(progress.chunks.values()),
            chunks_embedded=sum(progress.embedded.values()),
            result=result_json(result),
            finished_at=utcnow(),
        )

    async def write(self, job_id: str, **values: Any) -> None:
        """Update a running job's row (a finished one is left as it ended)."""
        async with self.database.sessions() as session, session.begin():
            await session.execute(
                update(IngestJob)
                .where(IngestJob.job_id == job_id, IngestJob.status == "running")
                .values(updated_at=utcnow(), **values)
                .execution_options(synchronize_session=False)
            )

    async def status(self, tenant: str, job_id: str) -> IngestJobStatus:
        """A job of ``tenant`` as far as it got; one whose process is gone is marked ``failed``.

        Raises:
            NotFoundError: no job of that id for this tenant (another tenant's
                job is not found either).
        """
        async with self.database.sessions() as session:
            row = await session.scalar(
                select(IngestJob).where(IngestJob.job_id == job_id, IngestJob.tenant == tenant)
            )
        if row is None:
            raise NotFoundError(f"no ingestion job '{job_id}'")
        if row.status == "running":
            why = await self._lost(row)
            if why is not None:
                await self.write(
                    job_id,
                    status="failed",
                    error=f"{why} before the job finished: ingest the same sources again "
                    "(documents already written are skipped as unchanged)",
                    finished_at=utcnow(),
                )
                return await self.status(tenant, job_id)
        return _status(row)

    async def _lost(self, row: IngestJob) -> str | None:
        """Why a running job's process no longer runs it, or None while it may."""
        if row.owner is None:
            return "it names no process"
        if row.owner == self.leases.owner:
            return None if row.job_id in self._tasks else "this process no longer runs it"
        gone = await self.leases.gone({row.owner})
        why = gone.get(row.owner)
        return None if why is None else f"the process running it is gone ({why})"

    async def aclose(self) -> None:
        """Stop this process's jobs; each is marked ``failed`` with why."""
        running = dict(self._tasks)
        for task in running.values():
            task.cancel()
        if running:
            await asyncio.gather(*running.values(), return_exceptions=True)
        # A task cancelled before it first ran never reached its own handler.
        for job_id in running:
            await self.write(job_id, status="failed", error=_STOPPED, finished_at=utcnow())
