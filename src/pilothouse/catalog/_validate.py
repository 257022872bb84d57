"""Validation of catalog input: every rule, every error, each located.

Validation never stops at the first error: a user fixing a catalog file
sees the whole list at once, one line each, as
``file:line: entity 'code': field: rule``. Three layers run in turn:

1. shape: YAML syntax, top-level kinds, lists of mappings;
2. per entity: the pydantic spec (types, lengths, ranges, enums) plus the
   rules that span fields (secrets, MCP transports, JSON schemas);
3. across entities: duplicate keys, references (to the files or to the
   tenant's stored catalog), skill dependency and parent cycles.

Error messages never repeat a value that may be secret.
"""

from __future__ import annotations

__all__ = [
    "Entry",
    "ExistingCatalog",
    "ParsedCatalog",
    "check_catalog",
    "is_embedding_only",
    "load_existing",
    "parse_catalog",
    "parse_spec",
    "qa_model_rule",
    "skill_cycle_issues",
    "validate_paths",
]

import re
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from jsonschema import SchemaError
from jsonschema.validators import validator_for
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from pilothouse.catalog._enums import (
    McpTransport,
    MemoryKind,
    ModelCapability,
    ToolKind,
    VectorStoreKind,
)
from pilothouse.catalog._events import EventToolSettings
from pilothouse.catalog._kinds import KINDS, CatalogKind, Location, catalog_kind, suggest
from pilothouse.catalog._memsettings import ScopedMemorySettings
from pilothouse.catalog._models import Model, Skill, SkillDependency
from pilothouse.catalog._spec import (
    ActionSpec,
    CatalogSpec,
    DocumentCollectionSpec,
    McpClientSpec,
    MemoryStrategySpec,
    ModelSpec,
    SkillSpec,
    ToolSpec,
    VectorStoreSpec,
    wire_value,
)
from pilothouse.catalog._stores import store_settings
from pilothouse.catalog._yaml import catalog_files, line_of, load_yaml, to_plain
from pilothouse.errors import CatalogValidationError, ValidationIssue

_SECRET_REFERENCE = r"@secrets\(\s*[A-Za-z_][A-Za-z0-9_.\-]*\s*\)"
_CONTAINS_SECRET = re.compile(_SECRET_REFERENCE)
_ONLY_SECRET = re.compile(rf"^\s*{_SECRET_REFERENCE}\s*$")
# Names that say "this value is a credential": such headers, environment
# variables and settings must hold references, whatever the entity.
_SECRET_NAME = re.compile(
    r"authorization|token|secret|password|passwd|api[-_]?key|cookie|credential", re.IGNORECASE
)
_NOT_LITERAL = "must be a @secrets(NAME) reference, not a literal value"


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
        return _issue_at(self.kind, self.spec.key, self.file, self.node, location, rule)

    @property
    def where(self) -> str:
        """``file:line`` of the entity."""
        return f"{self.file}:{line_of(self.node, ())}"


def _issue_at(
    kind: CatalogKind, code: str | None, file: str | None, node: Any, location: Location, rule: str
) -> ValidationIssue:
    line = line_of(node, location) if node is not None else None
    return ValidationIssue(kind.entity_name, code, _field_path(location), rule, file, line)


@dataclass(frozen=True)
class _Rejected:
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
    rejected: list[_Rejected] = field(default_factory=list[_Rejected])

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
    """

    keys: dict[str, set[str]] = field(default_factory=dict[str, set[str]])
    skill_dependencies: dict[str, list[str]] = field(default_factory=dict[str, list[str]])
    skill_parents: dict[str, str] = field(default_factory=dict[str, str])
    embedding_models: set[str] = field(default_factory=set[str])


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
    return existing


def is_embedding_only(capabilities: Iterable[Any]) -> bool:
    """Whether a model with these capabilities embeds and cannot chat (it has ``EM``)."""
    return ModelCapability.EMBEDDING.value in {str(c) for c in capabilities}


def qa_model_rule(code: str) -> str:
    """The message refusing an embedding model as a collection's ``qa_model``."""
    return (
        f"model '{code}' is an embedding model (capability EM) and cannot answer: name a chat model"
    )


