"""The embedded store's in-process vector index of one collection.

The database holds every vector (float32 blobs); this index is a cache of
them, rebuilt or brought up to date from the database when the collection's
revision moved. Two modes, chosen by measurement (``docs/benchmarks.md``):

- exact: a float32 matrix and one matrix-vector product per query. Recall
  1.0; cost grows with the collection (about 11 ms per query at 100k x 384
  on one core).
- HNSW: a usearch graph, about 0.8 ms per query at 100k x 384 with recall@10
  0.99 on real MiniLM embeddings (ef_search 128). On a SQLite file database the graph is saved
  beside it (``<database>.knowledge/collection-<id>.usearch``) so a restart
  does not rebuild it; the database stays the truth, so a stale or missing
  file costs time, never results.

A metadata pre-filter hands the index the chunk ids that match; those are
compared exactly (from the matrix, or vectors read back from the graph),
so a filter never loses a match to the graph's approximation.
"""

from __future__ import annotations

__all__ = ["VectorIndex"]

import importlib
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from pilothouse.catalog._stores import EmbeddedStoreSettings
from pilothouse.knowledge._embedders import Vectors

Ids = npt.NDArray[np.int64]


class VectorIndex:
    """Vectors of one collection, searchable by cosine similarity.

    Args:
        dimension: the vectors' length.
        settings: the store's index settings.
        path: where to keep the HNSW graph between runs, or None.
    """

    def __init__(self, dimension: int, settings: EmbeddedStoreSettings, path: Path | None) -> None:
        self.dimension = dimension
        self.settings = settings
        self.path = path
        self.revision = -1
        # Searches run in worker threads while writes of this process update
        # the index on the event loop: the ids, the matrix and the graph
        # change together under this lock.
        self._lock = threading.RLock()
        self._ids: Ids = np.zeros(0, dtype=np.int64)
        self._matrix: Vectors = np.zeros((0, dimension), dtype=np.float32)
        self._hnsw: Any = None
        self._dirty = False

    def __len__(self) -> int:
        return int(self._ids.shape[0])

    @property
    def uses_hnsw(self) -> bool:
        """Whether queries go through the HNSW graph."""
        return self._hnsw is not None

    def _wants_hnsw(self, count: int) -> bool:
        mode = self.settings.index
        return mode == "hnsw" or (mode == "auto" and count >= self.settings.exact_below)

    def ids(self) -> Ids:
        """The chunk ids held."""
        return self._ids

    def add(self, ids: Ids, vectors: Vectors) -> None:
        """Add vectors (ids not yet held)."""
        if ids.shape[0] == 0:
            return
        with self._lock:
            self._add(ids, vectors)

    def _add(self, ids: Ids, vectors: Vectors) -> None:
        self._ids = np.concatenate([self._ids, ids])
        if self._hnsw is not None:
            self._hnsw.add(ids, vectors, threads=1)
        else:
            self._matrix = np.concatenate([self._matrix, vectors])
        self._dirty = True
        self._switch()

    def remove(self, ids: Ids) -> None:
        """Remove vectors by chunk id (unknown ids are ignored)."""
        if ids.shape[0] == 0:
            return
        with self._lock:
            self._remove(ids)

    def _remove(self, ids: Ids) -> None:
        keep = ~np.isin(self._ids, ids)
        if self._hnsw is not None:
            self._hnsw.remove(ids[np.isin(ids, self._ids)])
        else:
            self._matrix = self._matrix[keep]
        self._ids = self._ids[keep]
        self._dirty = True
        self._switch()

    def _switch(self) -> None:
        """Move between exact and HNSW as the collection crosses the threshold."""
        count = len(self)
        if self._hnsw is None and self._wants_hnsw(count):
            self._hnsw = self._new_graph()
            if count:
                self._hnsw.add(self._ids, self._matrix, threads=0)
            self._matrix = np.zeros((0, self.dimension), dtype=np.float32)
        elif self._hnsw is not None and not self._wants_hnsw(count):
            self._matrix = self._vectors(self._ids)
            self._hnsw = None

    def _new_graph(self) -> Any:
        usearch: Any = importlib.import_module("usearch.index")
        return usearch.Index(
            ndim=self.dimension,
            metric="cos",
            dtype="f32",
            connectivity=self.settings.hnsw_m,
            expansion_add=self.settings.hnsw_ef_construction,
            expansion_search=self.settings.hnsw_ef_search,
        )

    def load_saved(self) -> bool:
        """Load the saved graph, if a usable one is there; True when loaded."""
        if self.path is None or not self.path.exists() or not self._wants_hnsw(1):
            return False
        usearch: Any = importlib.import_module("usearch.index")
        try:
            graph: Any = usearch.Index.restore(str(self.path))
        except (OSError, RuntimeError, ValueError):
            return False  # a damaged or foreign file: rebuilt from the database
        if graph is None or graph.ndim != self.dimension:
            return False
        graph.expansion_search = self.settings.hnsw_ef_search
        self._hnsw = graph
        self._ids = np.asarray(graph.keys, dtype=np.int64)
        self._matrix = np.zeros((0, self.dimension), dtype=np.float32)
        return True

    def save(self) -> None:
        """Write the HNSW graph beside the database, atomically, when it changed."""
        if self.path is None or self._hnsw is None or not self._dirty:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        with self._lock:
            self._hnsw.save(str(temporary))
            self._dirty = False
        os.replace(temporary, self.path)

    def vectors(self, ids: Ids) -> Vectors:
        """Return the vectors of held ids, in the order given."""
        if ids.shape[0] == 0:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            return self._vectors(ids)

    def _vectors(self, ids: Ids) -> Vectors:
        if self._hnsw is not None:
            found: Any = self._hnsw.get(ids, dtype=np.float32)
            rows = [found] if ids.shape[0] == 1 else list(found)
            return np.stack([np.asarray(r, dtype=np.float32).reshape(-1) for r in rows])
        position = {int(v): i for i, v in enumerate(self._ids)}
        return self._matrix[[position[int(i)] for i in ids]]

    def search(self, query: Vectors, k: int, allowed: Ids | None = None) -> list[tuple[int, float]]:
        """Find the ``k`` most similar vectors.

        Args:
            query: a unit vector.
            k: how many.
            allowed: only these chunk ids (a metadata pre-filter), compared exactly.

        Returns:
            ``(chunk id, cosine similarity)``, most similar first.
        """
        with self._lock:
            return self._search(query, k, allowed)

    def _search(self, query: Vectors, k: int, allowed: Ids | None) -> list[tuple[int, float]]:
        if len(self) == 0 or k <= 0:
            return []
        if allowed is not None:
            allowed = allowed[np.isin(allowed, self._ids)]
            return _top(allowed, self._vectors(allowed), query, k)
        if self._hnsw is None:
            return _top(self._ids, self._matrix, query, k)
        matches: Any = self._hnsw.search(query, min(k, len(self)), threads=1)
        keys = np.asarray(matches.keys, dtype=np.int64)
        distances = np.asarray(matches.distances, dtype=np.float32)
        return [(int(key), float(1.0 - d)) for key, d in zip(keys, distances, strict=True)]


def _top(ids: Ids, matrix: Vectors, query: Vectors, k: int) -> list[tuple[int, float]]:
    if ids.shape[0] == 0:
        return []
    scores = matrix @ query
    k = min(k, scores.shape[0])
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best])]
    return [(int(ids[i]), float(scores[i])) for i in best]
