"""Per-entity rules beyond the pydantic spec: literal secrets and cross-field structure.

Secrets are checked on the raw mapping (so a literal key is refused even
when the rest of the entity is broken); structure on a valid spec (MCP
transports, JSON schemas, event tools, chunk overlap, and the knowledge
and memory rules of ``_knowledge_rules``). Both run for files and for API
calls, so they sit apart from the reading of files and the checks across
entities in ``_validate``.
"""

from __future__ import annotations

__all__ = ["entity_rules", "secret_rules", "structure_rules"]

import re
from collections.abc import Iterable, Mapping
from typing import Any, cast

from jsonschema import SchemaError
from jsonschema.validators import validator_for
from pydantic import ValidationError

from pilothouse.catalog._enums import McpTransport, ToolKind
from pilothouse.catalog._events import EventToolSettings
from pilothouse.catalog._kinds import CatalogKind, Location
from pilothouse.catalog._knowledge_rules import (
    embedding_model_rules,
    memory_strategy_rules,
    settings_message,
    vector_store_rules,
)
from pilothouse.catalog._spec import (
    ActionSpec,
    CatalogSpec,
    DocumentCollectionSpec,
    McpClientSpec,
    MemoryStrategySpec,
    ModelSpec,
    ToolSpec,
    VectorStoreSpec,
    wire_value,
)

_SECRET_REFERENCE = r"@secrets\(\s*[A-Za-z_][A-Za-z0-9_.\-]*\s*\)"
_CONTAINS_SECRET = re.compile(_SECRET_REFERENCE)
_ONLY_SECRET = re.compile(rf"^\s*{_SECRET_REFERENCE}\s*$")
# Names that say "this value is a credential": such headers, environment
# variables and settings must hold references, whatever the entity.
_SECRET_NAME = re.compile(
    r"authorization|token|secret|password|passwd|api[-_]?key|cookie|credential", re.IGNORECASE
)
_NOT_LITERAL = "must be a @secrets(NAME) reference, not a literal value"


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
    # Vantiq's apiKeySecret holds a secret's name, not a secret: it is refused
    # with what to write instead (_spec.py), not as a literal key.
    found += _secret_entries(
        ("settings",), {k: v for k, v in settings.items() if k != "apiKeySecret"}
    )
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
        found += embedding_model_rules(spec)
    elif isinstance(spec, VectorStoreSpec):
        found += vector_store_rules(spec)
    elif isinstance(spec, MemoryStrategySpec):
        found += memory_strategy_rules(spec)
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
            found.append(
                (
                    ("settings", *error["loc"]),
                    settings_message(error, "an event tool", EventToolSettings),
                )
            )
    return found


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
