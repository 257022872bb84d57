"""The memory guide's catalog examples and the memory benchmark's catalog import as written.

A reader copies ``docs/memory.md``'s YAML into a catalog, and ``make bench``
imports ``bench/memory_catalog.yaml``: each must pass the catalog's own
rules (a memory strategy's, provider's and configuration's code has at
most 4 characters), not only look plausible.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]

# What the guide's examples name without defining: a chat model, its
# configuration, and the collection an organization-memory example reads.
BASE = """
providers:
  - code: LOCL
    kind: local
models:
  - code: QWEN
    provider: LOCL
    model_name: Qwen2.5-Coder-0.5B-Instruct
    capabilities: [FC, SR]
configurations:
  - code: DFLT
    max_tokens: 256
vector_stores:
  - code: EMBED
document_collections:
  - code: HANDBK
    store: EMBED
    collection_name: handbook
"""


def _memory_examples() -> list[str]:
    text = (ROOT / "docs" / "memory.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, flags=re.DOTALL)
    return [block for block in blocks if "memory_strategies:" in block]


@pytest.mark.parametrize("block", _memory_examples())
async def test_every_memory_strategy_example_of_the_guide_imports(
    block: str, tmp_path: Path
) -> None:
    document = {**yaml.safe_load(BASE), **yaml.safe_load(block)}
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    async with Pilothouse(settings) as ph:
        await ph.catalog.import_text(yaml.safe_dump(document))
        codes = [row.key for row in await ph.catalog.list_entries("memory_strategies")]
    assert {entry["code"] for entry in document["memory_strategies"]} <= set(codes)


async def test_the_memory_benchmarks_catalog_imports(tmp_path: Path) -> None:
    text = (ROOT / "bench" / "memory_catalog.yaml").read_text(encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    async with Pilothouse(settings) as ph:
        await ph.catalog.import_text(text)
        action = await ph.catalog.get("actions", "CHAT")
    assert action.document["memory_strategy"]