def _field_path(location: Sequence[str | int]) -> str:
    text = ""
    for part in location:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text or "-"


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _fields_at(model: type[BaseModel], location: Sequence[str | int]) -> list[str]:
    """The field names (aliases where set) valid at ``location`` inside ``model``."""
    current: type[BaseModel] | None = model
    for part in location:
        if current is None:
            return []
        if isinstance(part, int):
            continue
        info = next(
            (f for n, f in current.model_fields.items() if part in (n, f.alias)),
            None,
        )
        current = None if info is None else _nested_model(info.annotation)
    if current is None:
        return []
    return [f.alias or n for n, f in current.model_fields.items()]


def _number(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _rule(model: type[BaseModel], error: ErrorDetails) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    value = error["input"]
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        name = str(error["loc"][-1])
        return "unknown field" + suggest(name, _fields_at(model, error["loc"][:-1]))
    if kind == "string_too_long":
        return f"at most {ctx['max_length']} characters (got {len(cast(str, value))})"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return f"must match {ctx['pattern']}"
    bounds = {
        "greater_than_equal": ("at least", "ge"),
        "less_than_equal": ("at most", "le"),
        "greater_than": ("greater than", "gt"),
        "less_than": ("less than", "lt"),
    }
    if kind in bounds:
        words, key = bounds[kind]
        return f"must be {words} {_number(ctx[key])} (got {_number(value)})"
    if kind == "value_error":
        return error["msg"].removeprefix("Value error, ")
    prefixes = {
        "int_": "must be an integer",
        "float_": "must be a number",
        "decimal_type": "must be a number",
        "decimal_parsing": "must be a number",
        "bool_": "must be true or false",
        "string_": "must be a string",
        "list_": "must be a list",
        "dict_": "must be a mapping",
        "model_": "must be a mapping",
        "date_": "must be a date (YYYY-MM-DD)",
    }
    for prefix, rule in prefixes.items():
        if kind.startswith(prefix):
            return rule
    message = error["msg"]
    return message[:1].lower() + message[1:]


def _spec_issues(kind: CatalogKind, exc: ValidationError) -> list[tuple[Location, str]]:
    return [(tuple(e["loc"]), _rule(kind.spec, e)) for e in exc.errors()]


def parse_spec(kind: str | CatalogKind, data: Mapping[str, Any] | CatalogSpec) -> CatalogSpec:
    """Validate API input into a spec, raising every broken rule at once.

    Args:
        kind: the kind name or kind.
        data: a mapping (e.g. a JSON body) or an already-built spec.

    Returns:
        The spec, after the per-entity rules too.

    Raises:
        CatalogValidationError: one issue per broken rule.
    """
    kind = catalog_kind(kind)
    if isinstance(data, kind.spec):
        spec = data
    else:
        raw = data.model_dump(by_alias=True) if isinstance(data, CatalogSpec) else dict(data)
        try:
            spec = kind.spec.model_validate(raw)
        except ValidationError as exc:
            code = raw.get(kind.key_field)
            raise CatalogValidationError(
                [
                    ValidationIssue(
                        kind.entity_name,
                        code if isinstance(code, str) else None,
                        _field_path(loc),
                        rule,
                    )
                    for loc, rule in _spec_issues(kind, exc)
                ]
            ) from None
    entry = Entry(kind, spec)
    issues = [entry.issue(loc, rule) for loc, rule in entity_rules(kind, spec)]
    if issues:
        raise CatalogValidationError(issues)
    return spec


def _must_reference(value: str, whole: bool = False) -> bool:
    pattern = _ONLY_SECRET if whole else _CONTAINS_SECRET
    return pattern.search(value) is None


def _secret_entries(
    prefix: Location, values: Mapping[str, Any], confidential: Iterable[str] = ()
) -> list[tuple[Location, str]]:
    marked = {name.lower() for name in confidential}
    found: list[tuple[Location, str]] = []
    for name, value in values.items():
        secret_name = name.lower() in marked or _SECRET_NAME.search(name) is not None
        if secret_name and isinstance(value, str) and _must_reference(value):
            found.append(((*prefix, name), _NOT_LITERAL))
    return found


def _schema_issues(location: Location, schema: dict[str, Any]) -> list[tuple[Location, str]]:
    validator = validator_for(schema)
    try:
        validator.check_schema(schema)
    except SchemaError as exc:
        path = tuple(exc.path)
        return [((*location, *path), f"not a valid JSON Schema: {exc.message}")]
    return []


def secret_rules(kind: CatalogKind, raw: Mapping[str, Any]) -> list[tuple[Location, str]]:
    """Find secrets written as literals, in raw (possibly invalid) entity data.

    Checked on the raw mapping so a literal key is refused even when other
    fields of the entity are broken.

    Args:
        kind: the entity's kind.
        raw: the entity as plain data.

    Returns:
        ``(location, rule)`` per literal secret; the rule never holds the value.
    """
    found: list[tuple[Location, str]] = []

    def mapping(name: str) -> dict[str, Any]:
        value = raw.get(name)
        return cast(dict[str, Any], value) if isinstance(value, dict) else {}

    settings = mapping("settings")
    found += _secret_entries(("settings",), settings)
    if kind.name == "providers":
        api_key = raw.get("api_key")
        if isinstance(api_key, str) and _must_reference(api_key, whole=True):
            found.append((("api_key",), _NOT_LITERAL))
    if kind.name in ("providers", "mcp_clients"):
        marked = raw.get("confidential_headers")
        names = [str(n) for n in cast(list[Any], marked)] if isinstance(marked, list) else []
        found += _secret_entries(("headers",), mapping("headers"), names)
    if kind.name == "mcp_clients":
        found += _secret_entries(("env",), mapping("env"))
    headers = settings.get("headers")
    if kind.name == "tools" and isinstance(headers, dict):
        found += _secret_entries(("settings", "headers"), cast(dict[str, Any], headers))
    return found


def structure_rules(kind: CatalogKind, spec: CatalogSpec) -> list[tuple[Location, str]]:
    """Check the rules of a valid spec that span fields: transports, JSON schemas.

    Args:
        kind: its kind.
        spec: a spec that passed its pydantic validation.

    Returns:
        ``(location, rule)`` for each broken rule.
    """
    del kind
    found: list[tuple[Location, str]] = []
    if isinstance(spec, McpClientSpec):
        transport = wire_value(spec.transport)
        if spec.transport is McpTransport.STDIO and not spec.command:
            found.append((("command",), f"required for the {transport} transport"))
        if spec.transport is not McpTransport.STDIO and not spec.url:
            found.append((("url",), f"required for the {transport} transport"))
    elif isinstance(spec, ToolSpec):
        found += _event_tool_rules(spec)
        found += _schema_issues(("input_schema",), spec.input_schema)
        if spec.output_schema is not None:
            found += _schema_issues(("output_schema",), spec.output_schema)
    elif isinstance(spec, ActionSpec):
        for direction, schema in spec.schemas.items():
            name = wire_value(direction)
            found += _schema_issues(("schemas", name, "schema"), schema.json_schema)
    elif isinstance(spec, ModelSpec):
        found += _embedding_model_rules(spec)
    elif isinstance(spec, VectorStoreSpec):
        found += _vector_store_rules(spec)
    elif isinstance(spec, MemoryStrategySpec):
        found += _memory_strategy_rules(spec)
    elif isinstance(spec, DocumentCollectionSpec):
        if spec.chunk_size is not None and spec.chunk_overlap >= spec.chunk_size:
            found.append((("chunk_overlap",), "must be smaller than chunk_size"))
    return found


def _event_tool_rules(spec: ToolSpec) -> list[tuple[Location, str]]:
    if spec.kind is not ToolKind.EVENT:
        return []
    found: list[tuple[Location, str]] = []
    if spec.implementation:
        found.append(
            (
                ("implementation",),
                "an event tool is run by a worker on the bus: remove it and set "
                "settings.skill to the name the worker runs",
            )
        )
    try:
        EventToolSettings.model_validate(spec.settings)
    except ValidationError as exc:
        for error in exc.errors():
            found.append((("settings", *error["loc"]), _plain_message(error)))
    return found


_EMBEDDING_FIELDS = ("dimension", "max_input_tokens", "query_prefix", "document_prefix")


def _embedding_model_rules(spec: ModelSpec) -> list[tuple[Location, str]]:
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


def _memory_strategy_rules(spec: MemoryStrategySpec) -> list[tuple[Location, str]]:
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
        return [(("settings", *error["loc"]), _plain_message(error)) for error in exc.errors()]
    return []


def _vector_store_rules(spec: VectorStoreSpec) -> list[tuple[Location, str]]:
    from urllib.parse import urlsplit

    found: list[tuple[Location, str]] = []
    try:
        store_settings(spec.kind, spec.settings)
    except ValidationError as exc:
        for error in exc.errors():
            found.append((("settings", *error["loc"]), _plain_message(error)))
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


def _plain_message(error: ErrorDetails) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown setting for this kind of vector store"
    return error["msg"]


def entity_rules(kind: CatalogKind, spec: CatalogSpec) -> list[tuple[Location, str]]:
    """Check every rule of one valid spec beyond its types: secrets and structure.

    Args:
        kind: its kind.
        spec: a spec that passed its pydantic validation.

    Returns:
        ``(location, rule)`` for each broken rule, in field order.
    """
    raw = spec.model_dump(by_alias=True)
    return secret_rules(kind, raw) + structure_rules(kind, spec)


def _parse_document(file: str, document: Any, parsed: ParsedCatalog) -> list[ValidationIssue]:
    issues: list[ValidationIssue] = []
    if document is None:
        return issues
    if not isinstance(document, dict):
        line = line_of(document, ())
        return [ValidationIssue("catalog", None, "document", _KINDS_RULE, file=file, line=line)]
    top = cast(dict[str, Any], document)
    for name, items in top.items():
        line = line_of(document, (name,))
        if name not in KINDS:
            rule = "unknown kind" + suggest(str(name), KINDS)
            issues.append(ValidationIssue("catalog", None, str(name), rule, file=file, line=line))
            continue
        if items is None:
            continue
        kind = KINDS[name]
        if not isinstance(items, list):
            rule = "must be a list of mappings"
            issues.append(ValidationIssue("catalog", None, name, rule, file=file, line=line))
            continue
        for index, node in enumerate(cast(list[Any], items)):
            if not isinstance(node, dict):
                rule = "must be a mapping"
                where, line = f"{name}[{index}]", line_of(items, (index,))
                issues.append(ValidationIssue(kind.entity_name, None, where, rule, file, line))
                continue
            issues += _parse_entity(file, kind, node, parsed)
    return issues


_KINDS_RULE = "must be a mapping of kinds (providers, models, actions, ...)"


def _parse_entity(
    file: str, kind: CatalogKind, node: Any, parsed: ParsedCatalog
) -> list[ValidationIssue]:
    line = line_of(node, ())
    raw: dict[str, Any] = to_plain(node)
    key = raw.get(kind.key_field)
    code = key if isinstance(key, str) else None
    issues: list[ValidationIssue] = []
    if code is not None:
        seen = parsed.declared.setdefault(kind.name, {})
        if code in seen:
            rule = f"duplicate {kind.entity_name} '{code}' (first defined at {seen[code]})"
            issues.append(_issue_at(kind, code, file, node, (kind.key_field,), rule))
        else:
            seen[code] = f"{file}:{line}"
    issues += [
        _issue_at(kind, code, file, node, loc, rule) for loc, rule in secret_rules(kind, raw)
    ]
    try:
        spec = kind.spec.model_validate(raw)
    except ValidationError as exc:
        parsed.rejected.append(_Rejected(kind, code, file, node, raw))
        issues += [
            _issue_at(kind, code, file, node, loc, rule) for loc, rule in _spec_issues(kind, exc)
        ]
        return issues
    entry = Entry(kind, spec, file, node)
    parsed.add(entry)
    return issues + [entry.issue(loc, rule) for loc, rule in structure_rules(kind, spec)]


def parse_catalog(paths: Sequence[Path]) -> tuple[ParsedCatalog, list[ValidationIssue]]:
    """Read catalog files and check each entity on its own, and duplicate keys.

    Args:
        paths: files or folders.

    Returns:
        The entities read and the issues found.
    """
    files, issues = catalog_files(paths)
    parsed = ParsedCatalog(files=[str(f) for f in files])
    for path in files:
        document, problem = load_yaml(path)
        if problem is not None:
            issues.append(problem)
            continue
        issues += _parse_document(str(path), document, parsed)
    return parsed, issues


def _cycles(edges: Mapping[str, Sequence[str]]) -> list[list[str]]:
    """Every elementary cycle found by depth-first search, each once, as ``[a, b, a]``."""
    found: dict[tuple[str, ...], list[str]] = {}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in edges.get(node, ()):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt) :]
                start = cycle.index(min(cycle))
                canonical = tuple(cycle[start:] + cycle[:start])
                found.setdefault(canonical, [*canonical, canonical[0]])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return list(found.values())


