"""Per-entity rules of the knowledge and memory kinds' settings.

Embedding models (the fields only an embedding model may have), vector
stores (their kind's settings and connection URL) and memory strategies
(a ``SCOPED`` strategy's settings) each came with their own checks; they
live here, apart from the secret and schema rules every kind shares, so
those features' rules can grow without growing the core validator.
"""

from __future__ import annotations

__all__ = [
    "embedding_model_rules",
    "memory_strategy_rules",
    "settings_message",
    "vector_store_rules",
]

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from pilothouse.catalog._enums import MemoryKind, ModelCapability, VectorStoreKind
from pilothouse.catalog._kinds import Location
from pilothouse.catalog._memsettings import ScopedMemorySettings
from pilothouse.catalog._spec import MemoryStrategySpec, ModelSpec, VectorStoreSpec
from pilothouse.catalog._stores import store_settings, store_settings_model

_EMBEDDING_FIELDS = ("dimension", "max_input_tokens", "query_prefix", "document_prefix")


def embedding_model_rules(spec: ModelSpec) -> list[tuple[Location, str]]:
    if ModelCapability.EMBEDDING not in spec.capabilities:
        return [
            ((name,), "only for embedding models: add capability EM or remove the field")
            for name in _EMBEDDING_FIELDS
            if getattr(spec, name) is not None
        ]
    found: list[tuple[Location, str]] = []
    if spec.dimension is None:
        found.append((("dimension",), "required for an embedding model (e.g. 384 for MiniLM)"))
    if spec.max_input_tokens is None:
        found.append(
            (("max_input_tokens",), "required for an embedding model (e.g. 256 for MiniLM)")
        )
    return found


def memory_strategy_rules(spec: MemoryStrategySpec) -> list[tuple[Location, str]]:
    if spec.kind is not MemoryKind.SCOPED:
        if spec.settings:
            return [
                (
                    ("settings",),
                    f"only a SCOPED strategy has settings; {spec.kind.value} reads none: remove "
                    "them, or set kind: SCOPED",
                )
            ]
        return []
    try:
        ScopedMemorySettings.model_validate(spec.settings)
    except ValidationError as exc:
        return [
            (
                ("settings", *error["loc"]),
                settings_message(error, "a SCOPED memory strategy", ScopedMemorySettings),
            )
            for error in exc.errors()
        ]
    return []


def vector_store_rules(spec: VectorStoreSpec) -> list[tuple[Location, str]]:
    from urllib.parse import urlsplit

    found: list[tuple[Location, str]] = []
    try:
        store_settings(spec.kind, spec.settings)
    except ValidationError as exc:
        model = store_settings_model(spec.kind)
        owner = f"a {spec.kind.value} vector store"
        for error in exc.errors():
            found.append((("settings", *error["loc"]), settings_message(error, owner, model)))
    if spec.kind is VectorStoreKind.EMBEDDED:
        if spec.connection is not None:
            found.append(
                (
                    ("connection",),
                    "an embedded store lives in pilothouse's database and has no connection: "
                    "remove it, or set kind: pgvector for a PostgreSQL + pgvector store",
                )
            )
        return found
    if not spec.connection:
        found.append((("connection",), "required: postgresql://USER@HOST:PORT/DATABASE"))
        return found
    url = urlsplit(spec.connection)
    if url.scheme not in ("postgresql", "postgres"):
        found.append((("connection",), "must be a postgresql://USER@HOST:PORT/DATABASE URL"))
    elif url.password is not None:
        found.append(
            (("connection",), "must not hold a password: put @secrets(NAME) in settings.password")
        )
    return found


def settings_message(error: ErrorDetails, owner: str, model: type[BaseModel]) -> str:
    """One settings error as a line: an unknown key names the ones ``owner`` knows.

    Args:
        error: one error of validating the settings with ``model``.
        owner: what the settings belong to, e.g. "an event tool".
        model: the pydantic model the settings were validated with.
    """
    if error["type"] == "extra_forbidden":
        known = ", ".join(sorted(model.model_fields))
        return f"unknown setting for {owner}; it knows: {known}"
    return error["msg"]
