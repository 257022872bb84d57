"""Reading documents into headed sections of paragraphs.

Each format keeps what chunking needs: the headings above a paragraph
(Markdown ``#``, HTML ``<h1>``-``<h6>``, DOCX heading styles) and, for PDFs,
the page a paragraph is on (a citation names the page). Readers:

- ``.txt``: paragraphs split on blank lines.
- ``.md``: ATX (``#``) and setext (``===``/``---``) headings; fenced code
  stays whole and its ``#`` lines are not headings.
- ``.html``: the standard library's HTML parser; ``script``, ``style``,
  ``nav``, ``header``, ``footer`` and ``template`` are left out.
- ``.pdf``: pypdf, page by page (text PDFs; a scanned PDF has no text layer
  and is reported as empty).
- ``.docx``: python-docx, paragraphs and tables in document order. A
  DOCX is a zip archive, and python-docx unpacks every part it links into
  memory, so an archive whose parts unpack to more than
  :data:`MAX_UNPACKED_BYTES` is refused before it is opened.

Text formats are read as UTF-8 (or UTF-16 with its byte-order mark, or,
when the bytes are not UTF-8, Latin-1); bytes that are not text (a NUL
byte, or more than one control character in a hundred) are refused as a
binary file rather than indexed as noise, and so is text holding a NUL
character in any format: no database stores it.
"""

from __future__ import annotations

__all__ = [
    "MAX_UNPACKED_BYTES",
    "SUFFIXES",
    "Block",
    "ParsedDocument",
    "Section",
    "format_of",
    "parse_document",
]

import io
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from pilothouse.knowledge._errors import DocumentError


@dataclass(frozen=True)
class Block:
    """One paragraph (or table, or code block) of text.

    Attributes:
        text: the text, inner line breaks kept.
        page: the 1-based page it is on (PDF only).
    """

    text: str
    page: int | None = None


@dataclass
class Section:
    """Paragraphs under one heading path.

    Attributes:
        heading: the headings above, outermost first (empty before the first).
        blocks: the paragraphs.
    """

    heading: tuple[str, ...] = ()
    blocks: list[Block] = field(default_factory=list[Block])


@dataclass
class ParsedDocument:
    """A document's text, ready to chunk.

    Attributes:
        title: the document's title (first heading, HTML title, PDF metadata, or file name).
        sections: the sections in order.
        metadata: facts found while reading (``format``, ``pages``).
    """

    title: str
    sections: list[Section]
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])

    @property
    def text(self) -> str:
        """All the text, headings included, as chunking sees it (used for the content hash)."""
        parts: list[str] = []
        for section in self.sections:
            parts.append(" > ".join(section.heading))
            parts.extend(block.text for block in section.blocks)
        return "\n\n".join(parts)


SUFFIXES: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
"""File name endings this package reads, and the format each means."""

_CONTENT_TYPES = {
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
}


def format_of(name: str, content_type: str | None = None) -> str | None:
    """Tell a document's format from its content type, else its name's ending.

    Args:
        name: a file name, path or URL.
        content_type: an HTTP ``Content-Type``, when known.

    Returns:
        ``text``, ``markdown``, ``html``, ``pdf`` or ``docx``; ``None`` when unknown.
    """
    if content_type:
        found = _CONTENT_TYPES.get(content_type.split(";")[0].strip().lower())
        if found and not (found == "text" and _suffix(name) in SUFFIXES):
            return found
    return SUFFIXES.get(_suffix(name))


def _suffix(name: str) -> str:
    base = name.split("?")[0].split("#")[0].rstrip("/").rsplit("/", 1)[-1]
    return f".{base.rsplit('.', 1)[-1].lower()}" if "." in base else ""


