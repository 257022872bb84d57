"""What every vector store offers the knowledge service, and a resolved collection."""

from __future__ import annotations

__all__ = ["Backend", "ChunkRow", "Collection", "NewDocument", "filter_items"]

import math
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pilothouse.catalog._enums import SearchMode, VectorStoreKind
from pilothouse.catalog._stores import StoreSettings
from pilothouse.knowledge._embedders import EmbeddingModelInfo, Vectors
from pilothouse.knowledge._errors import KnowledgeError
from pilothouse.knowledge._types import DocumentInfo, FilterValue, MetadataFilter
from pilothouse.store._text import unstorable

if TYPE_CHECKING:
    from pilothouse.knowledge._chunking import Chunk
    from pilothouse.providers import ModelSpec


@dataclass(frozen=True)
class Collection:
    """A catalog collection with everything resolved: store, model, defaults.

    Attributes:
        id: the catalog row's id.
        code: its business key.
        tenant: whose it is.
        name: the collection's name inside its store (a LangChain4j table's name).
        store_code: its vector store's code.
        store_kind: embedded or pgvector.
        store_settings: the store's typed settings.
        connection: a pgvector store's URL (no password).
        password: the resolved password (never shown).
        top_k: hits returned by default.
        threshold: the similarity threshold by default.
        mode: the search mode by default.
        chunk_size: tokens per chunk as the catalog says (None: 512, bounded).
        chunk_overlap: tokens of overlap.
        model: the embedding model's facts.
        model_spec: the embedding model's spec (None: the packaged MiniLM).
        rerank_spec: the chat model that reranks (None: no reranking).
        rerank_candidates: the fused candidates it scores.
    """

    id: int
    code: str
    tenant: str
    name: str
    store_code: str
    store_kind: VectorStoreKind
    store_settings: StoreSettings
    connection: str | None
    password: str | None = field(repr=False)
    top_k: int
    threshold: float
    mode: SearchMode
    chunk_size: int | None
    chunk_overlap: int
    model: EmbeddingModelInfo
    model_spec: ModelSpec | None = field(default=None, repr=False)
    rerank_spec: ModelSpec | None = field(default=None, repr=False)
    rerank_candidates: int = 10


@dataclass(frozen=True)
class NewDocument:
    """A document about to be written.

    Attributes:
        source: its identity in the collection.
        title: its title.
        content_hash: what re-ingestion compares.
        metadata: kept with the document and merged into each chunk's.
        char_count: its text's length.
    """

    source: str
    title: str
    content_hash: str
    metadata: dict[str, Any]
    char_count: int


@dataclass(frozen=True)
class ChunkRow:
    """A stored chunk as search returns it.

    Attributes:
        key: the chunk's id in the store.
        document_id: its document's id.
        source: its document's source.
        title: its document's title.
        text: its text.
        heading: its heading path.
        position: its place in the document.
        metadata: its metadata.
    """

    key: str
    document_id: str
    source: str
    title: str
    text: str
    heading: str
    position: int
    metadata: dict[str, Any]


class Backend(ABC):
    """A vector store: documents, chunks, vector and full-text candidates."""

    @abstractmethod
    async def check_model(self, collection: Collection) -> bool:
        """Check the collection's stored vectors were made by its model.

        Returns:
            Whether the collection holds vectors at all.

        Raises:
            DimensionMismatchError: the stored vectors have another dimension.
            KnowledgeSetupError: they were made by another model.
        """

    @abstractmethod
    async def content_hash(self, collection: Collection, source: str) -> str | None:
        """Return the stored content hash of a document, or None when absent."""

    @abstractmethod
    async def source_with_hash(
        self, collection: Collection, content_hash: str, other_than: str
    ) -> str | None:
        """Return another document's source whose content hash is ``content_hash``, or None."""

    @abstractmethod
    async def write(
        self,
        collection: Collection,
        document: NewDocument,
        chunks: Sequence[Chunk],
        vectors: Vectors,
    ) -> tuple[str, bool]:
        """Replace (or add) a document and its chunks, in one transaction.

        Returns:
            The document's id and whether an older version was replaced.
        """

    @abstractmethod
    async def delete(self, collection: Collection, source: str) -> bool:
        """Delete a document and its chunks; False when there was none."""

    @abstractmethod
    async def documents(self, collection: Collection) -> list[DocumentInfo]:
        """List the collection's documents."""

    @abstractmethod
    async def chunks(
        self, collection: Collection, source: str, *, limit: int, offset: int
    ) -> list[ChunkRow]:
        """A document's chunks in document order (``limit`` of them from ``offset``)."""

    @abstractmethod
    async def vector_candidates(
        self, collection: Collection, query: Vectors, k: int, filters: MetadataFilter
    ) -> list[tuple[str, float]]:
        """Return ``(chunk key, cosine similarity)`` of the nearest chunks, nearest first."""

    @abstractmethod
    async def text_candidates(
        self, collection: Collection, query: str, k: int, filters: MetadataFilter
    ) -> list[str]:
        """Return the keys of the best full-text matches, best first."""

    @abstractmethod
    async def similarities(
        self, collection: Collection, keys: Sequence[str], query: Vectors
    ) -> dict[str, float]:
        """Return the cosine similarity of each chunk to the query."""

    @abstractmethod
    async def fetch(self, collection: Collection, keys: Sequence[str]) -> dict[str, ChunkRow]:
        """Read chunks by key."""

    async def aclose(self) -> None:  # noqa: B027 - stores without connections close nothing
        """Release connections."""


_FILTER_KEY = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_INT64 = 2**63
"""Integers a filter compares exactly on every store: SQLite's are 64-bit."""


def filter_items(filters: MetadataFilter) -> list[tuple[str, list[FilterValue]]]:
    """Check a metadata filter and list each key with its accepted values.

    Every store checks its filters here, so each refuses the same filters
    with the same words.

    Raises:
        KnowledgeError: a key is not a plain name, a value is not a string,
            number or boolean, is a number no store compares alike (an
            integer past 64 bits, infinity, NaN) or text no metadata holds
            (a NUL, a lone surrogate); each names the key.
    """
    items: list[tuple[str, list[FilterValue]]] = []
    for key, value in filters.items():
        if not _FILTER_KEY.match(key):
            raise KnowledgeError(f"filter key {key!r} must be letters, digits, '_', '.' or '-'")
        values: list[Any] = (
            list(value) if isinstance(value, Sequence) and not isinstance(value, str) else [value]
        )
        if not values or not all(isinstance(v, str | int | float) for v in values):
            raise KnowledgeError(
                f"filter {key!r}: values must be strings, numbers or booleans (or a list of them)"
            )
        for checked in values:
            _check_value(key, checked)
        items.append((key, values))
    return items


def _check_value(key: str, value: FilterValue) -> None:
    if isinstance(value, str):
        # Metadata holding such text is refused at ingestion, so it matches
        # nothing; PostgreSQL's text and jsonb refuse it outright (a failed
        # search there, an empty answer on SQLite).
        what = unstorable(value)
        if what is not None:
            raise KnowledgeError(
                f"filter {key!r}: the value contains {what}, which no metadata holds; remove it"
            )
        return
    if isinstance(value, bool):
        return
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise KnowledgeError(
            f"filter {key!r}: {value} is past the 64-bit integers a filter compares "
            "(-2**63 to 2**63 - 1); store and filter such a value as a string"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise KnowledgeError(f"filter {key!r}: {value} is no JSON number; give a finite number")