def skill_cycle_issues(skills: list[Entry], existing: ExistingCatalog) -> list[ValidationIssue]:
    """Find dependency and parent cycles that the given skills would close.

    Args:
        skills: the skills being written (from files or one API call).
        existing: the stored skill graph, overridden by ``skills``.

    Returns:
        One issue per cycle, on the first skill of the cycle being written.
    """
    issues: list[ValidationIssue] = []
    mine = {e.spec.key: e for e in skills}
    specs = {k: cast(SkillSpec, e.spec) for k, e in mine.items()}
    graphs: list[tuple[str, str, dict[str, list[str]]]] = [
        (
            "depends_on",
            "dependency cycle",
            {**existing.skill_dependencies, **{k: s.depends_on for k, s in specs.items()}},
        ),
        (
            "parent",
            "parent cycle",
            {
                **{k: [p] for k, p in existing.skill_parents.items()},
                **{k: [s.parent] if s.parent else [] for k, s in specs.items()},
            },
        ),
    ]
    for field_name, words, edges in graphs:
        for cycle in _cycles(edges):
            members = [mine[k] for k in cycle[:-1] if k in mine]
            if not members:
                continue  # already stored that way; not this input's doing
            entry = min(members, key=lambda e: (e.file or "", line_of(e.node, ()) or 0))
            start = cycle.index(entry.spec.key)
            path = cycle[start:-1] + cycle[: start + 1]
            location: Location = (field_name,)
            if field_name == "depends_on":
                location = (field_name, specs[path[0]].depends_on.index(path[1]))
            issues.append(entry.issue(location, f"{words} {' -> '.join(path)}"))
    return issues


