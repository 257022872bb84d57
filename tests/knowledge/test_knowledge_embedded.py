"""Ingestion, search and deletion on the embedded store, with the packaged model.

Runs on SQLite and on the machine's PostgreSQL (the ``database`` fixture).
"""

from __future__ import annotations

import io
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from pilothouse.errors import NotFoundError
from pilothouse.knowledge import (
    DimensionMismatchError,
    IngestProgress,
    Knowledge,
    KnowledgeError,
    KnowledgeSetupError,
    LocalMiniLM,
    TextDocument,
)
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

HANDBOOK = """# Employee handbook

## Travel

Book trains for trips under four hours. Flights need approval from a manager.

## Expenses

Submit receipts within 30 days. Meals are reimbursed up to 25 EUR per day.

## Security

Lock your laptop when you leave your desk. Report lost badges to the front desk at once.
"""


def _pdf(text: str) -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=12)
    pdf.multi_cell(0, 10, text)
    return bytes(pdf.output())


def _docx(text: str) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Parking", level=1)
    document.add_paragraph(text)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "handbook.md").write_text(HANDBOOK, encoding="utf-8")
    (root / "sub" / "warranty.pdf").write_bytes(_pdf("The warranty on laptops lasts three years."))
    (root / "sub" / "parking.docx").write_bytes(_docx("Visitors park on level minus two."))
    (root / "sub" / "page.html").write_text(
        "<h1>Canteen</h1><p>The canteen opens at 11:30 and serves vegan dishes.</p>"
    )
    (root / "notes.txt").write_text("The wifi password changes every Monday.")
    (root / "image.png").write_bytes(b"\x89PNG")
    (root / ".hidden.md").write_text("never read")
    return root


async def test_a_folder_is_ingested_searched_and_cited(knowledge: Knowledge, folder: Path) -> None:
    events: list[IngestProgress] = []
    result = await knowledge.ingest(
        "default", "DOCS", [folder], metadata={"team": "hr"}, progress=events.append
    )
    statuses = {Path(d.source).name: d.status for d in result.documents}
    assert statuses == {
        "handbook.md": "added",
        "image.png": "skipped",
        "notes.txt": "added",
        "page.html": "added",
        "parking.docx": "added",
        "warranty.pdf": "added",
    }
    assert (result.chunk_size, result.chunk_overlap) == (120, 20)
    assert [e.event for e in events].count("started") == 6
    assert [e.event for e in events].count("done") == 6

    found = await knowledge.search("default", "DOCS", "How long is the warranty on a laptop?")
    assert found.status == "ok"
    best = found.hits[0]
    assert Path(best.source).name == "warranty.pdf"
    assert best.metadata["pages"] == [1] and best.metadata["team"] == "hr"
    assert best.chunk_id and best.document_id and 0 < best.similarity <= 1

    parking = await knowledge.search("default", "DOCS", "Where do visitors park?", top_k=1)
    assert [Path(h.source).name for h in parking.hits] == ["parking.docx"]
    assert parking.hits[0].heading == "Parking"

    meals = await knowledge.search("default", "DOCS", "meal allowance per day", top_k=2)
    assert meals.hits[0].heading == "Employee handbook > Expenses"


async def test_reingesting_is_idempotent_and_changes_replace(
    knowledge: Knowledge, folder: Path
) -> None:
    await knowledge.ingest("default", "DOCS", [folder])
    again = await knowledge.ingest("default", "DOCS", [folder])
    assert {d.status for d in again.documents} == {"unchanged", "skipped"}
    before = {d.source: d for d in await knowledge.documents("default", "DOCS")}

    (folder / "notes.txt").write_text("The wifi password changes every Friday.")
    changed = await knowledge.ingest("default", "DOCS", [folder / "notes.txt"])
    assert changed.documents[0].status == "replaced"
    after = {d.source: d for d in await knowledge.documents("default", "DOCS")}
    source = str((folder / "notes.txt").resolve())
    assert after[source].id == before[source].id
    assert after[source].content_hash != before[source].content_hash
    hits = (await knowledge.search("default", "DOCS", "when does the wifi password change")).hits
    assert "Friday" in hits[0].text
    assert all("Monday" not in h.text for h in hits)


