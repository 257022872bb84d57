"""The ``virtual_servers`` kind: members checked when written, on both sides of a gateway.

A single operation must be one its gateway's ``include`` lists; the gateway
can neither drop it nor be deleted while a bundle serves it. Checked through
the repository (one entity at a time, on SQLite and PostgreSQL) and through
whole-catalog validation (an import).
"""

from __future__ import annotations

from typing import Any

import pytest

from pilothouse.catalog import CatalogRepository
from pilothouse.catalog._validate import validate_documents
from pilothouse.errors import CatalogValidationError, ConflictError
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

GATEWAY: dict[str, Any] = {
    "code": "CRM",
    "name": "crm",
    "kind": "rest",
    "implementation": "openapi:https://crm.example/openapi.json",
    "settings": {"gateway": {"include": ["createOrder", "GET /customers/{id}"]}},
}
DESK: dict[str, Any] = {
    "code": "DESK",
    "operations": ["CRM:createOrder", "CRM:GET /customers/{id}"],
}


async def _seed(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.create("tools", GATEWAY)
        await repo.create("virtual_servers", DESK)


async def test_an_operation_its_gateway_does_not_include_is_refused(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.create("tools", GATEWAY)
        with pytest.raises(CatalogValidationError) as refused:
            await repo.create("virtual_servers", {"code": "DESK", "operations": ["CRM:getPet"]})
    [issue] = refused.value.issues
    assert issue.field == "operations[0]"
    assert "gateway 'CRM' does not include 'getPet'" in issue.rule
    assert "tools: [CRM]" in issue.rule


async def test_a_gateway_cannot_drop_an_operation_a_bundle_serves(database: Database) -> None:
    await _seed(database)
    narrower = {**GATEWAY, "settings": {"gateway": {"include": ["createOrder"]}}}
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        with pytest.raises(CatalogValidationError) as refused:
            await repo.update("tools", "CRM", narrower, expected_version=1)
    [issue] = refused.value.issues
    assert issue.field == "settings.gateway.include"
    assert "virtual server 'DESK'" in issue.rule and "GET /customers/{id}" in issue.rule


async def test_a_gateway_a_bundle_names_cannot_be_deleted(database: Database) -> None:
    await _seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        with pytest.raises(ConflictError, match=r"virtual server 'DESK' \(operations\)"):
            await repo.delete("tools", "CRM")
        await repo.delete("virtual_servers", "DESK")
        await repo.delete("tools", "CRM")


async def test_a_plain_tool_is_not_a_gateway_to_take_operations_from(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.create(
            "tools",
            {"code": "ADD", "name": "add", "kind": "python", "implementation": "math:fsum"},
        )
        with pytest.raises(CatalogValidationError, match="not a gateway"):
            await repo.create("virtual_servers", {"code": "DESK", "operations": ["ADD:x"]})


def test_an_import_checks_operations_against_the_gateway_written_beside_them() -> None:
    narrower = {**GATEWAY, "settings": {"gateway": {"include": ["createOrder"]}}}
    _, issues = validate_documents([{"tools": [narrower], "virtual_servers": [DESK]}])
    assert [i.field for i in issues] == ["operations[1]"], issues
    _, fine = validate_documents([{"tools": [GATEWAY], "virtual_servers": [DESK]}])
    assert fine == []