def _raw_references(kind: CatalogKind, raw: Mapping[str, Any]) -> list[tuple[Location, str, str]]:
    found: list[tuple[Location, str, str]] = []
    for ref in kind.refs:
        value = raw.get(ref.field)
        if isinstance(value, str):
            found.append(((ref.field,), ref.target, value))
    for link in kind.links:
        items = raw.get(link.field)
        for index, item in enumerate(cast(list[Any], items) if isinstance(items, list) else []):
            if isinstance(item, dict):
                item = cast(dict[str, Any], item).get("advisor")
            if isinstance(item, str):
                found.append(((link.field, index), link.target, item))
    return found


def check_catalog(
    parsed: ParsedCatalog, existing: ExistingCatalog | None = None
) -> list[ValidationIssue]:
    """Check the rules that span entities: references and skill cycles.

    Args:
        parsed: the entities read.
        existing: the tenant's stored catalog, when references may point into it.

    Returns:
        The issues found.
    """
    existing = existing or ExistingCatalog()
    known: dict[str, set[str]] = {k: set(v) for k, v in parsed.declared.items()}
    for name, entries in parsed.entries.items():
        known.setdefault(name, set()).update(e.spec.key for e in entries)
    issues: list[ValidationIssue] = []
    checks = [
        (entry.kind, entry.spec.key, entry.file, entry.node, entry.kind.references(entry.spec))
        for entries in parsed.entries.values()
        for entry in entries
    ] + [(r.kind, r.code, r.file, r.node, _raw_references(r.kind, r.raw)) for r in parsed.rejected]
    for kind, code, file, node, references in checks:
        for location, target, key in references:
            if key not in known.get(target, set()) and key not in existing.keys.get(target, set()):
                rule = f"unknown {KINDS[target].entity_name} '{key}'"
                issues.append(_issue_at(kind, code, file, node, location, rule))
    issues += skill_cycle_issues(parsed.entries.get("skills", []), existing)
    issues += _collection_model_issues(parsed, existing)
    return issues