async def test_a_failing_file_is_reported_and_leaves_nothing(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    good = tmp_path / "good.md"
    good.write_text("Printers are on the second floor.")
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"%PDF-1.7 truncated")
    result = await knowledge.ingest(
        "default", "DOCS", [bad, good, tmp_path / "missing.txt", "no/such.xyz"]
    )
    assert [d.status for d in result.documents] == ["failed", "added", "failed", "failed"]
    assert "not a readable pdf document" in (result.documents[0].error or "")
    assert "no such file" in (result.documents[2].error or "")
    assert "not a supported type" in (result.documents[3].error or "")
    sources = [d.source for d in await knowledge.documents("default", "DOCS")]
    assert sources == [str(good.resolve())]


async def test_delete_a_document_and_search_without_it(knowledge: Knowledge) -> None:
    await knowledge.ingest(
        "default",
        "DOCS",
        [
            TextDocument("crm:1", "The customer Initech prefers invoices by email."),
            TextDocument("crm:2", "The customer Globex pays by bank transfer."),
        ],
    )
    assert await knowledge.delete_document("default", "DOCS", "crm:1") is True
    assert await knowledge.delete_document("default", "DOCS", "crm:1") is False
    hits = (await knowledge.search("default", "DOCS", "how does Initech want invoices")).hits
    assert [h.source for h in hits] == ["crm:2"]


async def test_filters_threshold_modes_and_empty(knowledge: Knowledge) -> None:
    empty = await knowledge.search("default", "DOCS", "anything")
    assert empty.status == "empty_collection" and empty.hits == []
    await knowledge.ingest(
        "default",
        "DOCS",
        [
            TextDocument("a", "Invoices are due within 30 days.", metadata={"region": "eu"}),
            TextDocument("b", "Invoices are due within 60 days.", metadata={"region": "us"}),
            TextDocument("c", "Our office dog is called Biscuit.", metadata={"region": "eu"}),
        ],
    )
    query = "When are invoices due?"
    us = await knowledge.search("default", "DOCS", query, filters={"region": "us"})
    assert [h.source for h in us.hits] == ["b"]
    either = await knowledge.search("default", "DOCS", query, filters={"region": ["us", "eu"]})
    assert {h.source for h in either.hits} == {"a", "b", "c"}
    nobody = await knowledge.search("default", "DOCS", query, filters={"region": "apac"})
    assert nobody.status == "no_match"

    strict = await knowledge.search("default", "DOCS", query, threshold=0.95)
    assert strict.status == "nothing_passed_threshold" and strict.hits == []
    assert strict.below_threshold >= 1 and strict.best_similarity is not None

    text_only = await knowledge.search("default", "DOCS", "Biscuit", mode="text")
    assert [h.source for h in text_only.hits] == ["c"]
    canine = "canine in the workplace"
    vector_only = await knowledge.search("default", "DOCS", canine, mode="vector")
    assert vector_only.hits[0].source == "c"
    with pytest.raises(KnowledgeError, match="mode must be hybrid, vector or text"):
        await knowledge.search("default", "DOCS", query, mode="fuzzy")
    with pytest.raises(KnowledgeError, match="filter key 'a b' must be"):
        await knowledge.search("default", "DOCS", query, filters={"a b": "x"})


async def test_a_filter_matches_only_values_of_its_own_json_type(knowledge: Knowledge) -> None:
    # PostgreSQL cast every chunk's value to the filter's type: a number
    # filter over a key some chunk holds as text failed the search (500).
    levels: list[Any] = ["high", 3, 2.5, True]
    await knowledge.ingest(
        "default",
        "DOCS",
        [
            TextDocument(f"s{i}", f"Invoices are due within {i + 1} weeks.", metadata={"level": v})
            for i, v in enumerate(levels)
        ],
    )
    for mode in ("hybrid", "text"):
        for i, value in enumerate(levels):
            found = await knowledge.search(
                "default", "DOCS", "When are invoices due?", filters={"level": value}, mode=mode
            )
            assert [h.source for h in found.hits] == [f"s{i}"], (mode, value)
        nothing = await knowledge.search(
            "default", "DOCS", "invoices", filters={"level": [-1, 0.5, False]}, mode=mode
        )
        assert nothing.hits == [], mode


