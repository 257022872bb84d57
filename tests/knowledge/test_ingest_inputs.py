"""Ingesting what is not text: one bad document fails alone, on both stores.

Binary junk (random bytes, NUL bytes) is refused as a binary file rather
than indexed as noise; text holding a NUL or a lone surrogate fails that
document; an empty text says it has no text (the scanned-PDF hint is for
PDFs). The valid documents of the same run are written, on SQLite and on
PostgreSQL (where a NUL used to abort the whole run).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pilothouse.cli import app
from pilothouse.knowledge import Knowledge, LocalMiniLM
from pilothouse.types import TextDocument

pytestmark = pytest.mark.anyio


def _junk() -> bytes:
    # Random bytes without a NUL: the decoder's control-character count refuses them.
    rng = random.Random(7)
    return bytes(rng.randrange(1, 256) for _ in range(20_000))


async def test_binary_files_and_unstorable_text_fail_alone_and_the_rest_is_written(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    files = {
        "good.md": b"# Parking\n\nVisitors park in lot B.",
        "junk.txt": _junk(),
        "nul.txt": b"Lunch is at noon.\x00\x01\x02",
        "empty.txt": b"",
        # Not UTF-8, still text: read as Latin-1; UTF-16 with its byte-order mark.
        "latin.txt": "Caf\xe9 opens at eight.".encode("latin-1"),
        "wide.txt": "\ufeffBadges at the front desk.".encode("utf-16-le"),
    }
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    given = [
        TextDocument("given:nul", "Printers\x00 on floor two."),
        TextDocument("given:surrogate", "Printers \ud800 on floor two."),
        TextDocument("given:ok", "Printers are on floor two."),
    ]
    result = await knowledge.ingest(
        "default", "DOCS", [*(tmp_path / name for name in files), *given]
    )
    outcome = {d.source.rsplit("/", 1)[-1]: (d.status, d.error or "") for d in result.documents}
    assert {name: status for name, (status, _) in outcome.items()} == {
        "good.md": "added",
        "junk.txt": "failed",
        "nul.txt": "failed",
        "empty.txt": "failed",
        "latin.txt": "added",
        "wide.txt": "added",
        "given:nul": "failed",
        "given:surrogate": "failed",
        "given:ok": "added",
    }
    assert "control characters: a binary file, not text" in outcome["junk.txt"][1]
    assert "holds NUL bytes: a binary file, not text" in outcome["nul.txt"][1]
    assert outcome["empty.txt"][1].endswith("empty.txt: the document has no text")
    assert "NUL character" in outcome["given:nul"][1]
    assert "lone surrogate" in outcome["given:surrogate"][1]
    stored = sorted(
        d.source.rsplit("/", 1)[-1] for d in await knowledge.documents("default", "DOCS")
    )
    assert stored == ["given:ok", "good.md", "latin.txt", "wide.txt"]


async def test_an_empty_pdf_keeps_the_scanned_pdf_hint(
    knowledge: Knowledge, tmp_path: Path
) -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.add_page()
    scan = tmp_path / "scan.pdf"
    pdf.output(str(scan))
    result = await knowledge.ingest("default", "DOCS", [scan])
    assert result.documents[0].status == "failed"
    assert (result.documents[0].error or "").endswith(
        "the document has no text (a scanned PDF has no text layer to read)"
    )


def test_the_cli_reports_a_binary_file_and_writes_the_others(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"]
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(
        "vector_stores:\n  - code: EMBED\ndocument_collections:\n  - code: HANDBOOK\n"
        "    store: EMBED\n    collection_name: handbook\n"
    )
    assert runner.invoke(app, [*base, "catalog", "import", str(catalog)]).exit_code == 0
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "travel.md").write_text("# Travel\n\nBook trains for trips under four hours.\n")
    (docs / "junk.txt").write_bytes(_junk())
    (docs / "nul.txt").write_bytes(b"a\x00b")
    result = runner.invoke(app, [*base, "knowledge", "ingest", "HANDBOOK", str(docs), "-q"])
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "1 added" in result.output and "2 failed" in result.output
    assert "junk.txt" in result.output and "nul.txt" in result.output
    listed = runner.invoke(app, [*base, "knowledge", "documents", "HANDBOOK"])
    assert listed.exit_code == 0, listed.output
    assert "junk" not in listed.output and "nul.txt" not in listed.output


async def test_a_document_is_read_and_cut_while_the_event_loop_serves_others(
    knowledge: Knowledge, minilm: LocalMiniLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading and cutting a large document takes seconds of CPU; other requests go on meanwhile.

    Each step waits until a task on the event loop has run: where the step
    ran on the loop itself, that task could not run, and the wait ran out.
    """
    import threading

    import anyio

    from pilothouse.knowledge import _ingestrun

    loop_ran = threading.Event()
    waits: dict[str, list[bool]] = {"read": [], "cut": []}

    def loop_went_on(step: str) -> None:
        loop_ran.clear()
        waits[step].append(loop_ran.wait(timeout=10))

    real_parse = _ingestrun.parse_document
    real_tokenizer = minilm.tokenizer

    def parse(data: bytes, fmt: str, name: str) -> Any:
        loop_went_on("read")
        return real_parse(data, fmt, name)

    class Tokenizer:
        special_tokens = real_tokenizer.special_tokens

        def count(self, text: str) -> int:
            return real_tokenizer.count(text)

        def spans(self, text: str) -> Any:
            loop_went_on("cut")
            return real_tokenizer.spans(text)

    monkeypatch.setattr(_ingestrun, "parse_document", parse)
    monkeypatch.setattr(minilm, "tokenizer", Tokenizer())

    async def other_requests() -> None:
        while True:
            loop_ran.set()
            await anyio.sleep(0.005)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(other_requests)
        result = await knowledge.ingest(
            "default", "DOCS", [TextDocument("handbook", "Visitors park on level minus two.")]
        )
        tasks.cancel_scope.cancel()
        assert [d.status for d in result.documents] == ["added"]
    assert waits["read"] == [True]
    assert waits["cut"] and all(waits["cut"])
