"""Reading txt, md, html, a real PDF and a real DOCX; chunking within the model's limit."""

from __future__ import annotations

import io

import pytest

from pilothouse.knowledge import DocumentError, LocalMiniLM
from pilothouse.knowledge._chunking import ChunkPlan, chunk_document
from pilothouse.knowledge._documents import format_of, parse_document
from pilothouse.knowledge._tokenizers import EstimateTokenizer

MARKDOWN = """# Handbook

Intro paragraph.

## Travel

Book trains, not planes.

```python
# not a heading
print("x")
```

Setext heading
--------------

Under setext.
"""


def test_markdown_headings_and_fences() -> None:
    doc = parse_document(MARKDOWN.encode(), "markdown", "handbook.md")
    assert doc.title == "Handbook"
    assert [s.heading for s in doc.sections] == [
        ("Handbook",),
        ("Handbook", "Travel"),
        ("Handbook", "Setext heading"),
    ]
    assert doc.sections[1].blocks[1].text.startswith("```python\n# not a heading")


def test_html_drops_scripts_and_navigation_and_keeps_headings() -> None:
    html = (
        "<html><head><title>Prices</title><script>var x = 'secret';</script></head><body>"
        "<nav>Home | About</nav><h1>Plans</h1><p>Basic costs 10 EUR.</p>"
        "<h2>Premium</h2><p>Premium costs 40&nbsp;EUR.</p>"
        "<table><tr><td>a</td><td>b</td></tr></table></body></html>"
    )
    doc = parse_document(html.encode(), "html", "p.html")
    assert doc.title == "Prices"
    text = doc.text
    assert "secret" not in text and "Home" not in text
    assert doc.sections[-1].heading == ("Plans", "Premium")
    assert "Premium costs 40 EUR." in text
    assert "\n\na | b" in text


def test_a_real_pdf_keeps_its_pages() -> None:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_title("Warranty terms")
    pdf.set_font("helvetica", size=12)
    for page in ("The warranty lasts two years.", "Returns are accepted within 30 days."):
        pdf.add_page()
        pdf.multi_cell(0, 10, page)
    doc = parse_document(bytes(pdf.output()), "pdf", "terms.pdf")
    assert doc.title == "Warranty terms"
    assert doc.metadata["pages"] == 2
    blocks = doc.sections[0].blocks
    assert [(b.text, b.page) for b in blocks] == [
        ("The warranty lasts two years.", 1),
        ("Returns are accepted within 30 days.", 2),
    ]


def test_a_real_docx_keeps_headings_and_tables_in_order() -> None:
    import docx

    document = docx.Document()
    document.add_heading("Onboarding", level=1)
    document.add_paragraph("Welcome aboard.")
    document.add_heading("Equipment", level=2)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text = "Laptop"
    table.rows[0].cells[1].text = "ThinkPad"
    document.add_paragraph("Ask IT for a badge.")
    buffer = io.BytesIO()
    document.save(buffer)
    doc = parse_document(buffer.getvalue(), "docx", "onboarding.docx")
    assert doc.title == "Onboarding"
    assert [s.heading for s in doc.sections] == [("Onboarding",), ("Onboarding", "Equipment")]
    assert [b.text for b in doc.sections[1].blocks] == ["Laptop | ThinkPad", "Ask IT for a badge."]


def test_broken_documents_raise_a_document_error() -> None:
    with pytest.raises(DocumentError, match=r"broken.pdf: not a readable pdf document"):
        parse_document(b"%PDF-1.4 this is not a pdf", "pdf", "broken.pdf")
    with pytest.raises(DocumentError, match="not a readable docx"):
        parse_document(b"PK\x03\x04 nope", "docx", "broken.docx")


def _docx_with_image(image_bytes: int) -> bytes:
    """A real DOCX linking an image part of ``image_bytes`` zeros (a small zip: they pack well)."""
    import zipfile

    import docx

    document = docx.Document()
    document.add_paragraph("Badges are issued at the front desk.")
    plain = io.BytesIO()
    document.save(plain)
    relationship = (
        b'<Relationship Id="rId99" Type="http://schemas.openxmlformats.org/officeDocument/'
        b'2006/relationships/image" Target="media/image1.png"/></Relationships>'
    )
    packed = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(plain.getvalue())) as source,
        zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "word/_rels/document.xml.rels":
                data = data.replace(b"</Relationships>", relationship)
            if info.filename == "[Content_Types].xml":
                data = data.replace(
                    b"</Types>", b'<Default Extension="png" ContentType="image/png"/></Types>'
                )
            target.writestr(info.filename, data)
        with target.open("word/media/image1.png", "w", force_zip64=True) as image:
            block = bytes(1024 * 1024)
            left = image_bytes
            while left > 0:
                image.write(block[: min(left, len(block))])
                left -= len(block)
    return packed.getvalue()


def test_a_docx_unpacking_past_the_bound_is_refused_before_it_is_opened() -> None:
    from pilothouse.knowledge._documents import MAX_UNPACKED_BYTES

    bomb = _docx_with_image(MAX_UNPACKED_BYTES + 1)
    assert len(bomb) < 1024 * 1024  # a small upload ...
    with pytest.raises(DocumentError, match=r"bomb.docx: its parts unpack to [\d,]+ bytes"):
        parse_document(bomb, "docx", "bomb.docx")  # ... that would fill the server's memory
    # A DOCX with an image well inside the bound reads as before.
    doc = parse_document(_docx_with_image(1024 * 1024), "docx", "badges.docx")
    assert doc.text.strip() == "Badges are issued at the front desk."


def test_formats_by_name_and_content_type() -> None:
    assert format_of("a/b/Report.PDF") == "pdf"
    assert format_of("http://x/page", "text/html; charset=utf-8") == "html"
    assert format_of("http://x/notes.md", "text/plain") == "markdown"
    assert format_of("image.png") is None


def test_chunks_fit_minilm_and_follow_sentences(minilm: LocalMiniLM) -> None:
    sentences = [f"Sentence number {i} talks about topic {i % 7} in detail." for i in range(200)]
    text = "# Big\n\n" + " ".join(sentences[:100]) + "\n\n" + " ".join(sentences[100:])
    doc = parse_document(text.encode(), "markdown", "big.md")
    plan = ChunkPlan(size=512, overlap=50, budget=minilm.text_budget)
    chunks = chunk_document(doc, minilm.tokenizer, plan)
    assert len(chunks) > 5
    for chunk in chunks:
        # What is embedded (heading + text) fits the 256 word pieces MiniLM reads.
        assert minilm.tokenizer.count(chunk.embed_text) <= minilm.text_budget == 254
        assert chunk.embed_text.startswith("Big\n\n")
        assert chunk.text.endswith(".")
    # Overlap: each chunk starts with text the previous one ended with.
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert after.text[:20] in before.text
    assert [c.metadata["position"] for c in chunks] == list(range(len(chunks)))


def test_chunking_without_overlap_loses_nothing() -> None:
    words = [f"w{i}" for i in range(3000)]
    doc = parse_document(" ".join(words).encode(), "text", "w.txt")
    chunks = chunk_document(doc, EstimateTokenizer(), ChunkPlan(size=100, overlap=0, budget=100))
    assert " ".join(c.text for c in chunks).split() == words
    assert all(c.token_count <= 100 for c in chunks)