def parse_document(data: bytes, fmt: str, name: str) -> ParsedDocument:
    """Read a document's bytes.

    Args:
        data: the file's content.
        fmt: its format (see :func:`format_of`).
        name: its name, the title when it has none of its own.

    Returns:
        The document.

    Raises:
        DocumentError: the bytes are not a readable document of that format.
    """
    fallback = name.rstrip("/").rsplit("/", 1)[-1] or name
    try:
        if fmt == "pdf":
            document = _pdf(data, fallback)
        elif fmt == "docx":
            document = _docx(data, fallback)
        else:
            text = _decode(data)
            if fmt == "html":
                document = _html(text, fallback)
            elif fmt == "markdown":
                document = _markdown(text, fallback)
            else:
                document = ParsedDocument(fallback, [Section((), _paragraphs(text))])
    except DocumentError as exc:
        if str(exc).startswith(f"{fallback}:") or str(exc).startswith(f"{name}:"):
            raise
        raise DocumentError(f"{name}: {exc}") from None
    except Exception as exc:
        raise DocumentError(f"{name}: not a readable {fmt} document ({exc})") from exc
    document.metadata.setdefault("format", fmt)
    document.sections = [s for s in document.sections if s.blocks]
    if "\x00" in document.text:
        raise DocumentError(
            f"{name}: the text holds NUL characters, which no database stores; "
            "remove them (or convert the file to plain text) and ingest it again"
        )
    return document


# Tab, line feed, form feed and carriage return are text; other control
# characters are rare in text and about a quarter of random bytes.
_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
_MOST_CONTROL = 0.01


def _decode(data: bytes) -> str:
    """Decode a text file, refusing bytes that are not text.

    Raises:
        DocumentError: a NUL byte, invalid UTF-8 that Latin-1 reads as
            control characters, or many control characters.
    """
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = data.decode("utf-16")  # its BOM says so; an error is a DocumentError
    elif b"\x00" in data:
        raise DocumentError("holds NUL bytes: a binary file, not text")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    controls = len(_CONTROL.findall(text))
    if controls > len(text) * _MOST_CONTROL:
        raise DocumentError(
            f"{controls:,} of its {len(text):,} characters are control characters: "
            "a binary file, not text"
        )
    return text


_BLANK = re.compile(r"\n\s*\n")


def _paragraphs(text: str, page: int | None = None) -> list[Block]:
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return [Block(p.strip(), page) for p in _BLANK.split(text) if p.strip()]


_ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_FENCE = re.compile(r"^(```|~~~)")


def _markdown(text: str, fallback: str) -> ParsedDocument:
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    sections = [Section()]
    stack: list[tuple[int, str]] = []
    buffer: list[str] = []
    title = ""

    def flush() -> None:
        sections[-1].blocks.extend(_paragraphs("\n".join(buffer)))
        buffer.clear()

    def open_heading(level: int, heading: str) -> None:
        nonlocal title
        flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        title = title or heading
        sections.append(Section(tuple(h for _, h in stack)))

    fence: str | None = None
    code: list[str] = []
    for line in lines:
        marker = _FENCE.match(line.strip())
        if fence is not None:
            code.append(line)
            if marker and line.strip().startswith(fence):
                sections[-1].blocks.append(Block("\n".join(code)))
                code, fence = [], None
            continue
        if marker:
            flush()
            fence, code = marker.group(1), [line]
            continue
        atx = _ATX.match(line)
        if atx:
            open_heading(len(atx.group(1)), atx.group(2))
        elif _SETEXT.match(line) and buffer and buffer[-1].strip():
            heading = buffer.pop().strip()
            open_heading(1 if line.strip().startswith("=") else 2, heading)
        else:
            buffer.append(line)
    flush()
    if code:
        sections[-1].blocks.append(Block("\n".join(code)))
    return ParsedDocument(title or fallback, sections)


_SKIPPED_TAGS = frozenset({"script", "style", "nav", "header", "footer", "template", "noscript"})
_BLOCK_TAGS = frozenset(
    {
        "p", "div", "li", "ul", "ol", "table", "tr", "section", "article", "main",
        "blockquote", "pre", "br", "dd", "dt", "figcaption", "aside", "form",
    }
)  # fmt: skip
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


