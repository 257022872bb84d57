"""The retrieval advisor: context from an action's document collections, with numbered sources.

Each collection linked to an action (in the catalog, or named by a
``/v1/invoke`` call, or this turn's runtime config ``retrieval.collections``
instead of the action's) is searched with the user's message before the turn's
first model call, with the collection's ``top_k`` and
``similarity_threshold`` unless the runtime config's ``retrieval`` says
otherwise (as the ERP module's QuestionAnswerAdvisor, top-K 4 by default).
The hits of all collections are numbered ``[1]``, ``[2]``, ... and given to
the model in the system prompt with the instruction to cite them; the
timeline records every collection's search (status, chunk ids, scores,
sources) in a ``retrieval`` event, and the answer's citations (the source
numbers it used) when it ends. When nothing passed the threshold, the model
is told so and the timeline says so: a turn never answers without its
context silently. A search that fails ends the turn (``FA``) with the reason.

An action with no collection pays one attribute test per turn.
"""

from __future__ import annotations

__all__ = [
    "RetrievalOverride",
    "RetrievalSource",
    "Retrieved",
    "answer_sources",
    "cited_sources",
    "parse_override",
    "retrieve_context",
]

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, cast

from pilothouse.catalog._enums import TimelineKind
from pilothouse.errors import PilothouseError
from pilothouse.runtime._events import AnswerSource
from pilothouse.store import NewEvent

if TYPE_CHECKING:
    from pilothouse.knowledge import Knowledge, SearchHit, SearchResult
    from pilothouse.knowledge._backend import Collection


@dataclass(frozen=True)
class RetrievalSource:
    """A collection a turn retrieves from.

    Attributes:
        code: the catalog collection's code (``INVOKE`` for a call's own table).
        collection: an ad-hoc collection, resolved already (``/v1/invoke``'s
            pgvector table); None: the catalog's collection ``code``.
        top_k: hits at most (None: the collection's own).
        threshold: least cosine similarity (None: the collection's own).
    """

    code: str
    collection: Collection | None = field(default=None, repr=False)
    top_k: int | None = None
    threshold: float | None = None


@dataclass(frozen=True)
class RetrievalOverride:
    """The runtime config's ``retrieval``: this turn's top-K, threshold and filters.

    Attributes:
        top_k: hits per collection (None: each collection's own).
        threshold: least cosine similarity (None: each collection's own).
        filters: a metadata pre-filter applied to every collection.
        enabled: False skips retrieval for this turn (recorded in the timeline).
        collections: search these active collections of the tenant instead
            of the action's linked ones (empty: the action's own).
        rerank: False skips the collections' reranking for this turn; None:
            as each collection says.
    """

    top_k: int | None = None
    threshold: float | None = None
    filters: Mapping[str, Any] = field(default_factory=dict[str, Any])
    enabled: bool = True
    collections: tuple[str, ...] = ()
    rerank: bool | None = None


_OVERRIDE_KEYS = {
    "top_k": "top_k",
    "topK": "top_k",
    "similarity_threshold": "threshold",
    "similarityThreshold": "threshold",
    "filters": "filters",
    "enabled": "enabled",
    "collections": "collections",
    "rerank": "rerank",
}

# A collection's code is a short catalog code; anything longer cannot name one.
_MAX_COLLECTIONS = 16
_MAX_CODE = 64


