"""Fixtures of the knowledge tests: a catalog with collections, one shared MiniLM."""

from __future__ import annotations

import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from pilothouse.catalog import import_catalog
from pilothouse.knowledge import Knowledge, LocalMiniLM
from pilothouse.store import Database

CATALOG = """
vector_stores:
  - code: EMBED
  - code: HNSW
    settings: {index: hnsw, hnsw_m: 16, hnsw_ef_construction: 64, hnsw_ef_search: 64}
document_collections:
  - code: DOCS
    store: EMBED
    collection_name: docs
    chunk_size: 120
    chunk_overlap: 20
  - code: GRAPH
    store: HNSW
    collection_name: graph
  - code: STRICT
    store: EMBED
    collection_name: strict
    similarity_threshold: 0.99
"""


@pytest.fixture(scope="session")
def minilm() -> LocalMiniLM:
    """One packaged model for the whole session (loading takes about a second)."""
    return LocalMiniLM()


async def _load_catalog(database: Database, tmp_path: Path, text: str = CATALOG) -> None:
    path = tmp_path / "knowledge-catalog.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    await import_catalog(database, "default", [path])


@pytest.fixture
def load_catalog() -> Callable[..., Awaitable[None]]:
    """Imports a catalog text (the knowledge catalog by default) into a database."""
    return _load_catalog


@pytest.fixture
async def knowledge(
    database: Database, tmp_path: Path, minilm: LocalMiniLM
) -> AsyncIterator[Knowledge]:
    await _load_catalog(database, tmp_path)
    service = Knowledge(database, local_model=minilm)
    yield service
    await service.aclose()
