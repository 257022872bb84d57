"""Peak memory of an ingestion on the packaged embedder, with its CPU and wall time.

    .venv/bin/python bench/ingest_rss.py            # writes bench/results/ingest-rss.{json,md}

Ingests this repository's documentation (``docs/*.md`` and the README, about
thirty files) into an embedded collection of a fresh SQLite database, in a
child process of its own, once with the embedder's settings as shipped and
once with the settings it had before (32 texts per ONNX run, onnxruntime's
memory pattern on), so the two peaks come from the same corpus in the same
run. The peak is the child's ``ru_maxrss``: everything the process held at
its highest, the interpreter, the model and the store included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

CATALOG = """\
vector_stores:
  - code: EMBED
    kind: embedded
document_collections:
  - code: DOCS
    store: EMBED
    collection_name: docs
"""


def child(folder: Path, batch: int, pattern: bool) -> None:
    """Ingest the corpus and print one JSON line: chunks, peak RSS, CPU and wall seconds."""
    import asyncio

    from pilothouse.api import Pilothouse
    from pilothouse.knowledge import _embedders
    from pilothouse.settings import Settings

    original = _embedders.LocalMiniLM.__init__

    def configured(self: _embedders.LocalMiniLM, **kwargs: Any) -> None:
        kwargs["batch_size"] = batch
        original(self, **kwargs)

    _embedders.LocalMiniLM.__init__ = configured
    if pattern:
        import onnxruntime

        # The memory pattern as onnxruntime enables it by default.
        real = onnxruntime.SessionOptions

        class WithPattern(real):
            def __setattr__(self, name: str, value: object) -> None:
                if name == "enable_mem_pattern":
                    value = True
                super().__setattr__(name, value)

        onnxruntime.SessionOptions = WithPattern

    files = sorted([*ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"])

    async def ingest() -> int:
        url = f"sqlite+aiosqlite:///{folder / 'ingest.db'}"
        async with Pilothouse(Settings(database_url=url)) as ph:
            await ph.catalog.import_text(CATALOG)
            result = await ph.knowledge.ingest("DOCS", files)
            return sum(d.chunks for d in result.documents)

    started, cpu = time.perf_counter(), time.process_time()
    chunks = asyncio.run(ingest())
    print(
        json.dumps(
            {
                "files": len(files),
                "chunks": chunks,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "cpu_s": time.process_time() - cpu,
                "wall_s": time.perf_counter() - started,
            }
        )
    )


def measure(batch: int, pattern: bool) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        command = [sys.executable, __file__, "--child", folder, str(batch), str(int(pattern))]
        out = subprocess.run(command, check=True, capture_output=True, text=True, env=os.environ)
        return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--child", nargs=3, metavar=("FOLDER", "BATCH", "PATTERN"))
    args = parser.parse_args()
    if args.child:
        folder, batch, pattern = args.child
        child(Path(folder), int(batch), pattern == "1")
        return
    rows = {
        "as shipped (4 texts per run, no memory pattern)": measure(4, False),
        "before (32 texts per run, memory pattern on)": measure(32, True),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ingest-rss.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "| embedder settings | files | chunks | peak RSS MB | CPU s | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        lines.append(
            f"| {name} | {row['files']:.0f} | {row['chunks']:.0f} | {row['peak_rss_mb']:.0f} "
            f"| {row['cpu_s']:.1f} | {row['wall_s']:.1f} |"
        )
    (RESULTS / "ingest-rss.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
