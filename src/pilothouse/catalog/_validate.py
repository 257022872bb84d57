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

The layers' parts live in sibling modules: ``_entries`` (what is read and
where issues point), ``_spec_errors`` (pydantic errors as rules),
``_entity_rules`` and ``_knowledge_rules`` (layer 2). This module reads
files and documents, checks across entities, and is the import path the
rest of pilothouse uses for all of it.
"""

from __future__ import annotations

__all__ = [
    "Entry",
    "ExistingCatalog",
    "ParsedCatalog",
    "check_catalog",
    "entity_rules",
    "gateway_namespace_issues",
    "is_embedding_only",
    "load_existing",
    "parse_catalog",
    "parse_spec",
    "qa_model_rule",
    "secret_rules",
    "skill_cycle_issues",
    "structure_rules",
    "validate_documents",
    "validate_paths",
    "virtual_server_issues",
]

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from pydantic import ValidationError

from pilothouse.catalog._entity_rules import entity_rules, secret_rules, structure_rules
from pilothouse.catalog._entries import (
    Entry,
    ExistingCatalog,
    ParsedCatalog,
    Rejected,
    field_path,
    is_embedding_only,
    issue_at,
    load_existing,
    qa_model_rule,
)
from pilothouse.catalog._enums import ModelCapability
from pilothouse.catalog._gateway_rules import gateway_namespace_rules
from pilothouse.catalog._kinds import KINDS, CatalogKind, Location, catalog_kind, suggest
from pilothouse.catalog._provider_settings import raw_settings_issues
from pilothouse.catalog._spec import (
    CatalogSpec,
    DocumentCollectionSpec,
    ModelSpec,
    SkillSpec,
    ToolSpec,
)
from pilothouse.catalog._spec_errors import spec_issues
from pilothouse.catalog._vantiq import VANTIQ_CLASSES
from pilothouse.catalog._yaml import catalog_files, line_of, load_yaml, to_plain
from pilothouse.errors import CatalogValidationError, ValidationIssue


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
                        field_path(loc),
                        rule,
                    )
                    for loc, rule in spec_issues(kind, exc)
                ]
            ) from None
    entry = Entry(kind, spec)
    issues = [entry.issue(loc, rule) for loc, rule in entity_rules(kind, spec)]
    if issues:
        raise CatalogValidationError(issues)
    return spec


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
            issues.append(issue_at(kind, code, file, node, (kind.key_field,), rule))
        else:
            seen[code] = f"{file}:{line}"
    issues += [issue_at(kind, code, file, node, loc, rule) for loc, rule in secret_rules(kind, raw)]
    try:
        spec = kind.spec.model_validate(raw)
    except ValidationError as exc:
        parsed.rejected.append(Rejected(kind, code, file, node, raw))
        found = spec_issues(kind, exc)
        # Another field's error stops pydantic before the settings are
        # checked: check them on the raw data, so one pass reports all.
        if kind.name == "providers":
            found += _other_provider_issues(kind, raw, found)
        issues += [issue_at(kind, code, file, node, loc, rule) for loc, rule in found]
        return issues
    entry = Entry(kind, spec, file, node)
    parsed.add(entry)
    return issues + [entry.issue(loc, rule) for loc, rule in structure_rules(kind, spec)]


def _other_provider_issues(
    kind: CatalogKind, raw: dict[str, Any], found: list[tuple[Location, str]]
) -> list[tuple[Location, str]]:
    """What one error of a provider hid: its settings, or its other fields.

    Pydantic checks the settings after the fields, and a ``class_name``
    configuration before them; either refusal hides the other's errors, so
    the side not yet reported is checked on its own.
    """
    if not any(loc[:1] == ("settings",) for loc, _ in found):
        return list(raw_settings_issues(raw))
    if all(loc[:1] == ("settings",) for loc, _ in found):
        rest: dict[str, Any] = {**raw, "settings": {}}
        settings = raw.get("settings")
        class_name = cast(dict[str, Any], settings).get("class_name") if settings else None
        if isinstance(class_name, str) and class_name in VANTIQ_CLASSES:
            rest.setdefault("kind", VANTIQ_CLASSES[class_name][0].value)  # the class implies it
        try:
            kind.spec.model_validate(rest)
        except ValidationError as exc:
            return [(loc, rule) for loc, rule in spec_issues(kind, exc) if loc[:1] != ("settings",)]
    return []


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
                issues.append(issue_at(kind, code, file, node, location, rule))
    issues += skill_cycle_issues(parsed.entries.get("skills", []), existing)
    issues += _collection_model_issues(parsed, existing)
    issues += gateway_namespace_issues(parsed.entries.get("tools", []), existing)
    issues += virtual_server_issues(
        parsed.entries.get("virtual_servers", []), parsed.entries.get("tools", []), existing
    )
    return issues


def virtual_server_issues(
    servers: list[Entry], tools: list[Entry], existing: ExistingCatalog
) -> list[ValidationIssue]:
    """Single operations their gateway does not include, on either side of the write.

    Args:
        servers: the virtual servers being written.
        tools: the tools being written (a gateway's include may shrink).
        existing: the tenant's stored catalog (tools, and the stored
            virtual servers' operations).

    Returns:
        One issue per operation a virtual server names that its gateway
        does not include: on the virtual server when it is written, else on
        the gateway whose new include drops it.
    """
    from pilothouse.catalog._virtual import VirtualServerSpec, operation_member_rules

    written = {
        e.spec.key: (cast(ToolSpec, e.spec).name, cast(ToolSpec, e.spec).settings) for e in tools
    }
    catalog_tools = {**existing.tools, **written}
    issues: list[ValidationIssue] = []
    for entry in servers:
        spec = cast(VirtualServerSpec, entry.spec)
        for location, rule in operation_member_rules(spec.operations, catalog_tools):
            issues.append(entry.issue(location, rule))
    rewritten = {e.spec.key for e in servers}
    for entry in tools:
        for server, operations in sorted(existing.virtual_operations.items()):
            if server in rewritten:
                continue
            mine = [m for m in operations if m.partition(":")[0] == entry.spec.key]
            for _, rule in operation_member_rules(mine, catalog_tools):
                issues.append(
                    entry.issue(
                        ("settings", "gateway", "include"),
                        f"virtual server '{server}' serves one of its operations: {rule}",
                    )
                )
    return issues


def gateway_namespace_issues(
    tools: list[Entry], existing: ExistingCatalog
) -> list[ValidationIssue]:
    """Refuse gateways sharing a tool namespace, and tools named inside a gateway's.

    Args:
        tools: the tools being written.
        existing: the tenant's stored catalog (its tools' names and settings).

    Returns:
        One issue per clash, on the tool being written.
    """
    by_code = {e.spec.key: e for e in tools}
    written = {
        code: (cast(ToolSpec, e.spec).name, cast(ToolSpec, e.spec).settings)
        for code, e in by_code.items()
    }
    return [
        by_code[code].issue(location, rule)
        for code, location, rule in gateway_namespace_rules(written, existing.tools)
    ]


def _collection_model_issues(
    parsed: ParsedCatalog, existing: ExistingCatalog
) -> list[ValidationIssue]:
    """A collection's embedding model must embed, and its chunks must fit that model.

    Checked against the models in the same input; a model already stored is
    checked when the collection is first used (see ``pilothouse.knowledge``).
    Its ``qa_model`` must be a chat model, in the input or stored; reranking
    needs one, and at least ``top_k`` candidates.
    """
    models = {e.spec.key: cast(ModelSpec, e.spec) for e in parsed.entries.get("models", [])}
    issues: list[ValidationIssue] = []
    for entry in parsed.entries.get("document_collections", []):
        spec = cast(DocumentCollectionSpec, entry.spec)
        if spec.rerank and spec.qa_model is None:
            issues.append(
                entry.issue(
                    ("rerank",),
                    "reranking scores the candidates with the collection's qa_model: name a "
                    "chat model in qa_model, or set rerank: false",
                )
            )
        if spec.rerank and spec.rerank_candidates < spec.top_k:
            issues.append(
                entry.issue(
                    ("rerank_candidates",),
                    f"must be at least top_k ({spec.top_k}): the reranked hits are taken "
                    "from the candidates",
                )
            )
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
