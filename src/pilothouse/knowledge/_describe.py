"""Discovery by meaning: which skill or tool descriptions match a request.

Seed 002 gives skills and tools a ``description_embedding`` for semantic
lookup: when an agent has many tools (clients degrade past about 20-40),
offer the few whose descriptions match the request. Descriptions are
embedded as documents, the request as a query, and vectors are cached by
text, so a catalog's descriptions are embedded once per process.
"""

from __future__ import annotations

__all__ = ["DescriptionMatch", "DescriptionMatcher"]

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from pilothouse.knowledge._embedders import Embedder, LocalMiniLM, Vectors


@dataclass(frozen=True)
class DescriptionMatch:
    """A description that matches a request.

    Attributes:
        key: the caller's key of the description (a skill or tool code).
        similarity: cosine similarity of the description to the request.
    """

    key: str
    similarity: float


class DescriptionMatcher:
    """Ranks descriptions by how well they match a request.

    Args:
        embedder: the embedding model (the packaged MiniLM by default).
        cache_size: description vectors kept (least recently used dropped).
    """

    def __init__(self, embedder: Embedder | None = None, *, cache_size: int = 4096) -> None:
        self.embedder = embedder or LocalMiniLM()
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_size = cache_size

    def _key(self, text: str) -> str:
        digest = hashlib.sha256(f"{self.embedder.info.name}\x00{text}".encode()).hexdigest()
        return digest

    async def vectors(self, descriptions: Mapping[str, str]) -> dict[str, Vectors]:
        """Embed descriptions (cached by text); long ones are cut to the model's limit."""
        wanted = {key: self._key(text) for key, text in descriptions.items()}
        missing = {h: descriptions[k] for k, h in wanted.items() if h not in self._cache}
        if missing:
            texts, _ = self.embedder.prepare(list(missing.values()), "document", truncate=True)
            fresh = await self.embedder.embed_prepared(texts, "document")
            for digest, vector in zip(missing, fresh, strict=True):
                self._cache[digest] = vector
        for digest in wanted.values():
            self._cache.move_to_end(digest)
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return {key: self._cache[digest] for key, digest in wanted.items()}

    async def match(
        self,
        request: str,
        descriptions: Mapping[str, str],
        *,
        top_k: int = 5,
        threshold: float = 0.0,
    ) -> list[DescriptionMatch]:
        """Return the descriptions that best match a request.

        Args:
            request: what the user asked.
            descriptions: key (skill or tool code) -> description.
            top_k: at most this many.
            threshold: least cosine similarity.

        Returns:
            The matches, best first.
        """
        if not descriptions:
            return []
        vectors = await self.vectors(descriptions)
        query = (await self.embedder.embed([request], "query"))[0]
        keys: list[str] = list(vectors)
        scores = np.stack([vectors[k] for k in keys]) @ query
        order = [int(i) for i in np.argsort(-scores)[:top_k]]
        return [
            DescriptionMatch(keys[i], float(scores[i])) for i in order if scores[i] >= threshold
        ]
