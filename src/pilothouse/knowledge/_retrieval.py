"""Hybrid retrieval: full text and vectors fused by reciprocal rank.

Each half proposes ``max(4 * top_k, 20)`` candidates. Reciprocal rank
fusion scores a chunk ``sum(1 / (60 + rank))`` over the lists it is in
(Cormack, Clarke and Buettcher, 2009): it needs no calibration between a
BM25 score and a cosine similarity, and a chunk both halves found ranks
above one only one of them found. Every candidate's cosine similarity to
the query is known (the text-only ones are compared here), so the
similarity threshold applies the same way in every mode; when candidates
existed and none passed it, the result says so (``nothing_passed_threshold``)
rather than returning nothing silently.
"""

from __future__ import annotations

__all__ = ["RRF_K", "fuse", "retrieve"]

from collections.abc import Sequence

from pilothouse.catalog._enums import SearchMode
from pilothouse.knowledge._backend import Backend, Collection
from pilothouse.knowledge._embedders import Embedder
from pilothouse.knowledge._types import MetadataFilter, SearchHit, SearchResult, SearchStatus

RRF_K = 60
"""The rank offset of reciprocal rank fusion (the paper's value)."""


def fuse(lists: Sequence[Sequence[str]], k: int = RRF_K) -> dict[str, float]:
    """Reciprocal rank fusion of ranked lists of keys.

    Args:
        lists: each a ranking, best first.
        k: the rank offset.

    Returns:
        The fused score of every key in any list.
    """
    scores: dict[str, float] = {}
    for ranking in lists:
        for rank, key in enumerate(ranking, start=1):
            scores[key] = scores.get(key, 0.0) + 1.0 / (k + rank)
    return scores


async def retrieve(
    collection: Collection,
    backend: Backend,
    embedder: Embedder,
    query: str,
    *,
    top_k: int,
    threshold: float,
    filters: MetadataFilter,
    mode: SearchMode,
) -> SearchResult:
    """Search one collection (see the module docstring).

    Returns:
        The result; its status tells an empty collection, no match, and
        nothing passing the threshold apart.
    """

    def result(hits: list[SearchHit], status: SearchStatus, **extra: object) -> SearchResult:
        return SearchResult(
            collection=collection.code,
            query=query,
            hits=hits,
            status=status,
            top_k=top_k,
            threshold=threshold,
            mode=mode.value,
            **extra,  # pyright: ignore[reportArgumentType]
        )

    if not await backend.check_model(collection):
        return result([], "empty_collection")
    prepared, truncated = embedder.prepare([query], "query")
    vector = (await embedder.embed_prepared(prepared, "query"))[0]
    pool = max(4 * top_k, 20)
    by_vector: list[tuple[str, float]] = []
    by_text: list[str] = []
    if mode is not SearchMode.TEXT:
        by_vector = await backend.vector_candidates(collection, vector, pool, filters)
    if mode is not SearchMode.VECTOR:
        by_text = await backend.text_candidates(collection, query, pool, filters)
    similarity = dict(by_vector)
    missing = [key for key in by_text if key not in similarity]
    if missing:
        similarity.update(await backend.similarities(collection, missing, vector))
    if mode is SearchMode.VECTOR:
        scores = dict(by_vector)
    elif mode is SearchMode.TEXT:
        scores = fuse([by_text])
    else:
        scores = fuse([[key for key, _ in by_vector], by_text])
    candidates = [key for key in scores if key in similarity]
    passed = [key for key in candidates if similarity[key] >= threshold]
    best = max((similarity[k] for k in candidates), default=None)
    extra: dict[str, object] = {
        "below_threshold": len(candidates) - len(passed),
        "best_similarity": best,
        "query_truncated": truncated,
    }
    if not passed:
        status: SearchStatus = "nothing_passed_threshold" if candidates else "no_match"
        return result([], status, **extra)
    chosen = sorted(passed, key=lambda key: (-scores[key], -similarity[key]))[:top_k]
    rows = await backend.fetch(collection, chosen)
    hits = [
        SearchHit(
            chunk_id=key,
            document_id=rows[key].document_id,
            source=rows[key].source,
            title=rows[key].title,
            text=rows[key].text,
            heading=rows[key].heading,
            position=rows[key].position,
            similarity=similarity[key],
            score=scores[key],
            metadata=rows[key].metadata,
        )
        for key in chosen
        if key in rows
    ]
    return result(hits, "ok", **extra)
