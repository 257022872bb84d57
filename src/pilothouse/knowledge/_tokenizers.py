"""Token boundaries of text, as each embedding model counts them.

Chunks are cut by tokens so that each fits what its embedding model reads.
A tokenizer here gives the character span of every token, so the chunker
can cut at a token, and prefer a paragraph or sentence boundary near it.

- all-MiniLM-L6-v2: its own WordPiece tokenizer (``minilm-tokenizer.json``,
  shipped with this package: the model's ``tokenizer.json``, Apache-2.0),
  exact; two of its 256 positions go to ``[CLS]`` and ``[SEP]``.
- OpenAI models: tiktoken, exact, when its vocabulary is on this machine.
- Everything else: an estimate that errs long (one token per word piece of
  at most four characters, and one per punctuation mark), so chunks stay
  under a limit the real tokenizer would count lower.
"""

from __future__ import annotations

__all__ = ["EstimateTokenizer", "TiktokenTokenizer", "Tokenizer", "WordPieceTokenizer"]

import re
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import tiktoken
    from tokenizers import Tokenizer as HfTokenizer

Span = tuple[int, int]


class Tokenizer(Protocol):
    """Where the tokens of a text are, for one embedding model."""

    @property
    def special_tokens(self) -> int:
        """Positions every input spends besides its text (``[CLS]``/``[SEP]``)."""
        ...

    def spans(self, text: str) -> list[Span]:
        """Return the ``(start, end)`` character span of each token of ``text``."""
        ...

    def count(self, text: str) -> int:
        """Return how many tokens ``text`` takes, without the special tokens."""
        ...


MINILM_TOKENIZER = Path(__file__).with_name("minilm-tokenizer.json")


class WordPieceTokenizer:
    """A Hugging Face ``tokenizers`` tokenizer read from a ``tokenizer.json`` file.

    Args:
        path: the file (the packaged MiniLM one by default).
    """

    special_tokens = 2

    def __init__(self, path: Path = MINILM_TOKENIZER) -> None:
        from tokenizers import Tokenizer as HfTokenizer

        tokenizer = HfTokenizer.from_file(str(path))
        # The file pads and truncates to 128; chunking needs every token, and
        # the encoder sets its own limits.
        tokenizer.no_truncation()
        tokenizer.no_padding()
        self.tokenizer: HfTokenizer = tokenizer

    def spans(self, text: str) -> list[Span]:
        """Return each word piece's character span."""
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return [(start, end) for start, end in encoding.offsets]

    def count(self, text: str) -> int:
        """Return the number of word pieces."""
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)


class TiktokenTokenizer:
    """A tiktoken encoding (OpenAI models).

    Args:
        encoding: the model's encoding.
    """

    special_tokens = 0

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self.encoding = encoding

    def spans(self, text: str) -> list[Span]:
        """Return each token's character span."""
        tokens = self.encoding.encode_ordinary(text)
        decoded, starts = self.encoding.decode_with_offsets(tokens)
        if decoded != text:
            # A token that splits a multi-byte character decodes differently;
            # fall back to the estimate's spans, which are always safe.
            return EstimateTokenizer().spans(text)
        ends = [*starts[1:], len(text)]
        return list(zip(starts, ends, strict=True))

    def count(self, text: str) -> int:
        """Return the number of tokens."""
        return len(self.encoding.encode_ordinary(text))


_PIECES = re.compile(r"\w{1,4}|[^\w\s]")


class EstimateTokenizer:
    """A tokenizer-free estimate that counts high (see the module docstring)."""

    special_tokens = 0

    def spans(self, text: str) -> list[Span]:
        """Return the spans of pieces of at most four word characters, and punctuation."""
        return [m.span() for m in _PIECES.finditer(text)]

    def count(self, text: str) -> int:
        """Return the number of pieces."""
        return sum(1 for _ in _PIECES.finditer(text))
