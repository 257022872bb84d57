"""Catalog ``Tool`` rows for the tool tests, built without a database."""

from __future__ import annotations

from typing import Any

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.catalog._models import Tool


def tool_row(
    kind: ToolKind,
    *,
    name: str = "a_tool",
    implementation: str | None = None,
    settings: dict[str, Any] | None = None,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    description: str | None = None,
    policy: ExecutionPolicy = ExecutionPolicy.ALLOW,
    row_id: int | None = None,
    version: int = 1,
) -> Tool:
    return Tool(
        id=row_id,
        version=version,
        tenant="default",
        code=name.upper()[:12],
        name=name,
        kind=kind,
        implementation=implementation,
        description=description,
        input_schema=input_schema or {},
        output_schema=output_schema,
        policy=policy,
        settings=settings or {},
    )
