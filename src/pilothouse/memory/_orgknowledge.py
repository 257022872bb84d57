"""Organization memory fed by knowledge collections: their chunks as memories.

Seed 002's organizational memory is "shared knowledge, chunked documents":
policies, docs and FAQs a whole organization shares. A ``SCOPED`` strategy's
``organization_collections`` names catalog document collections; each turn
searches them (the knowledge feature's own vector search, so pgvector or the
embedded index) and their chunks become ``organization`` hits of type
``document_chunk``, competing with the organization's records for the
organization limit. A collection is resolved in the turn's tenant only: a
code another tenant owns is simply not found.
"""

from __future__ import annotations

__all__ = ["CHUNK_PREFIX", "merge_organization", "organization_chunks"]

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from pilothouse.memory._types import MemoryHit, MemoryItem, MemoryScope

if TYPE_CHECKING:
    from pilothouse.knowledge import Knowledge
    from pilothouse.memory._store import RankWeights

CHUNK_PREFIX = "chunk:"
"""A chunk's memory id is ``chunk:<collection>:<chunk id>`` (never a record's uuid)."""


async def organization_chunks(
    knowledge: Knowledge,
    tenant: str,
    collections: Sequence[str],
    query: str,
    *,
    limit: int,
    threshold: float,
    weights: RankWeights,
    now: datetime,
) -> list[MemoryHit]:
    """Search the collections for ``query``; their chunks as organization memories.

    Args:
        knowledge: the knowledge service.
        tenant: the turn's tenant (the collections are looked up in its catalog).
        collections: collection codes.
        query: the user's message.
        limit: the most chunks of each collection (the organization limit).
        threshold: the least cosine similarity.
        weights: the memory ranking's weights; a chunk counts as important
            (1.0, the seed's default importance) and current (recency 1.0).
        now: the time the hits are stamped with.

    Raises:
        NotFoundError: a collection that is not in the tenant's catalog.
        KnowledgeError: the collection cannot be searched.
    """
    hits: list[MemoryHit] = []
    if limit <= 0:
        return hits
    for code in collections:
        result = await knowledge.search(
            tenant, code, query, top_k=limit, threshold=threshold, mode="vector"
        )
        for chunk in result.hits:
            item = MemoryItem(
                id=f"{CHUNK_PREFIX}{code}:{chunk.chunk_id}",
                scope=MemoryScope("organization"),
                content=f"{chunk.heading}: {chunk.text}" if chunk.heading else chunk.text,
                memory_type="document_chunk",
                importance=1.0,
                metadata={
                    "collection": code,
                    "source": chunk.source,
                    "title": chunk.title,
                    "position": chunk.position,
                },
                access_count=0,
                last_accessed_at=None,
                created_at=now,
                updated_at=now,
                expires_at=None,
            )
            score = weights.similarity * chunk.similarity + weights.importance + weights.recency
            hits.append(MemoryHit(item, chunk.similarity, score))
    return hits


def merge_organization(
    hits: list[MemoryHit], chunks: list[MemoryHit], limit: int
) -> list[MemoryHit]:
    """The hits with the organization's records and chunks cut to ``limit`` together.

    The organization scope is one scope whatever feeds it: its records and
    the collections' chunks are ranked by similarity, as each scope's search
    is, and the best ``limit`` stay. The result is ordered by score.
    """
    organization = [hit for hit in hits if hit.item.scope.scope == "organization"]
    others = [hit for hit in hits if hit.item.scope.scope != "organization"]
    best = sorted([*organization, *chunks], key=lambda hit: hit.similarity, reverse=True)[:limit]
    return sorted([*others, *best], key=lambda hit: hit.score, reverse=True)