def _collection_model_issues(
    parsed: ParsedCatalog, existing: ExistingCatalog
) -> list[ValidationIssue]:
    """A collection's embedding model must embed, and its chunks must fit that model.

    Checked against the models in the same input; a model already stored is
    checked when the collection is first used (see ``pilothouse.knowledge``).
    Its ``qa_model`` must be a chat model, in the input or stored.
    """
    models = {e.spec.key: cast(ModelSpec, e.spec) for e in parsed.entries.get("models", [])}
    issues: list[ValidationIssue] = []
    for entry in parsed.entries.get("document_collections", []):
        spec = cast(DocumentCollectionSpec, entry.spec)
        if spec.qa_model is not None:
            given = models.get(spec.qa_model)
            embeds = (
                ModelCapability.EMBEDDING in given.capabilities
                if given is not None
                else spec.qa_model in existing.embedding_models
            )
            if embeds:
                issues.append(entry.issue(("qa_model",), qa_model_rule(spec.qa_model)))
        model = models.get(spec.embedding_model or "")
        if model is None:
            continue
        if ModelCapability.EMBEDDING not in model.capabilities:
            rule = f"model '{model.code}' is not an embedding model (it lacks capability EM)"
            issues.append(entry.issue(("embedding_model",), rule))
        elif spec.chunk_size is not None and model.max_input_tokens is not None:
            if spec.chunk_size > model.max_input_tokens:
                rule = (
                    f"{spec.chunk_size} tokens is more than model '{model.code}' reads "
                    f"({model.max_input_tokens}): chunks would be cut short"
                )
                issues.append(entry.issue(("chunk_size",), rule))
    return issues