def _collections(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError("'collections' must be a list of document collection codes")
    codes: list[str] = []
    for index, item in enumerate(cast(Sequence[Any], value)):
        if not isinstance(item, str) or not item.strip() or len(item) > _MAX_CODE:
            raise ValueError(f"'collections[{index}]' must be a document collection code")
        if item not in codes:
            codes.append(item)
    if not codes:
        raise ValueError("'collections' is empty: name at least one collection, or leave it out")
    if len(codes) > _MAX_COLLECTIONS:
        raise ValueError(f"'collections' names more than {_MAX_COLLECTIONS} collections")
    return tuple(codes)


def parse_override(value: Any) -> RetrievalOverride:
    """Read the runtime config's ``retrieval`` object.

    Raises:
        ValueError: an unknown key or a bad value, named (the caller prefixes
            ``runtime config: retrieval``).
    """
    if not isinstance(value, Mapping):
        raise ValueError(
            "must be an object {top_k, similarity_threshold, filters, enabled, collections, rerank}"
        )
    raw = cast(Mapping[str, Any], value)
    given: dict[str, Any] = {}
    for key, item in raw.items():
        name = _OVERRIDE_KEYS.get(key)
        if name is None:
            known = ", ".join(sorted(_OVERRIDE_KEYS))
            raise ValueError(f"unknown key '{key}' (known: {known})")
        given[name] = item
    top_k = given.get("top_k")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise ValueError("'top_k' must be a whole number of at least 1")
    threshold = given.get("threshold")
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError("'similarity_threshold' must be a number")
        if not -1.0 <= float(threshold) <= 1.0:
            raise ValueError("'similarity_threshold' must be between -1 and 1 (a cosine)")
        threshold = float(threshold)
    filters: Any = given.get("filters") or {}
    if not isinstance(filters, Mapping):
        raise ValueError("'filters' must be an object {key: value or [values]}")
    enabled = given.get("enabled", True)
    if not isinstance(enabled, bool):
        raise ValueError("'enabled' must be true or false")
    rerank = given.get("rerank")
    if rerank is not None and not isinstance(rerank, bool):
        raise ValueError("'rerank' must be true or false")
    return RetrievalOverride(
        top_k=top_k,
        threshold=threshold,
        filters=dict(cast(Mapping[str, Any], filters)),
        enabled=enabled,
        collections=_collections(given.get("collections")),
        rerank=rerank,
    )


@dataclass(frozen=True)
class Retrieved:
    """What retrieval gives a turn.

    Attributes:
        prompt: the text added to the system prompt (context, or the note
            that nothing was found).
        event: the ``retrieval`` timeline event.
        sources: the numbered hits, ``[1]`` first, with their collection.
    """

    prompt: str
    event: NewEvent
    sources: tuple[AnswerSource, ...]


_INSTRUCTION = (
    "Answer from the numbered sources below when they are relevant, and cite each source "
    "you use as [n]. If the sources do not contain the answer, say so rather than guessing."
)
_NOTHING = (
    "A search of the document collection(s) {codes} for this message found nothing relevant "
    "enough ({why}). If the answer depends on those documents, say that they do not cover it."
)


def _label(number: int, hit: SearchHit) -> str:
    where = [hit.source]
    if hit.heading:
        where.append(hit.heading)
    pages = hit.metadata.get("pages")
    if pages:
        where.append(f"pages {pages}")
    title = hit.title or hit.source
    return f"[{number}] {title} ({'; '.join(where)})\n{hit.text.strip()}"


def _hit_record(number: int, hit: SearchHit) -> dict[str, Any]:
    record: dict[str, Any] = {
        "n": number,
        "chunk_id": hit.chunk_id,
        "document_id": hit.document_id,
        "source": hit.source,
        "title": hit.title,
        "heading": hit.heading,
        "position": hit.position,
        "similarity": round(hit.similarity, 6),
        "score": round(hit.score, 6),
    }
    if hit.rerank_score is not None:
        record["rerank_score"] = hit.rerank_score
    if hit.metadata.get("pages"):
        record["pages"] = hit.metadata["pages"]
    return record


def _search_record(result: SearchResult, first: int) -> dict[str, Any]:
    record: dict[str, Any] = {
        "collection": result.collection,
        "status": result.status,
        "top_k": result.top_k,
        "threshold": result.threshold,
        "mode": result.mode,
        "best_similarity": (
            None if result.best_similarity is None else round(result.best_similarity, 6)
        ),
        "below_threshold": result.below_threshold,
        "query_truncated": result.query_truncated,
        "hits": [_hit_record(first + i, hit) for i, hit in enumerate(result.hits)],
    }
    if result.reranked_by is not None:
        # The reranking model's call is part of the turn's audit: which model,
        # how many candidates it read, its time and its tokens.
        record["rerank"] = {
            "model": result.reranked_by,
            "candidates": result.rerank_candidates,
            "ms": round(result.rerank_ms, 1),
            "input_tokens": result.rerank_tokens[0],
            "output_tokens": result.rerank_tokens[1],
        }
    return record


def _why(results: Sequence[SearchResult]) -> str:
    reasons: list[str] = []
    for result in results:
        if result.status == "nothing_passed_threshold" and result.best_similarity is not None:
            reasons.append(
                f"{result.collection}: best similarity {result.best_similarity:.2f} below "
                f"the threshold {result.threshold:.2f}"
            )
        else:
            reasons.append(f"{result.collection}: {result.status.replace('_', ' ')}")
    return "; ".join(reasons)


async def retrieve_context(
    knowledge: Knowledge,
    tenant: str,
    sources: Sequence[RetrievalSource],
    query: str,
    override: RetrievalOverride,
) -> Retrieved:
    """Search every source for ``query``; number the hits; say what was found.

    Raises:
        PilothouseError: a search failed (the turn ends with it).
    """
    codes = ", ".join(s.code for s in sources)
    if not override.enabled:
        event = NewEvent(
            TimelineKind.RETRIEVAL,
            {"status": "disabled", "collections": [s.code for s in sources], "hits": 0},
        )
        return Retrieved("", event, ())
    results: list[SearchResult] = []
    records: list[dict[str, Any]] = []
    numbered: list[SearchHit] = []
    given: list[AnswerSource] = []
    for source in sources:
        top_k = override.top_k if override.top_k is not None else source.top_k
        threshold = override.threshold if override.threshold is not None else source.threshold
        try:
            if source.collection is not None:
                result = await knowledge.search_in(
                    source.collection,
                    query,
                    top_k=top_k,
                    threshold=threshold,
                    filters=override.filters,
                    rerank=override.rerank,
                )
            else:
                result = await knowledge.search(
                    tenant,
                    source.code,
                    query,
                    top_k=top_k,
                    threshold=threshold,
                    filters=override.filters,
                    rerank=override.rerank,
                )
        except PilothouseError as exc:
            raise PilothouseError(f"retrieval from collection {source.code} failed: {exc}") from exc
        records.append(_search_record(result, len(numbered) + 1))
        results.append(result)
        for hit in result.hits:
            given.append(_answer_source(len(numbered) + 1, source.code, hit))
            numbered.append(hit)
    status = "context" if numbered else "nothing_found"
    data: dict[str, Any] = {"status": status, "hits": len(numbered), "searches": records}
    if numbered:
        blocks = "\n\n".join(_label(n, hit) for n, hit in enumerate(numbered, start=1))
        prompt = f"{_INSTRUCTION}\n\nSources:\n\n{blocks}"
    else:
        why = _why(results)
        data["detail"] = f"no context: {why}"
        prompt = _NOTHING.format(codes=codes, why=why)
    return Retrieved(prompt, NewEvent(TimelineKind.RETRIEVAL, data), tuple(given))


def _answer_source(number: int, collection: str, hit: SearchHit) -> AnswerSource:
    pages = hit.metadata.get("pages")
    return AnswerSource(
        n=number,
        collection=collection,
        document_id=hit.document_id,
        source=hit.source,
        title=hit.title,
        heading=hit.heading,
        chunk_id=hit.chunk_id,
        position=hit.position,
        similarity=hit.similarity,
        score=hit.score,
        text=hit.text,
        pages=str(pages) if pages else "",
    )


_CITATION = re.compile(r"\[(\d{1,3})\]")


def _cited_numbers(text: str, count: int) -> list[int]:
    """The source numbers ``text`` cites as ``[n]`` (1..count), in order of first citation."""
    seen: list[int] = []
    for match in _CITATION.finditer(text):
        number = int(match.group(1))
        if 1 <= number <= count and number not in seen:
            seen.append(number)
    return seen


def answer_sources(text: str, sources: Sequence[AnswerSource]) -> tuple[AnswerSource, ...]:
    """The sources a turn was given, each marked ``cited`` when ``text`` cites it as ``[n]``."""
    if not sources:
        return ()
    cited = set(_cited_numbers(text, len(sources)))
    return tuple(replace(source, cited=source.n in cited) for source in sources)


def cited_sources(text: str, sources: Sequence[AnswerSource]) -> list[dict[str, Any]]:
    """The sources an answer cites as ``[n]``, in order of first citation."""
    seen = _cited_numbers(text, len(sources))
    return [
        {
            "n": n,
            "chunk_id": sources[n - 1].chunk_id,
            "source": sources[n - 1].source,
            "title": sources[n - 1].title,
        }
        for n in seen
    ]
