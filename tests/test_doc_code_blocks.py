"""Every Python code block of the README and ``docs/`` is checked by running it.

Each block is compiled (top-level ``await`` allowed, as in an asyncio REPL
or a notebook) and run in a fresh namespace, in an empty working directory.
A block that cannot run here says so on the line above its fence, with the
reason, in a comment the rendered page does not show::

    <!-- doc-test: skip (calls a model provider: needs its API key) -->

A marker without a reason fails the suite, as does a block that does not
compile even when skipped.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!--\s*doc-test:\s*skip\b(?P<reason>.*?)-->")


@dataclass(frozen=True)
class Block:
    """One fenced Python block and what the line above it says."""

    file: Path
    line: int
    source: str
    skip: str | None

    @property
    def name(self) -> str:
        return f"{self.file.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    found: list[Block] = []
    for path in DOCS:
        lines = path.read_text(encoding="utf-8").splitlines()
        index = 0
        while index < len(lines):
            if lines[index].strip() == "```python":
                end = index + 1
                while lines[end].strip() != "```":
                    end += 1
                above = lines[index - 1] if index else ""
                marker = MARKER.search(above)
                skip = marker.group("reason").strip(" ():—-") if marker else None
                source = "\n".join(lines[index + 1 : end])
                found.append(Block(path, index + 1, source, skip))
                index = end
            index += 1
    return found


BLOCKS = _blocks()


def test_there_are_blocks_to_check() -> None:
    assert len(BLOCKS) > 40


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_every_block_compiles_and_every_skip_says_why(block: Block) -> None:
    compile(block.source, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if block.skip is not None:
        assert len(block.skip) > 10, f"{block.name}: say why the block is not run"


# A block that starts the packaged local model runs llama.cpp: a real component.
RUNNABLE = [
    pytest.param(b, marks=[pytest.mark.real] if "LocalModelServers" in b.source else [], id=b.name)
    for b in BLOCKS
    if b.skip is None
]


@pytest.mark.parametrize("block", RUNNABLE)
def test_every_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = compile(block.source, block.name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    namespace: dict[str, object] = {"__name__": "__doc_block__"}
    result = eval(code, namespace)  # the project's own documentation
    if inspect.iscoroutine(result):
        asyncio.run(result)


def test_a_returned_call_reads_as_the_tool_loop_page_shows_it() -> None:
    # docs/tool-loop.md once showed `call["id"]` on TurnResult.tool_calls items
    # (typed objects): both spellings work.
    from pilothouse.runtime._events import ReturnedCall

    call = ReturnedCall(id="call-1", name="extract_invoice", arguments={"total": 3})
    assert call["id"] == call.id == "call-1"
    assert call["arguments"] == {"total": 3}
    with pytest.raises(KeyError, match="a returned call has id, name, arguments"):
        call["status"]
