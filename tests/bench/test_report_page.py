"""docs/benchmarks.md is generated: regenerated from bench/results, it is the committed page.

The page is made by ``bench/report.py`` from the stored results and
``bench/commentary.md`` (how to add a section is written at the top of
that file). These tests run the report in this environment, without
matplotlib (``--no-plots``: the committed plots are named as drawn), and
compare the page it writes with the committed one byte for byte.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def _report(docs: Path, results: Path, commentary: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(BENCH / "report.py"),
            "--no-plots",
            "--results",
            str(results),
            "--docs",
            str(docs),
            "--commentary",
            str(commentary),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=BENCH,
    )


def _docs_with_plots(tmp_path: Path) -> Path:
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs" / "benchmarks", docs / "benchmarks")
    return docs


def test_the_committed_page_is_what_the_report_writes_from_the_stored_results(
    tmp_path: Path,
) -> None:
    docs = _docs_with_plots(tmp_path)
    done = _report(docs, BENCH / "results", BENCH / "commentary.md")
    assert done.returncode == 0, done.stderr
    written = (docs / "benchmarks.md").read_bytes()
    committed = (ROOT / "docs" / "benchmarks.md").read_bytes()
    # Not a diff of 2,000 lines in the failure: where they part, and the fix.
    if written != committed:
        lines = zip(written.splitlines(), committed.splitlines(), strict=False)
        first = next(
            (n for n, (a, b) in enumerate(lines, 1) if a != b),
            min(len(written.splitlines()), len(committed.splitlines())) + 1,
        )
        raise AssertionError(
            f"docs/benchmarks.md differs from the generated page from line {first}: edit"
            " bench/commentary.md or bench/results/, then run"
            " `python bench/report.py --no-plots` from bench/"
        )


def test_a_results_section_is_on_the_page_where_the_commentary_places_it(
    tmp_path: Path,
) -> None:
    docs = _docs_with_plots(tmp_path)
    results = tmp_path / "results"
    shutil.copytree(BENCH / "results", results)
    (results / "replicas.md").write_text("## Replicas\n\n| replicas | turns/s |\n|---|---:|\n")
    commentary = tmp_path / "commentary.md"
    commentary.write_text(
        (BENCH / "commentary.md").read_text()
        + "\nReplicas behind one client:\n\n<!-- results: replicas.md -->\n"
    )
    done = _report(docs, results, commentary)
    assert done.returncode == 0, done.stderr
    page = (docs / "benchmarks.md").read_text()
    table = "## Replicas\n\n| replicas | turns/s |\n|---|---:|\n\n"
    assert page.endswith("Replicas behind one client:\n\n" + table)
    assert "results: replicas.md" not in page


def test_a_results_section_the_commentary_does_not_place_stops_the_report(
    tmp_path: Path,
) -> None:
    docs = _docs_with_plots(tmp_path)
    results = tmp_path / "results"
    shutil.copytree(BENCH / "results", results)
    (results / "replicas.md").write_text("## Replicas\n")
    done = _report(docs, results, BENCH / "commentary.md")
    assert done.returncode != 0
    assert "does not place replicas.md" in done.stderr
    assert "<!-- results: replicas.md -->" in done.stderr
    assert not (docs / "benchmarks.md").exists()
