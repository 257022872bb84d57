"""Background ingestion through the facade: a job a closing service stops reads ``failed``."""

from __future__ import annotations

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import NotFoundError
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import CatalogBuilder
from pilothouse.types import TextDocument

pytestmark = pytest.mark.anyio

CATALOG = (
    CatalogBuilder()
    .add("vector_stores", code="EMBED")
    .add("document_collections", code="HANDBOOK", store="EMBED", collection_name="handbook")
)
# Enough documents that the job is still running when the service closes.
MANY = [
    TextDocument(f"hb:{n}", f"Rule {n}: visitors sign in at desk {n} and wear badge {n}.")
    for n in range(400)
]


async def test_a_job_the_service_stopped_reads_failed_and_says_what_to_do(
    database: Database,
) -> None:
    async with Pilothouse(Settings(), database=database) as ph:
        await CATALOG.import_into(ph)
        job = await ph.knowledge.start_ingest("HANDBOOK", MANY)
        assert job.status == "running" and job.documents_total == 400
    async with Pilothouse(Settings(), database=database) as again:
        stopped = await again.knowledge.ingest_job(job.job_id)
        assert stopped.status == "failed", stopped
        assert stopped.error is not None and "the service stopped" in stopped.error
        assert stopped.documents_done < 400
        with pytest.raises(NotFoundError):
            await again.for_tenant("acme").knowledge.ingest_job(job.job_id)
        with pytest.raises(NotFoundError):
            await again.knowledge.start_ingest("NOPE", MANY[:1])