def _sort_key(issue: ValidationIssue) -> tuple[str, int]:
    return (issue.file or "", issue.line or 0)


def validate_paths(
    paths: Sequence[Path], existing: ExistingCatalog | None = None
) -> tuple[ParsedCatalog, list[ValidationIssue]]:
    """Read and fully validate catalog files.

    Args:
        paths: files or folders.
        existing: the tenant's stored catalog, for references into it.

    Returns:
        The entities and every issue, sorted by file and line.
    """
    parsed, issues = parse_catalog(paths)
    issues += check_catalog(parsed, existing)
    return parsed, sorted(issues, key=_sort_key)


def validate_documents(
    documents: Sequence[Mapping[str, Any]],
    existing: ExistingCatalog | None = None,
    *,
    source: str = "<documents>",
) -> tuple[ParsedCatalog, list[ValidationIssue]]:
    """Fully validate catalog documents given in memory, shaped as the YAML files.

    Args:
        documents: mappings of kind names (``providers``, ``actions``, ...)
            to lists of entity mappings.
        existing: the tenant's stored catalog, for references into it.
        source: named as the file of every issue.

    Returns:
        The entities and every issue, in document order.
    """
    parsed = ParsedCatalog(files=[source])
    issues: list[ValidationIssue] = []
    for document in documents:
        issues += _parse_document(source, to_plain(document), parsed)
    issues += check_catalog(parsed, existing)
    return parsed, issues