async def test_a_text_filter_matches_only_text_and_integers_compare_exactly(
    knowledge: Knowledge,
) -> None:
    # PostgreSQL read every value as text: "5" matched a stored 5 there and
    # not on SQLite. Numbers compared as floats: 2**53 matched 2**53 + 1.
    big = 2**53
    codes: list[Any] = [5, "5", big + 1, big, 7.0]
    await knowledge.ingest(
        "default",
        "DOCS",
        [
            TextDocument(f"n{i}", f"Invoices are due within {i + 1} weeks.", metadata={"code": v})
            for i, v in enumerate(codes)
        ],
    )
    cases: list[tuple[Any, list[str]]] = [
        ("5", ["n1"]),
        (5, ["n0"]),
        (5.0, ["n0"]),
        (big + 1, ["n2"]),
        (big, ["n3"]),
        (7, ["n4"]),
        ("7.0", []),
        (2**63 - 1, []),
        (-(2**63), []),
    ]
    for mode in ("hybrid", "text"):
        for value, sources in cases:
            found = await knowledge.search(
                "default", "DOCS", "When are invoices due?", filters={"code": value}, mode=mode
            )
            assert sorted(h.source for h in found.hits) == sources, (mode, value)
    for wrong in (2**63, -(2**63) - 1, float("inf"), float("nan")):
        with pytest.raises(KnowledgeError, match="filter 'code'"):
            await knowledge.search("default", "DOCS", "invoices", filters={"code": wrong})


async def test_a_filter_of_text_no_metadata_holds_is_refused(knowledge: Knowledge) -> None:
    # Metadata with a NUL or a lone surrogate is refused at ingestion, so no
    # value matches it: PostgreSQL failed the search, SQLite found nothing.
    await knowledge.ingest("default", "DOCS", [TextDocument("a", "Invoices are due.")])
    for wrong in ("a\x00b", "\ud800", ["ok", "\x00"]):
        with pytest.raises(KnowledgeError, match="filter 'code': the value contains"):
            await knowledge.search("default", "DOCS", "invoices", filters={"code": wrong})


async def test_the_collection_threshold_applies_by_default(knowledge: Knowledge) -> None:
    await knowledge.ingest("default", "STRICT", [TextDocument("x", "Lunch is at noon.")])
    result = await knowledge.search("default", "STRICT", "When is lunch served?")
    assert result.status == "nothing_passed_threshold" and result.threshold == 0.99


Loader = Callable[..., Awaitable[None]]


async def test_unknown_collection_and_chunk_size_over_the_limit(
    database: Database, tmp_path: Path, minilm: LocalMiniLM, load_catalog: Loader
) -> None:
    await load_catalog(
        database,
        tmp_path,
        """
        vector_stores: [{code: S}]
        document_collections:
          - {code: BIG, store: S, collection_name: big, chunk_size: 400}
        """,
    )
    service = Knowledge(database, local_model=minilm)
    with pytest.raises(NotFoundError, match="'NOPE' is not an active document collection"):
        await service.search("default", "NOPE", "x")
    with pytest.raises(KnowledgeSetupError, match=r"chunk_size 400 is more than .* \(256 tokens"):
        await service.ingest("default", "BIG", [TextDocument("x", "y")])
    await service.aclose()


async def test_another_model_on_the_same_collection_is_refused(
    knowledge: Knowledge, database: Database
) -> None:
    from sqlalchemy import text

    await knowledge.ingest("default", "DOCS", [TextDocument("x", "Some text.")])
    # As if the collection had been filled by a 512-dimension model.
    async with database.engine.begin() as connection:
        await connection.execute(text("UPDATE knowledge_collection SET dimension = 512"))
    with pytest.raises(DimensionMismatchError, match="dimension 512 .* gives 384") as caught:
        await knowledge.search("default", "DOCS", "text")
    assert (caught.value.expected, caught.value.actual) == (512, 384)


