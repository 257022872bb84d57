"""BM25 ranking of the embedded store's full text on PostgreSQL, without an extension.

SQLite's FTS5 ranks by BM25; PostgreSQL's own ``ts_rank_cd`` has no inverse
document frequency, so a chunk repeating a common word outranked the one
holding the rare word the question is about. This module ranks the chunks
matching any of the query's words (found through the GIN index on
``to_tsvector('english', heading || ' ' || text)``) by Okapi BM25 in one
statement, with the parameters FTS5 uses (``k1`` 1.2, ``b`` 0.75):

``Σ idf(t) · tf · (k1 + 1) / (tf + k1 · (1 − b + b · dl / avgdl))``, with
``idf(t) = ln(1 + (N − n(t) + 0.5) / (n(t) + 0.5))`` (Lucene's form, never
negative). ``tf`` is how often the lexeme occurs in the chunk (its positions
in the ``tsvector``), ``dl`` the chunk's lexeme occurrences, ``n(t)`` the
chunks holding the lexeme. ``N`` and ``avgdl`` are the collection's: read
once per collection revision (one pass over its chunks) and kept by the
caller, since every query of an unchanged collection shares them.
"""

from __future__ import annotations

__all__ = ["TextStats", "bm25_search", "text_stats"]

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Float, Table, func, literal_column, select, true

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.sql.elements import ColumnElement

K1 = 1.2
"""BM25's term-frequency saturation (FTS5's and Lucene's default)."""
B = 0.75
"""BM25's length normalisation (FTS5's and Lucene's default)."""


@dataclass(frozen=True)
class TextStats:
    """A collection's full-text statistics at one revision.

    Attributes:
        revision: the collection's revision they were read at.
        chunks: how many chunks it holds (``N``).
        average_length: the chunks' mean lexeme occurrences (``avgdl``).
    """

    revision: int
    chunks: int
    average_length: float


_CONFIG = "'english'::regconfig"


def _document(chunks: Table) -> ColumnElement[Any]:
    # Written exactly as the GIN index's expression (a literal configuration
    # and separator, not bound parameters), so the planner can use the index.
    return func.to_tsvector(
        literal_column(_CONFIG), (chunks.c.heading + literal_column("' '")) + chunks.c.text
    )


def _length(vector: ColumnElement[Any]) -> ColumnElement[Any]:
    """A ``tsvector``'s lexeme occurrences (the sum of its positions)."""
    lexemes = func.unnest(vector).table_valued("lexeme", "positions", name="u")
    return (
        select(func.coalesce(func.sum(func.array_length(lexemes.c.positions, 1)), 0))
        .select_from(lexemes)
        .scalar_subquery()
    )


def text_stats(
    connection: Connection, chunks: Table, collection_id: int, revision: int
) -> TextStats:
    """Read a collection's ``N`` and ``avgdl`` (one pass over its chunks)."""
    lengths = (
        select(_length(_document(chunks)).label("dl"))
        .where(chunks.c.collection_id == collection_id)
        .subquery("lengths")
    )
    row = connection.execute(
        select(func.count().label("n"), func.coalesce(func.avg(lengths.c.dl), 0).label("avgdl"))
    ).one()
    return TextStats(revision, int(row.n), float(row.avgdl))


def bm25_search(
    connection: Connection,
    chunks: Table,
    collection_id: int,
    words: list[str],
    k: int,
    clauses: list[ColumnElement[bool]],
    stats: TextStats,
) -> list[int]:
    """The ids of the ``k`` chunks ranking best by BM25 for ``words``, best first.

    Args:
        connection: a PostgreSQL connection.
        chunks: the ``knowledge_chunk`` table.
        collection_id: the collection searched.
        words: the query's words (letters, digits and underscores only).
        k: how many ids at most.
        clauses: the metadata pre-filter's conditions on ``chunks``.
        stats: the collection's statistics at its current revision.
    """
    if stats.chunks == 0 or not words:
        return []
    document = _document(chunks)
    tsquery = func.to_tsquery(literal_column(_CONFIG), " | ".join(words))
    matched = (
        select(chunks.c.id.label("id"), document.label("v"))
        .where(chunks.c.collection_id == collection_id, document.op("@@")(tsquery), *clauses)
        .cte("matched")
    )
    asked = func.unnest(func.to_tsvector(literal_column(_CONFIG), " ".join(words))).table_valued(
        "lexeme", name="q"
    )
    lexemes = func.unnest(matched.c.v).table_valued("lexeme", "positions", name="t")
    terms = (
        select(
            matched.c.id,
            lexemes.c.lexeme,
            func.array_length(lexemes.c.positions, 1).label("tf"),
            _length(matched.c.v).label("dl"),
        )
        .select_from(matched.join(lexemes, true()))
        .where(lexemes.c.lexeme.in_(select(asked.c.lexeme)))
        .cte("terms")
    )
    frequencies = select(terms.c.lexeme, func.count().label("n")).group_by(terms.c.lexeme).cte("df")
    total = float(stats.chunks)
    average = max(stats.average_length, 1.0)
    idf = func.ln(1 + (total - frequencies.c.n + 0.5) / (frequencies.c.n + 0.5))
    tf = terms.c.tf.cast(Float)
    weight = idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * terms.c.dl / average))
    score = func.sum(weight).label("score")
    query = (
        select(terms.c.id, score)
        .select_from(terms.join(frequencies, frequencies.c.lexeme == terms.c.lexeme))
        .group_by(terms.c.id)
        .order_by(score.desc(), terms.c.id)
        .limit(k)
    )
    return [int(row.id) for row in connection.execute(query)]
