"""Built-in local model files: assembly from parts, integrity checks, resolution.

These use small parts made here; the real six Qwen parts are assembled (and
one tampered with) in tests/real/test_local_default_model.py.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from pilothouse.providers import ModelIntegrityError, ProviderConfigError, _local_models
from pilothouse.providers._local import LocalModelServers
from pilothouse.providers._local_models import (
    PackagedModel,
    assemble_parts,
    default_model_path,
    names_served_model,
    resolve_model_path,
    served_model_id,
    verify_model_file,
)

CONTENT = [b"first part|" * 1000, b"second part|" * 700, b"end"]
SIZE = sum(len(c) for c in CONTENT)
SHA = hashlib.sha256(b"".join(CONTENT)).hexdigest()


@pytest.fixture
def parts(tmp_path: Path) -> list[Path]:
    paths: list[Path] = []
    for i, content in enumerate(CONTENT):
        path = tmp_path / "parts" / f"p{i}.bin"
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content)
        paths.append(path)
    return paths


def test_parts_are_concatenated_in_order(parts: list[Path], tmp_path: Path) -> None:
    target = tmp_path / "cache" / "model.gguf"
    assert assemble_parts(parts, target, size=SIZE, sha256=SHA) == target
    assert target.read_bytes() == b"".join(CONTENT)
    assert sorted(p.name for p in target.parent.iterdir()) == ["model.gguf"]


def test_a_changed_part_is_refused_and_nothing_is_left(parts: list[Path], tmp_path: Path) -> None:
    parts[1].write_bytes(CONTENT[1].replace(b"second", b"SECOND"))
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelIntegrityError, match=f"expected {SHA}; refusing to load it"):
        assemble_parts(parts, target, size=SIZE, sha256=SHA)
    assert list(target.parent.iterdir()) == []


def test_a_missing_byte_is_refused_by_size(parts: list[Path], tmp_path: Path) -> None:
    parts[2].write_bytes(b"en")
    target = tmp_path / "cache" / "model.gguf"
    with pytest.raises(ModelIntegrityError, match=f"{SIZE - 1:,} bytes, expected {SIZE:,}"):
        assemble_parts(parts, target, size=SIZE, sha256=SHA)
    assert not target.exists()


def test_an_unwritable_cache_names_the_folder(parts: list[Path], tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    with pytest.raises(ProviderConfigError, match="cannot write the model cache"):
        assemble_parts(parts, blocker / "model.gguf", size=SIZE, sha256=SHA)


def test_a_file_changed_after_it_was_verified_is_checked_again(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"".join(CONTENT))
    verify_model_file(path, size=SIZE, sha256=SHA)
    tampered = bytearray(path.read_bytes())
    tampered[5] ^= 0xFF
    path.write_bytes(bytes(tampered))
    os.utime(path, ns=(1, 1))  # a new modification time, as any rewrite gives
    with pytest.raises(ModelIntegrityError, match="has SHA-256"):
        verify_model_file(path, size=SIZE, sha256=SHA)


def chunked(parts: list[Path], monkeypatch: pytest.MonkeyPatch) -> PackagedModel:
    model = PackagedModel(
        name="tiny",
        title="A tiny test model",
        install="pip install tiny-parts",
        requirements=("tiny-part0==1", "tiny-part1==1", "tiny-part2==1"),
        file_name="tiny.gguf",
        packages=("tiny_part0", "tiny_part1", "tiny_part2"),
        part_files=("p0.bin", "p1.bin", "p2.bin"),
        size=SIZE,
        sha256=SHA,
    )
    monkeypatch.setitem(_local_models.BUILTIN_MODELS, "tiny", model)
    monkeypatch.setattr(_local_models, "_package_dir", lambda package: parts[0].parent)
    return model


def test_a_damaged_cached_copy_is_rebuilt_from_the_parts(
    parts: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunked(parts, monkeypatch)
    cache = tmp_path / "cache"
    first = Path(default_model_path("tiny", cache_dir=cache))
    first.write_bytes(b"truncated")
    again = Path(resolve_model_path("tiny", cache_dir=cache))
    assert again == first
    assert again.read_bytes() == b"".join(CONTENT)


def test_missing_parts_name_the_packages_to_install(
    parts: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunked(parts, monkeypatch)
    parts[1].unlink()
    with pytest.raises(ProviderConfigError, match=r"missing: tiny-part1\); run `pip install"):
        default_model_path("tiny", cache_dir=tmp_path / "cache")


def test_any_gguf_path_is_accepted_and_a_missing_one_refused(tmp_path: Path) -> None:
    model = tmp_path / "mine.gguf"
    model.write_bytes(b"GGUF")
    assert resolve_model_path(str(model)) == str(model.resolve())
    with pytest.raises(ProviderConfigError, match="does not exist"):
        resolve_model_path(str(tmp_path / "nope.gguf"))


def test_the_cache_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert _local_models.default_cache_dir() == tmp_path / "pilothouse" / "models"


@pytest.mark.parametrize(
    ("model_path", "served"),
    [
        (None, "qwen2.5-coder-0.5b-instruct-q4_k_m"),
        ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m"),
        ("smollm2", "SmolLM2-135M-Instruct.Q4_1"),
        ("/models/mistral-7b-instruct.Q4_K_M.gguf", "mistral-7b-instruct.Q4_K_M"),
    ],
)
def test_the_served_model_id_is_the_files_name(model_path: str | None, served: str) -> None:
    assert served_model_id(model_path) == served


@pytest.mark.parametrize(
    ("model_name", "served", "names"),
    [
        ("Qwen2.5-Coder-0.5B-Instruct", "qwen2.5-coder-0.5b-instruct-q4_k_m", True),
        ("qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct-q4_k_m", True),
        ("SmolLM2-135M-Instruct", "SmolLM2-135M-Instruct.Q4_1", True),
        ("SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1", True),
        ("SmolLM2-135M-Instruct", "qwen2.5-coder-0.5b-instruct-q4_k_m", False),
        ("qwen", "qwen2.5-coder-0.5b-instruct-q4_k_m", False),  # not up to a separator
        ("", "qwen2.5-coder-0.5b-instruct-q4_k_m", False),
    ],
)
def test_a_model_name_names_the_served_file_or_its_start(
    model_name: str, served: str, names: bool
) -> None:
    assert names_served_model(model_name, served) is names


def test_a_model_name_the_default_model_is_not_is_refused_naming_the_installed_ones() -> None:
    servers = LocalModelServers()  # nothing starts: the check reads names only
    assert servers.check_model_name("Qwen2.5-Coder-0.5B-Instruct") == (
        "qwen2.5-coder-0.5b-instruct-q4_k_m"
    )
    assert servers.check_model_name("SmolLM2-135M-Instruct", model_path="smollm2") == (
        "SmolLM2-135M-Instruct.Q4_1"
    )
    with pytest.raises(ProviderConfigError) as refused:
        servers.check_model_name("SmolLM2-135M-Instruct")
    message = str(refused.value)
    assert "'SmolLM2-135M-Instruct'" in message
    assert "the default 'qwen2.5-coder-0.5b'" in message
    assert f"Installed local models: {', '.join(_local_models.installed_models())}" in message
    assert "settings.model_path" in message
    assert servers.running() == []
