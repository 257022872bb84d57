"""The settings of each vector store kind, checked when the catalog is written.

A vector store's ``settings`` mapping is free-form in the database but not in
meaning: each kind reads the fields of one model here, and an unknown field
is refused (a misspelt ``ef_serach`` must not silently leave the default in
place). The knowledge package reads the same models, so what validation
accepted is exactly what the store honours.
"""

from __future__ import annotations

__all__ = [
    "EmbeddedStoreSettings",
    "PgVectorStoreSettings",
    "StoreSettings",
    "store_settings",
    "store_settings_model",
]

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from pilothouse.catalog._enums import VectorStoreKind

_Identifier = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")]


class _Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbeddedStoreSettings(_Settings):
    """Settings of the embedded store (chunks in pilothouse's own database).

    Attributes:
        index: ``exact`` compares the query with every vector (recall 1.0);
            ``hnsw`` searches a usearch HNSW graph kept in a file beside a
            SQLite database; ``auto`` is exact below ``exact_below`` chunks
            in a collection and HNSW from there on.
        exact_below: the collection size where ``auto`` switches to HNSW.
        hnsw_m: graph connectivity (links per node).
        hnsw_ef_construction: candidates kept while building the graph.
        hnsw_ef_search: candidates kept while searching (recall vs speed).
            128 by measurement: on real MiniLM embeddings at 100k, 64 gave
            recall@10 0.970 and 128 gave 0.990 at about 1,260 queries per
            second on one core (``docs/benchmarks.md``).
    """

    index: Literal["auto", "exact", "hnsw"] = "auto"
    exact_below: Annotated[int, Field(ge=0)] = 20_000
    hnsw_m: Annotated[int, Field(ge=2, le=128)] = 16
    hnsw_ef_construction: Annotated[int, Field(ge=8, le=4096)] = 128
    hnsw_ef_search: Annotated[int, Field(ge=8, le=4096)] = 128


class PgVectorStoreSettings(_Settings):
    """Settings of a PostgreSQL + pgvector store.

    Attributes:
        password: a ``@secrets(NAME)`` reference to the database password.
        layout: ``pilothouse`` keeps documents and chunks in tables of its
            own (``ph_knowledge_document`` / ``ph_knowledge_chunk``);
            ``langchain4j`` reads and writes one LangChain4j
            ``PgVectorEmbeddingStore`` table per collection, named by the
            collection's ``collection_name`` (``langchain4j_embeddings`` as
            the BPMN connector's ``pgTable`` default), so vectors written by
            LangChain4j are searched as they are.
        m: HNSW links per node (pgvector's ``m``).
        ef_construction: HNSW build candidates (pgvector's ``ef_construction``).
        ef_search: HNSW search candidates (``hnsw.ef_search``, set per query);
            100 rather than pgvector's 40, which gave recall@10 0.95 on real
            embeddings at 100k (``docs/benchmarks.md``).
        text_search_config: the PostgreSQL text search configuration of the
            full-text half of hybrid search.
    """

    password: str | None = None
    layout: Literal["pilothouse", "langchain4j"] = "pilothouse"
    m: Annotated[int, Field(ge=2, le=100)] = 16
    ef_construction: Annotated[int, Field(ge=4, le=1000)] = 64
    ef_search: Annotated[int, Field(ge=1, le=1000)] = 100
    text_search_config: _Identifier = "english"


StoreSettings = EmbeddedStoreSettings | PgVectorStoreSettings


def store_settings(kind: VectorStoreKind, settings: Mapping[str, Any]) -> StoreSettings:
    """Read a vector store's settings as its kind defines them.

    Args:
        kind: the store's kind.
        settings: the ``settings`` mapping from the catalog.

    Returns:
        The typed settings.

    Raises:
        pydantic.ValidationError: an unknown field or a value out of range.
    """
    return store_settings_model(kind).model_validate(dict(settings))


def store_settings_model(
    kind: VectorStoreKind,
) -> type[PgVectorStoreSettings] | type[EmbeddedStoreSettings]:
    """The settings model of a vector store kind.

    Args:
        kind: the store's kind.
    """
    return PgVectorStoreSettings if kind is VectorStoreKind.PGVECTOR else EmbeddedStoreSettings
