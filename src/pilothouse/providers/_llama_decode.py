"""Token-level decoding for the local chat handler, on a llama-cpp-python model.

:class:`Decoder` samples tokens after a context with ``Llama.generate`` and
hands back their text pieces, special tokens included (Qwen's
``<tool_call>`` is one token, and ``create_completion`` would drop it from
the text), while it keeps the request's token budget and counts usage.
Stages of one answer (a peek, a constrained tool call, the text) share one
decoder, so ``max_tokens`` bounds the whole answer, and each stage reuses the
KV cache of the context the previous one left (``generate`` matches the
longest common prefix).

This module runs inside the local model's server process only.
"""

from __future__ import annotations

__all__ = ["Decoder", "Sampling", "StopFilter"]

import codecs
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import llama_cpp
from llama_cpp import Llama, LlamaGrammar


@dataclass(frozen=True)
class Sampling:
    """The sampler settings of one request, as ``Llama.generate`` takes them."""

    temp: float = 0.2
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    tfs_z: float = 1.0
    mirostat_mode: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1

    def kwargs(self, *, greedy: bool = False) -> dict[str, Any]:
        """Return the keyword arguments for ``Llama.generate``; ``greedy`` sets temperature 0."""
        values = asdict(self)
        if greedy:
            values["temp"] = 0.0
        return values


@dataclass
class Decoder:
    """Samples tokens for one chat completion within its token budget.

    Attributes:
        llama: the loaded model.
        sampling: the request's sampler settings.
        prompt: the prompt's tokens.
        budget: tokens the whole answer may still generate.
        finish: why the last stage ended: ``stop`` (end of generation, or a
            grammar completed) or ``length`` (the budget ran out).
        completion_tokens: tokens generated so far, over every stage.
    """

    llama: Llama
    sampling: Sampling
    prompt: list[int]
    budget: int
    finish: str = "stop"
    completion_tokens: int = 0
    _vocab: Any = field(default=None, repr=False)
    _initial_budget: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        self._vocab = llama_cpp.llama_model_get_vocab(self.llama.model)
        self._initial_budget = self.budget

    def rewind(self) -> None:
        """Forget what was generated (a discarded attempt): the full budget is back."""
        self.budget = self._initial_budget
        self.completion_tokens = 0
        self.finish = "stop"

    def tokenize(self, text: str) -> list[int]:
        """Tokenize text that continues the prompt (special tokens parsed, no BOS)."""
        return self.llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def run(
        self,
        context: Sequence[int],
        *,
        grammar: LlamaGrammar | None = None,
        greedy: bool = False,
        limit: int | None = None,
    ) -> Iterator[str]:
        """Yield the text of each token sampled after ``context``.

        Stops at an end-of-generation token (``finish`` = ``stop``), when the
        budget is spent (``length``), or after ``limit`` tokens of this stage
        (``stop``); the caller may also stop iterating at any point.

        Args:
            context: the tokens to continue (the prompt and anything after it).
            grammar: a grammar the tokens must follow.
            greedy: sample at temperature 0 (for decisions).
            limit: the most tokens this stage may take.
        """
        self.finish = "stop"
        if self.budget <= 0:
            self.finish = "length"
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        taken = 0
        generator = self.llama.generate(
            list(context), grammar=grammar, **self.sampling.kwargs(greedy=greedy)
        )
        try:
            for token in generator:
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    return
                self.budget -= 1
                self.completion_tokens += 1
                taken += 1
                piece = self.llama.detokenize([token], special=True)
                yield decoder.decode(piece)
                if self.budget <= 0:
                    self.finish = "length"
                    return
                if limit is not None and taken >= limit:
                    return
        finally:
            generator.close()

    def text(self, context: Sequence[int], **options: Any) -> str:
        """Run a stage to its end and return its text."""
        return "".join(self.run(context, **options))


def seed_sampler(llama: Llama, seed: int | None) -> None:
    """Seed the model's sampler as ``create_completion`` does (random when ``None``)."""
    llama.set_seed(seed if seed is not None else random.randint(0, 2**32 - 1))


class StopFilter:
    """Cuts streamed text at the first stop sequence, holding back what may start one.

    Args:
        stops: the stop sequences (empty: everything passes).
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        """Take a piece of text; return what can be emitted now."""
        if self.stopped:
            return ""
        text = self._held + piece
        cut = min((i for i in (text.find(s) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self._held = ""
            self.stopped = True
            return text[:cut]
        keep = max((_overlap(text, s) for s in self._stops), default=0)
        self._held = text[len(text) - keep :] if keep else ""
        return text[: len(text) - keep]

    def flush(self) -> str:
        """Return what is still held back (the answer ended without a stop sequence)."""
        held, self._held = self._held, ""
        return "" if self.stopped else held


def _overlap(text: str, stop: str) -> int:
    # The longest suffix of text that is a proper prefix of stop.
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if stop.startswith(text[-size:]):
            return size
    return 0
