"""Cutting documents into chunks that fit their embedding model.

A chunk never crosses a heading: each section is cut on its own, and the
section's heading path is embedded with each of its chunks (so a chunk that
says "it costs 40 EUR" is found by "price of the premium plan" when it sits
under "Premium plan > Price"), unless the path would take more than a
quarter of the model's budget.

Within a section, a chunk ends at the latest good boundary before the
token limit: a paragraph break first, a sentence end next, a space after
that, and only when none is found within the second half of the window, at
a token inside a word. The next chunk starts ``overlap`` tokens earlier, at
a sentence or word start near that point. Limits count tokens as the model
does (see :mod:`._tokenizers`).
"""

from __future__ import annotations

__all__ = ["Chunk", "ChunkPlan", "chunk_document"]

from dataclasses import dataclass, field
from typing import Any

from pilothouse.knowledge._documents import ParsedDocument, Section
from pilothouse.knowledge._tokenizers import Tokenizer

HEADING_SEPARATOR = " > "


@dataclass(frozen=True)
class ChunkPlan:
    """How to cut: the limits that apply to one collection and model.

    Attributes:
        size: the most text tokens per chunk (prefix and heading not counted).
        overlap: tokens the next chunk repeats from the end of this one.
        budget: the most tokens the model reads per text, less its special
            tokens and the document prefix.
    """

    size: int
    overlap: int
    budget: int


@dataclass(frozen=True)
class Chunk:
    """One piece of a document, ready to embed.

    Attributes:
        text: the chunk's own text (what a citation quotes).
        heading: the section's heading path, joined by `` > ``.
        embed_text: what is embedded: the heading path and the text.
        token_count: the text's tokens.
        metadata: ``pages`` (PDF) and ``position`` within the document.
    """

    text: str
    heading: str
    embed_text: str
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])


def chunk_document(document: ParsedDocument, tokenizer: Tokenizer, plan: ChunkPlan) -> list[Chunk]:
    """Cut a document into chunks.

    Args:
        document: the parsed document.
        tokenizer: the embedding model's tokenizer.
        plan: the limits.

    Returns:
        The chunks in document order, ``metadata["position"]`` counting from 0.
    """
    chunks: list[Chunk] = []
    for section in document.sections:
        chunks.extend(_chunk_section(section, tokenizer, plan))
    return [
        Chunk(c.text, c.heading, c.embed_text, c.token_count, {**c.metadata, "position": i})
        for i, c in enumerate(chunks)
    ]


# Boundary strength of a cut before token i.
_PARAGRAPH, _SENTENCE, _WORD, _INSIDE = 3, 2, 1, 0
_SENTENCE_END = frozenset(".!?:;")


def _chunk_section(section: Section, tokenizer: Tokenizer, plan: ChunkPlan) -> list[Chunk]:
    heading = HEADING_SEPARATOR.join(section.heading)
    header = f"{heading}\n\n" if heading else ""
    header_tokens = tokenizer.count(header) if header else 0
    if header_tokens > plan.budget // 4:
        header, header_tokens = "", 0
    limit = max(1, min(plan.size, plan.budget - header_tokens))
    overlap = min(plan.overlap, limit // 2)

    text_parts: list[str] = []
    starts: list[tuple[int, int | None]] = []  # (char offset of a block, its page)
    offset = 0
    for block in section.blocks:
        if text_parts:
            text_parts.append("\n\n")
            offset += 2
        starts.append((offset, block.page))
        text_parts.append(block.text)
        offset += len(block.text)
    text = "".join(text_parts)
    spans = tokenizer.spans(text)
    if not spans:
        return []
    strength = _strengths(text, spans, {s for s, _ in starts})

    chunks: list[Chunk] = []
    start = 0
    count = len(spans)
    while start < count:
        end = _cut(strength, start, min(start + limit, count), count)
        piece = text[spans[start][0] : spans[end - 1][1]]
        pages = _pages(starts, spans[start][0], spans[end - 1][1])
        metadata: dict[str, Any] = {"pages": pages} if pages else {}
        chunks.append(Chunk(piece, heading, header + piece, end - start, metadata))
        if end >= count:
            break
        start = _next_start(strength, start, end, overlap)
    return chunks


def _strengths(text: str, spans: list[tuple[int, int]], block_starts: set[int]) -> list[int]:
    strength = [_PARAGRAPH]
    for i in range(1, len(spans)):
        begin = spans[i][0]
        previous_end = spans[i - 1][1]
        if begin in block_starts:
            strength.append(_PARAGRAPH)
        elif begin > previous_end and text[begin - 1].isspace():
            before = text[previous_end - 1] if previous_end > 0 else ""
            strength.append(_SENTENCE if before in _SENTENCE_END else _WORD)
        else:
            strength.append(_INSIDE)
    return strength


def _cut(strength: list[int], start: int, hard: int, count: int) -> int:
    """The end (exclusive) of the chunk that starts at ``start``."""
    if hard >= count:
        return count
    floor = start + max(1, (hard - start) // 2)
    for wanted in (_PARAGRAPH, _SENTENCE, _WORD):
        for end in range(hard, floor, -1):
            if strength[end] >= wanted:
                return end
    return hard


def _next_start(strength: list[int], start: int, end: int, overlap: int) -> int:
    """Where the chunk after ``[start, end)`` starts: ``overlap`` tokens back, at a boundary."""
    if overlap <= 0:
        return end
    target = max(start + 1, end - overlap)
    for wanted in (_SENTENCE, _WORD):
        # The nearest boundary at or after the target, so the overlap never
        # grows past what was asked.
        for candidate in range(target, end):
            if strength[candidate] >= wanted:
                return candidate
    return target


def _pages(starts: list[tuple[int, int | None]], begin: int, end: int) -> list[int]:
    pages: list[int] = []
    for index, (offset, page) in enumerate(starts):
        next_offset = starts[index + 1][0] if index + 1 < len(starts) else None
        overlaps = offset < end and (next_offset is None or next_offset > begin)
        if overlaps and page is not None and page not in pages:
            pages.append(page)
    return pages