async def test_hnsw_collection_survives_a_restart(
    database: Database, tmp_path: Path, minilm: LocalMiniLM, load_catalog: Loader
) -> None:
    await load_catalog(database, tmp_path)
    facts = [f"Room {i} is on floor {i % 9} and seats {i + 2} people." for i in range(60)]
    docs = [TextDocument(f"room:{i}", fact) for i, fact in enumerate(facts)]
    first = Knowledge(database, local_model=minilm)
    await first.ingest("default", "GRAPH", docs)
    hits = (await first.search("default", "GRAPH", "Room 17 seats how many people?")).hits
    assert "room:17" in [h.source for h in hits[:3]]
    await first.aclose()
    if database.is_sqlite:
        saved = list(Path(str(database.url).split("///")[1] + ".knowledge").glob("*.usearch"))
        assert len(saved) == 1
    second = Knowledge(database, local_model=minilm)
    await second.delete_document("default", "GRAPH", "room:17")
    hits = (await second.search("default", "GRAPH", "Room 17 seats how many people?")).hits
    assert "room:17" not in [h.source for h in hits]
    await second.aclose()


async def test_the_same_file_at_two_paths_is_indexed_once(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    text = "# Parking\n\nVisitors park in lot B behind the building.\n"
    for folder in ("site", "mirror", "later"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "parking.md").write_text(text)
    first = await knowledge.ingest(
        "default", "DOCS", [tmp_path / "site" / "parking.md", tmp_path / "mirror" / "parking.md"]
    )
    assert [d.status for d in first.documents] == ["added", "skipped"]
    assert "the same content as" in (first.documents[1].error or "")
    again = await knowledge.ingest("default", "DOCS", [tmp_path / "later" / "parking.md"])
    assert again.documents[0].status == "skipped"
    assert str(tmp_path / "site" / "parking.md") in (again.documents[0].error or "")
    # The original at its own path is unchanged, not a duplicate of itself.
    same = await knowledge.ingest("default", "DOCS", [tmp_path / "site" / "parking.md"])
    assert same.documents[0].status == "unchanged"
    assert len(await knowledge.documents("default", "DOCS")) == 1


async def test_a_large_document_reports_its_chunks_as_they_are_embedded(
    knowledge: Knowledge, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pilothouse.knowledge import TextDocument, _ingestrun

    # Slices of 2 chunks stand in for the 256 of a real run.
    monkeypatch.setattr(_ingestrun, "EMBED_BATCH_CHUNKS", 2)
    paragraphs = [
        f"Section {n} of the safety manual explains how forklifts are inspected before "
        f"every shift, who may drive them, and where they are parked overnight ({n})."
        for n in range(12)
    ]
    events: list[IngestProgress] = []
    result = await knowledge.ingest(
        "default",
        "DOCS",
        [TextDocument("manual", "\n\n".join(paragraphs))],
        progress=events.append,
    )
    chunks = result.documents[0].chunks
    assert chunks > 2
    embedding = [e for e in events if e.event == "embedding"]
    assert [e.embedded for e in embedding] == sorted(e.embedded for e in embedding)
    assert embedding[0].embedded == 2 and embedding[-1].embedded == chunks
    assert all(e.chunks == chunks and e.source == "manual" for e in embedding)
    assert events[-1].event == "done"


async def test_a_documents_chunks_are_listed_in_order_and_paged(knowledge: Knowledge) -> None:
    await knowledge.ingest(
        "default",
        "DOCS",
        [
            TextDocument("hb", HANDBOOK, format="markdown"),
            TextDocument("other", "The canteen opens at 11:30."),
        ],
    )
    (info,) = [d for d in await knowledge.documents("default", "DOCS") if d.source == "hb"]
    chunks = await knowledge.chunks("default", "DOCS", "hb", limit=100, offset=0)
    assert len(chunks) == info.chunks and len(chunks) >= 3
    assert [c.position for c in chunks] == list(range(len(chunks)))
    text = " ".join(c.text for c in chunks)
    for words in ("Book trains", "Submit receipts", "Lock your laptop"):
        assert words in text
    assert "canteen" not in text
    assert any("Expenses" in c.heading for c in chunks)
    paged = await knowledge.chunks("default", "DOCS", "hb", limit=2, offset=1)
    assert [c.chunk_id for c in paged] == [c.chunk_id for c in chunks[1:3]]
    assert await knowledge.chunks("default", "DOCS", "no-such", limit=10, offset=0) == []
