"""A catalog REST tool resolves its header secrets in the scope of its row's tenant."""

from __future__ import annotations

from pathlib import Path

import pytest
import respx
from tool_rows import tool_row

from pilothouse.catalog._enums import ToolKind
from pilothouse.catalog._models import Tool
from pilothouse.providers import DeploymentSecrets, SecretResolver
from pilothouse.runtime._toolset import CatalogToolSource
from pilothouse.tools import RestTool, ToolContext, ToolRegistry

pytestmark = pytest.mark.anyio

URL = "https://crm.example.test/items"


def _row(tenant: str) -> Tool:
    row = tool_row(
        ToolKind.REST,
        name="items",
        settings={"url": URL, "headers": {"Authorization": "Bearer @secrets(CRM_TOKEN)"}},
    )
    row.tenant = tenant
    return row


async def test_a_callers_registry_given_to_the_tool_source_resolves_in_the_rows_tenants_scope(
    tmp_path: Path,
) -> None:
    secrets_file = tmp_path / "secrets.env"
    secrets_file.write_text("[acme]\nCRM_TOKEN=acme-token\n", encoding="utf-8")
    deployment = DeploymentSecrets({"CRM_TOKEN": "env-token"}, secrets_file)
    # An application's registry, with a resolver of its own: the deployment's
    # secrets replace it for catalog rows, as its sandbox and egress settings do.
    registry = ToolRegistry(SecretResolver({"CRM_TOKEN": "registry-token"}))
    source = CatalogToolSource(deployment, registry=registry)
    try:
        acme, beta = await source.tool(_row("acme")), await source.tool(_row("beta"))
        assert isinstance(acme, RestTool) and isinstance(beta, RestTool)
        with respx.mock:
            route = respx.get(URL).respond(200, json={"ok": True})
            answered = await acme.execute({}, ToolContext("acme", "conv-1", "call-1"))
            assert not answered.is_error, answered.content
            assert route.calls.last.request.headers["Authorization"] == "Bearer acme-token"
            refused = await beta.execute({}, ToolContext("beta", "conv-2", "call-2"))
            assert refused.is_error and refused.error_code == "tool.exec.secret_missing"
            assert "'CRM_TOKEN' is not defined in the secrets of tenant 'beta'" in refused.content
            assert route.call_count == 1
    finally:
        await source.aclose()
        await registry.aclose()


async def test_a_registry_of_its_own_resolves_with_the_resolver_it_was_given() -> None:
    async with ToolRegistry(SecretResolver({"CRM_TOKEN": "registry-token"})) as registry:
        tool = await registry.from_catalog(_row("acme"))
        with respx.mock:
            route = respx.get(URL).respond(200, json={"ok": True})
            await tool.execute({}, ToolContext("acme", "conv-1", "call-1"))
    assert route.calls.last.request.headers["Authorization"] == "Bearer registry-token"
