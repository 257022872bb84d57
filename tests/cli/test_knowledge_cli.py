"""`pilothouse knowledge`: ingest with a failing file, search without a model, list, delete."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pilothouse.cli import app

CATALOG = """
vector_stores:
  - code: EMBED
document_collections:
  - code: HANDBOOK
    store: EMBED
    collection_name: handbook
    similarity_threshold: 0.2
"""


def _setup(tmp_path: Path) -> tuple[CliRunner, list[str], Path]:
    runner = CliRunner()
    base = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"]
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG)
    result = runner.invoke(app, [*base, "catalog", "import", str(catalog)])
    assert result.exit_code == 0, result.output
    docs = tmp_path / "docs"
    (docs / "sub").mkdir(parents=True)
    (docs / "travel.md").write_text("# Travel\n\nBook trains for trips under four hours.\n")
    (docs / "sub" / "badges.txt").write_text("Report lost badges to the front desk at once.\n")
    (docs / "sub" / "table.csv").write_text("a,b\n1,2\n")
    (docs / "broken.pdf").write_bytes(b"this is not a PDF")
    return runner, base, docs


def test_ingest_reports_a_failing_file_and_says_so_in_the_exit_code(tmp_path: Path) -> None:
    runner, base, docs = _setup(tmp_path)
    result = runner.invoke(
        app, [*base, "knowledge", "ingest", "HANDBOOK", str(docs), "-m", "site=hq", "-q"]
    )
    assert result.exit_code == 1, result.output
    assert "failed" in result.output and "broken.pdf" in result.output
    assert "2 added, 1 skipped, 1 failed" in result.output
    assert "chunk size 254" in result.output
    # Again: the two good files are unchanged, the broken one fails again.
    again = runner.invoke(
        app, [*base, "knowledge", "ingest", "HANDBOOK", str(docs), "-q", "-m", "site=hq"]
    )
    assert again.exit_code == 1 and "2 unchanged" in again.output

    good = runner.invoke(
        app, [*base, "knowledge", "ingest", "HANDBOOK", str(docs / "travel.md"), "--reingest"]
    )
    assert good.exit_code == 0, good.output
    assert "1 added" in good.output


def test_search_documents_and_delete(tmp_path: Path) -> None:
    runner, base, docs = _setup(tmp_path)
    runner.invoke(app, [*base, "knowledge", "ingest", "HANDBOOK", str(docs), "-q"])
    found = runner.invoke(app, [*base, "knowledge", "search", "HANDBOOK", "I lost my badge"])
    assert found.exit_code == 0, found.output
    assert "[1]" in found.output and "badges.txt" in found.output
    as_json = runner.invoke(
        app, [*base, "knowledge", "search", "HANDBOOK", "trains", "--json", "-k", "1"]
    )
    body = json.loads(as_json.output)
    assert body["status"] == "ok" and len(body["hits"]) == 1
    assert body["hits"][0]["source"].endswith("travel.md")
    nothing = runner.invoke(
        app,
        [*base, "knowledge", "search", "HANDBOOK", "quantum chromodynamics", "--threshold", "0.9"],
    )
    assert "no hits (nothing passed threshold, threshold 0.90; best similarity" in nothing.output

    listed = runner.invoke(app, [*base, "knowledge", "documents", "HANDBOOK"])
    assert listed.exit_code == 0 and "Travel" in listed.output and "2 documents" in listed.output
    source = str((docs / "travel.md").resolve())
    deleted = runner.invoke(app, [*base, "knowledge", "delete", "HANDBOOK", source])
    assert deleted.exit_code == 0 and "deleted" in deleted.output
    missing = runner.invoke(app, [*base, "knowledge", "delete", "HANDBOOK", source])
    assert missing.exit_code == 2 and "has no document" in missing.output


def test_usage_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    runner, base, docs = _setup(tmp_path)
    unknown = runner.invoke(app, [*base, "knowledge", "search", "NOPE", "x"])
    assert unknown.exit_code == 2
    assert "error: 'NOPE' is not an active document collection" in unknown.output
    bad_mode = runner.invoke(
        app, [*base, "knowledge", "search", "HANDBOOK", "x", "--mode", "fuzzy"]
    )
    assert bad_mode.exit_code == 2 and "--mode must be hybrid, vector or text" in bad_mode.output
    bad_meta = runner.invoke(app, [*base, "knowledge", "ingest", "HANDBOOK", str(docs), "-m", "x"])
    assert bad_meta.exit_code == 2 and "write key=value" in bad_meta.output


DOCTOR_CATALOG = """
vector_stores:
  - code: EMBED
  - code: NOVEC
    kind: pgvector
    connection: postgresql://postgres@127.0.0.1:5432/test
document_collections:
  - code: HANDBOOK
    store: EMBED
    collection_name: handbook
  - code: MANUALS
    store: NOVEC
    collection_name: manuals_doctor
"""


def test_doctor_checks_store_model_and_contents(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"]
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(DOCTOR_CATALOG)
    assert runner.invoke(app, [*base, "catalog", "import", str(catalog)]).exit_code == 0

    empty = runner.invoke(app, [*base, "knowledge", "doctor", "HANDBOOK"])
    assert empty.exit_code == 1, empty.output
    assert "ok   model: local:all-MiniLM-L6-v2 answers 384 dimensions" in empty.output
    assert "FAIL contents: no documents" in empty.output

    note = tmp_path / "badges.txt"
    note.write_text("Report lost badges to the front desk at once.\n")
    runner.invoke(app, [*base, "knowledge", "ingest", "HANDBOOK", str(note), "-q"])
    healthy = runner.invoke(app, [*base, "knowledge", "doctor", "HANDBOOK", "--json"])
    assert healthy.exit_code == 0, healthy.output
    checks = {c["name"]: c for c in json.loads(healthy.output)}
    assert all(c["ok"] for c in checks.values())
    assert checks["contents"]["detail"] == "1 documents, 1 chunks"
    assert checks["search"]["detail"].startswith("hybrid search answered")

    unknown = runner.invoke(app, [*base, "knowledge", "doctor", "NOPE"])
    assert unknown.exit_code == 1 and "FAIL collection" in unknown.output


def test_doctor_names_a_postgresql_server_without_pgvector(tmp_path: Path) -> None:
    # The machine's PostgreSQL has no pgvector extension: the store check says so.
    runner = CliRunner()
    base = ["--database-url", f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"]
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(DOCTOR_CATALOG)
    assert runner.invoke(app, [*base, "catalog", "import", str(catalog)]).exit_code == 0
    result = runner.invoke(app, [*base, "knowledge", "doctor", "MANUALS"])
    assert result.exit_code == 1, result.output
    assert "FAIL store: vector store NOVEC: cannot use" in result.output
    assert "vector" in result.output.split("FAIL store:")[1]
