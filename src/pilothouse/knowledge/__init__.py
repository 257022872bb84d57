"""Knowledge: documents ingested into collections, and retrieval that cites its sources.

A catalog document collection names its vector store (the embedded store in
pilothouse's own database, or PostgreSQL with pgvector), its embedding model
(the packaged all-MiniLM-L6-v2 by default) and its retrieval defaults.
:class:`Knowledge` ingests files, folders, URLs and given text into it, and
searches it (full text and vectors fused by reciprocal rank, a similarity
threshold, metadata pre-filters). :class:`DescriptionMatcher` ranks skill and
tool descriptions by meaning. See ``docs/knowledge.md``.

Importing the package loads none of numpy, onnxruntime or the stores: each
name is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pilothouse._lazy import lazy_exports

if TYPE_CHECKING:
    from pilothouse.knowledge._describe import DescriptionMatch, DescriptionMatcher
    from pilothouse.knowledge._embedders import (
        MINILM,
        Embedder,
        EmbeddingModelInfo,
        LocalMiniLM,
    )
    from pilothouse.knowledge._errors import (
        DimensionMismatchError,
        DocumentError,
        InputTooLongError,
        KnowledgeError,
        KnowledgeSetupError,
    )
    from pilothouse.knowledge._service import Knowledge
    from pilothouse.knowledge._types import (
        DocumentChunk,
        DocumentInfo,
        FileDocument,
        IngestedDocument,
        IngestJobStatus,
        IngestProgress,
        IngestResult,
        MetadataFilter,
        ProgressCallback,
        SearchHit,
        SearchResult,
        SearchStatus,
        TextDocument,
    )

__all__ = [
    "MINILM",
    "DescriptionMatch",
    "DescriptionMatcher",
    "DimensionMismatchError",
    "DocumentChunk",
    "DocumentError",
    "DocumentInfo",
    "Embedder",
    "EmbeddingModelInfo",
    "FileDocument",
    "IngestJobStatus",
    "IngestProgress",
    "IngestResult",
    "IngestedDocument",
    "InputTooLongError",
    "Knowledge",
    "KnowledgeError",
    "KnowledgeSetupError",
    "LocalMiniLM",
    "MetadataFilter",
    "ProgressCallback",
    "SearchHit",
    "SearchResult",
    "SearchStatus",
    "TextDocument",
]

_LAZY: dict[str, tuple[str, ...]] = {
    "_describe": ("DescriptionMatch", "DescriptionMatcher"),
    "_embedders": ("MINILM", "Embedder", "EmbeddingModelInfo", "LocalMiniLM"),
    "_errors": (
        "DimensionMismatchError",
        "DocumentError",
        "InputTooLongError",
        "KnowledgeError",
        "KnowledgeSetupError",
    ),
    "_service": ("Knowledge",),
    "_types": (
        "DocumentChunk",
        "DocumentInfo",
        "FileDocument",
        "IngestJobStatus",
        "IngestProgress",
        "IngestResult",
        "IngestedDocument",
        "MetadataFilter",
        "ProgressCallback",
        "SearchHit",
        "SearchResult",
        "SearchStatus",
        "TextDocument",
    ),
}
_MODULE_OF, __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