class _HtmlText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.sections = [Section()]
        self.stack: list[tuple[int, str]] = []
        self.skip = 0
        self.heading: int | None = None
        self.parts: list[str] = []
        self.title_parts: list[str] | None = None
        self.title = ""
        self.first_heading = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self.skip += 1
        elif tag == "title":
            self.title_parts = []
        elif tag in _HEADINGS:
            self._flush()
            self.heading = _HEADINGS[tag]
        elif tag in _BLOCK_TAGS or tag in ("td", "th"):
            self.parts.append(" | " if tag in ("td", "th") else "\n\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self.skip = max(0, self.skip - 1)
        elif tag == "title" and self.title_parts is not None:
            self.title = " ".join("".join(self.title_parts).split())
            self.title_parts = None
        elif tag in _HEADINGS and self.heading is not None:
            text = " ".join("".join(self.parts).split())
            self.parts.clear()
            level, self.heading = self.heading, None
            if text:
                while self.stack and self.stack[-1][0] >= level:
                    self.stack.pop()
                self.stack.append((level, text))
                self.first_heading = self.first_heading or text
                self.sections.append(Section(tuple(h for _, h in self.stack)))
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n\n")

    def handle_data(self, data: str) -> None:
        if self.title_parts is not None:
            self.title_parts.append(data)
        elif not self.skip:
            self.parts.append(data)

    def _flush(self) -> None:
        text = "".join(self.parts)
        self.parts.clear()
        # A row's first cell opened with a separator: drop it.
        blocks = [" ".join(b.text.split()).removeprefix("| ") for b in _paragraphs(text)]
        self.sections[-1].blocks.extend(Block(b) for b in blocks if b.strip(" |"))

    def close(self) -> None:
        super().close()
        self._flush()


def _html(text: str, fallback: str) -> ParsedDocument:
    parser = _HtmlText()
    parser.feed(text)
    parser.close()
    return ParsedDocument(parser.title or parser.first_heading or fallback, parser.sections)


def _pdf(data: bytes, fallback: str) -> ParsedDocument:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise DocumentError(f"{fallback}: the PDF is encrypted")
    section = Section()
    for number, page in enumerate(reader.pages, start=1):
        section.blocks.extend(_paragraphs(page.extract_text() or "", number))
    title = ""
    info = reader.metadata
    if info is not None and info.title:
        title = str(info.title).strip()
    return ParsedDocument(title or fallback, [section], {"pages": len(reader.pages)})


MAX_UNPACKED_BYTES = 256 * 1024 * 1024
"""The most a DOCX's parts may unpack to, together.

A zip part of a megabyte can unpack to a gigabyte of zeros, and python-docx
holds every part in memory: without a bound, a small upload could take the
server's whole memory.
"""


def _check_unpacked(data: bytes, fallback: str) -> None:
    """Refuse a DOCX whose parts unpack to more than :data:`MAX_UNPACKED_BYTES`.

    The sizes the archive declares are a true bound: the zip reader never
    returns more of a part than its declared size (and fails the part's
    checksum if it holds more).
    """
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        unpacked = sum(info.file_size for info in archive.infolist())
    if unpacked > MAX_UNPACKED_BYTES:
        raise DocumentError(
            f"{fallback}: its parts unpack to {unpacked:,} bytes, more than the "
            f"{MAX_UNPACKED_BYTES:,} read from a DOCX; split the document or save its "
            "images smaller"
        )


def _docx(data: bytes, fallback: str) -> ParsedDocument:
    import docx

    _check_unpacked(data, fallback)
    document: Any = docx.Document(io.BytesIO(data))
    sections = [Section()]
    stack: list[tuple[int, str]] = []
    title = str(document.core_properties.title or "").strip()
    for kind, item in _docx_items(document):
        if kind == "table":
            sections[-1].blocks.append(Block(item))
            continue
        style, text = item.split("\x00", 1)
        level = _heading_level(style)
        if level is None:
            if text.strip():
                sections[-1].blocks.append(Block(text.strip()))
            continue
        if not text.strip():
            continue
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, text.strip()))
        title = title or text.strip()
        sections.append(Section(tuple(h for _, h in stack)))
    return ParsedDocument(title or fallback, sections)


def _docx_items(document: Any) -> Iterator[tuple[str, str]]:
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    # Walk the body in order, so tables stay where they are in the text.
    for child in document.element.body.iterchildren():
        tag = str(child.tag).rsplit("}", 1)[-1]
        if tag == "p":
            paragraph: Any = Paragraph(child, document)
            style = str(paragraph.style.name if paragraph.style is not None else "")
            yield "paragraph", f"{style}\x00{paragraph.text}"
        elif tag == "tbl":
            table: Any = Table(child, document)
            rows = [" | ".join(cell.text.strip() for cell in row.cells) for row in table.rows]
            text = "\n".join(r for r in rows if r.strip(" |"))
            if text:
                yield "table", text


def _heading_level(style: str) -> int | None:
    if style == "Title":
        return 1
    match = re.fullmatch(r"Heading (\d)", style)
    return int(match.group(1)) if match else None
