"""What catalog validation reads and fills: entries, parsed and stored catalogs.

The data every validation layer shares (an entity and where it came from,
the catalog read from files, the keys a tenant already stores) and the one
place an issue gets its ``file:line`` and field path. Kept apart from the
rules so the per-entity and cross-entity checks can both use it without
importing each other, and because it is the only part that reads the
database (``load_existing``).
"""

from __future__ import annotations

__all__ = [
    "Entry",
    "ExistingCatalog",
    "ParsedCatalog",
    "Rejected",
    "field_path",
    "is_embedding_only",
    "issue_at",
    "load_existing",
    "qa_model_rule",
]

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from pilothouse.catalog._enums import ModelCapability
from pilothouse.catalog._kinds import KINDS, CatalogKind, Location, catalog_kind
from pilothouse.catalog._models import Model, Skill, SkillDependency, Tool
from pilothouse.catalog._spec import CatalogSpec
from pilothouse.catalog._yaml import line_of
from pilothouse.errors import ValidationIssue


@dataclass(frozen=True)
class Entry:
    """One validated entity and where it came from.

    Attributes:
        kind: its kind.
        spec: the validated spec.
        file: the source file, or None when the spec came from an API call.
        node: the round-trip YAML mapping, for line numbers.
    """

    kind: CatalogKind
    spec: CatalogSpec
    file: str | None = None
    node: Any = None

    def issue(self, location: Location, rule: str) -> ValidationIssue:
        """Return an issue about ``location`` in this entity."""
        return issue_at(self.kind, self.spec.key, self.file, self.node, location, rule)

    @property
    def where(self) -> str:
        """``file:line`` of the entity."""
        return f"{self.file}:{line_of(self.node, ())}"


def issue_at(
    kind: CatalogKind, code: str | None, file: str | None, node: Any, location: Location, rule: str
) -> ValidationIssue:
    line = line_of(node, location) if node is not None else None
    return ValidationIssue(kind.entity_name, code, field_path(location), rule, file, line)


@dataclass(frozen=True)
class Rejected:
    """An entity whose spec did not validate: its references are still checked."""

    kind: CatalogKind
    code: str | None
    file: str
    node: Any
    raw: dict[str, Any]


@dataclass
class ParsedCatalog:
    """The entities read from catalog files, by kind name, in file order.

    Attributes:
        entries: the entities whose spec validated.
        files: the files read.
        declared: every key defined, valid entity or not, with its place.
    """

    entries: dict[str, list[Entry]] = field(default_factory=dict[str, list[Entry]])
    files: list[str] = field(default_factory=list[str])
    declared: dict[str, dict[str, str]] = field(default_factory=dict[str, dict[str, str]])
    rejected: list[Rejected] = field(default_factory=list[Rejected])

    def add(self, entry: Entry) -> None:
        """Append an entity."""
        self.entries.setdefault(entry.kind.name, []).append(entry)

    def counts(self) -> dict[str, int]:
        """Count the entities of each kind present, in dependency order."""
        return {name: len(self.entries[name]) for name in KINDS if self.entries.get(name)}

    def __len__(self) -> int:
        return sum(len(v) for v in self.entries.values())


@dataclass
class ExistingCatalog:
    """What a tenant's stored catalog already holds, for reference checks.

    Attributes:
        keys: business keys by kind name.
        skill_dependencies: each stored skill's ``depends_on`` keys.
        skill_parents: each stored skill's parent key.
        embedding_models: the stored models with capability EM (no chat
            model: a collection's ``qa_model`` may not be one).
        tools: each stored tool's name and settings by code (gateway
            namespaces may not clash).
        virtual_operations: each stored virtual server's single gateway
            operations (a gateway's include may not drop one).
    """

    keys: dict[str, set[str]] = field(default_factory=dict[str, set[str]])
    skill_dependencies: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    skill_parents: dict[str, str] = field(default_factory=dict[str, str])
    embedding_models: set[str] = field(default_factory=set[str])
    tools: dict[str, tuple[str, dict[str, Any]]] = field(
        default_factory=dict[str, tuple[str, dict[str, Any]]]
    )
    virtual_operations: dict[str, list[str]] = field(default_factory=dict[str, list[str]])


async def load_existing(
    session: AsyncSession, tenant: str, kinds: Iterable[str] | None = None
) -> ExistingCatalog:
    """Read the business keys (and skill graph) of a tenant's stored catalog.

    Args:
        session: an open session.
        tenant: whose catalog.
        kinds: only these kind names (default: all).

    Returns:
        The keys by kind, plus skill dependencies and parents when skills are read.
    """
    existing = ExistingCatalog()
    for name in kinds if kinds is not None else KINDS:
        kind = catalog_kind(name)
        rows = await session.scalars(select(kind.key_column()).where(kind.model.tenant == tenant))
        existing.keys[name] = set(rows)
    if kinds is None or "skills" in kinds:
        other = aliased(Skill)
        deps = await session.execute(
            select(Skill.code, other.code)
            .join(SkillDependency, SkillDependency.skill_id == Skill.id)
            .join(other, other.id == SkillDependency.depends_on_id)
            .where(Skill.tenant == tenant)
            .order_by(Skill.code, SkillDependency.position)
        )
        for code, dependency in deps:
            existing.skill_dependencies.setdefault(code, []).append(dependency)
        parents = await session.execute(
            select(Skill.code, other.code)
            .join(other, other.id == Skill.parent_id)
            .where(Skill.tenant == tenant)
        )
        existing.skill_parents.update({code: parent for code, parent in parents})
    if kinds is None or "models" in kinds:
        models = await session.execute(
            select(Model.code, Model.capabilities).where(Model.tenant == tenant)
        )
        existing.embedding_models = {
            code for code, capabilities in models if is_embedding_only(capabilities)
        }
    if kinds is None or "tools" in kinds:
        tools = await session.execute(
            select(Tool.code, Tool.name, Tool.settings).where(Tool.tenant == tenant)
        )
        existing.tools = {code: (name, dict(settings or {})) for code, name, settings in tools}
        from pilothouse.catalog._virtual import VirtualServer

        servers = await session.execute(
            select(VirtualServer.code, VirtualServer.operations).where(
                VirtualServer.tenant == tenant
            )
        )
        existing.virtual_operations = {code: list(ops or []) for code, ops in servers}
    return existing


def is_embedding_only(capabilities: Iterable[Any]) -> bool:
    """Whether a model with these capabilities embeds and cannot chat (it has ``EM``)."""
    return ModelCapability.EMBEDDING.value in {str(c) for c in capabilities}


def qa_model_rule(code: str) -> str:
    """The message refusing an embedding model as a collection's ``qa_model``."""
    return (
        f"model '{code}' is an embedding model (capability EM) and cannot answer: name a chat model"
    )


def field_path(location: Sequence[str | int]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "-"
