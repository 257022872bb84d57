"""Checks of one document collection's store, model and contents (``pilothouse knowledge doctor``).

Each check runs what a search or an ingestion would, and says what it found
or why it failed, so an operator sees a missing pgvector extension, an
unreachable server, vectors of another model or an empty collection before
a turn does. A failed check does not stop the next ones, except where the
next one needs what failed (nothing can be searched without a store).
"""

from __future__ import annotations

__all__ = ["DoctorCheck", "doctor"]

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pilothouse.catalog._enums import VectorStoreKind
from pilothouse.errors import PilothouseError

if TYPE_CHECKING:
    from pilothouse.knowledge._backend import Collection
    from pilothouse.knowledge._service import Knowledge

_PROBE = "pilothouse knowledge doctor"


@dataclass(frozen=True)
class DoctorCheck:
    """One check of a collection.

    Attributes:
        name: what was checked (``collection``, ``model``, ``store``,
            ``contents``, ``search``).
        ok: whether it passed.
        detail: what was found, or why it failed and what to do.
    """

    name: str
    ok: bool
    detail: str

    def as_json(self) -> dict[str, Any]:
        """The check as JSON-ready data."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


def _where(collection: Collection) -> str:
    if collection.store_kind is VectorStoreKind.EMBEDDED:
        return f"embedded store {collection.store_code} (pilothouse's own database)"
    layout = getattr(collection.store_settings, "layout", "pilothouse")
    return (
        f"pgvector store {collection.store_code} at {collection.connection} "
        f"(layout {layout}, table or collection '{collection.name}')"
    )


async def doctor(knowledge: Knowledge, tenant: str, code: str) -> list[DoctorCheck]:
    """Check a collection: catalog entry, embedding model, store, contents, a search.

    Args:
        knowledge: the knowledge service.
        tenant: whose collection.
        code: the collection's code.

    Returns:
        The checks in the order they ran; a check that could not run for an
        earlier failure is left out.
    """
    checks: list[DoctorCheck] = []
    try:
        collection = await knowledge.collection(tenant, code)
    except PilothouseError as exc:
        return [DoctorCheck("collection", False, str(exc))]
    checks.append(DoctorCheck("collection", True, f"{code}: {_where(collection)}"))
    model = collection.model
    try:
        embedder = await knowledge.embedder(collection)
        [vector] = await embedder.embed([_PROBE], "query")
        checks.append(
            DoctorCheck(
                "model",
                True,
                f"{model.name} answers {len(vector)} dimensions "
                f"(at most {model.max_input_tokens} tokens a text)",
            )
        )
    except PilothouseError as exc:
        checks.append(DoctorCheck("model", False, f"{model.name}: {exc}"))
    backend = knowledge.backend(collection)
    try:
        holds = await backend.check_model(collection)
    except PilothouseError as exc:
        checks.append(DoctorCheck("store", False, str(exc)))
        return checks
    checks.append(
        DoctorCheck(
            "store",
            True,
            "reachable; its vectors are this model's"
            if holds
            else "reachable; it holds no vectors yet",
        )
    )
    documents = await backend.documents(collection)
    chunks = sum(info.chunks for info in documents)
    checks.append(
        DoctorCheck(
            "contents",
            bool(documents),
            f"{len(documents)} documents, {chunks} chunks"
            if documents
            else "no documents: ingest some (pilothouse knowledge ingest)",
        )
    )
    if not any(check.name == "model" and not check.ok for check in checks):
        try:
            result = await knowledge.search(tenant, code, _PROBE, top_k=1, threshold=-1.0)
            checks.append(
                DoctorCheck(
                    "search",
                    True,
                    f"{result.mode} search answered ({result.status.replace('_', ' ')})",
                )
            )
        except PilothouseError as exc:
            checks.append(DoctorCheck("search", False, str(exc)))
    return checks
