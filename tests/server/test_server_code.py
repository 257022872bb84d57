"""Server code is the operator's: a tenant's catalog names only the code the operator granted.

The service (tenants write its catalog) resolves ``module:name`` references
only under ``Settings.catalog_code``: refused when a tenant writes one (422
naming the field and the setting, nothing stored) and again when a stored row
is resolved (a row written before, by anyone: a clear error, never run). The
operator's own process (``pilothouse catalog import``, an embedding
application) resolves any name.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
import server_code_helpers
from server_helpers import EXAMPLES, ExamplesAnd, auth
from typer.testing import CliRunner

from database_templates import Seed
from pilothouse.api import Pilothouse
from pilothouse.errors import PilothouseError
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

SETTING = "PILOTHOUSE_CATALOG_CODE"
SECRET = "OTHER_TENANT_API_KEY=sk-other-tenant-secret"

# Rows as a catalog stored before the policy (or by anyone): never run for a tenant.
EXTRA = """
tools:
  - code: GETLINES
    name: getlines
    kind: python
    implementation: "linecache:getlines"
    description: Read the lines of a file.
    input_schema: {type: object, properties: {filename: {type: string}}, required: [filename]}
  - code: RMTREE
    name: rmtree
    kind: python
    implementation: "shutil:rmtree"
    description: Delete a directory.
    input_schema: {type: object, properties: {path: {type: string}}, required: [path]}
  - code: ADD
    name: add
    kind: python
    implementation: "server_code_helpers:add"
  - code: AUTHZ
    name: authz
    kind: python
    implementation: "server_code_helpers:approve"
advisors:
  - code: RECADV
    implementation: "server_code_helpers:make_advisor"
actions:
  - code: READER
    name: Reader
    model: SCRIPTEDM
    configuration: DFLT
    prompt: "Answer the user: {input}"
    tools: [GETLINES, ADD]
  - code: ADVISED
    name: Advised
    model: SCRIPTEDM
    configuration: DFLT
    prompt: "Answer the user: {input}"
    advisors: [RECADV]
"""


@pytest.fixture
def database_seed() -> Seed:
    return ExamplesAnd(EXTRA)


@pytest.fixture(autouse=True)
def calls() -> Iterator[list[str]]:
    server_code_helpers.CALLS.clear()
    yield server_code_helpers.CALLS
    server_code_helpers.CALLS.clear()


@pytest.fixture
def secrets_file(tmp_path: Path) -> Path:
    path = tmp_path / "secrets.env"
    path.write_text(SECRET + "\n", encoding="utf-8")
    return path


def refused(response: httpx.Response, field: str) -> str:
    """The rule of the issue naming ``field``, after checking the refusal's shape."""
    assert response.status_code == 422, response.text
    rules = [e["rule"] for e in response.json()["errors"] if e["field"] == field]
    assert rules, response.text
    assert SETTING in rules[0] and "docs/security.md" in rules[0]
    return rules[0]


GATEWAY = {
    "code": "CRMGW",
    "name": "crm",
    "kind": "rest",
    "implementation": "openapi:https://crm.example.com/openapi.json",
    "settings": {"gateway": {"token_exchange": "posixpath:join"}},
}


@pytest.mark.parametrize(
    ("kind", "document", "field"),
    [
        (
            "tools",
            {
                "code": "READ",
                "name": "read",
                "kind": "python",
                "implementation": "linecache:getlines",
            },
            "implementation",
        ),
        (
            "tools",
            {"code": "WIPE", "name": "wipe", "kind": "python", "implementation": "shutil:rmtree"},
            "implementation",
        ),
        (
            # A service row: every public method of the class would be a tool.
            "tools",
            {
                "code": "SVC",
                "name": "svc",
                "kind": "python",
                "implementation": "subprocess:Popen",
                "settings": {"service": True},
            },
            "implementation",
        ),
        ("tools", GATEWAY, "settings.gateway.token_exchange"),
        ("advisors", {"code": "WIPEADV", "implementation": "shutil:rmtree"}, "implementation"),
        (
            # The tool an authorizer names (Pilothouse(authorizer="DECIDE")) is a python tool too.
            "tools",
            {
                "code": "DECIDE",
                "name": "decide",
                "kind": "python",
                "implementation": "server_code_helpers:approve",
            },
            "implementation",
        ),
    ],
)
async def test_a_tenant_admin_cannot_name_server_code_over_rest(
    client: httpx.AsyncClient,
    admin_key: str,
    kind: str,
    document: dict[str, Any],
    field: str,
) -> None:
    response = await client.post(f"/v1/catalog/{kind}", json=document, headers=auth(admin_key))

    refused(response, field)
    stored = await client.get(f"/v1/catalog/{kind}/{document['code']}", headers=auth(admin_key))
    assert stored.status_code == 404


async def test_an_update_or_an_import_naming_server_code_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    before = await client.get("/v1/catalog/tools/ADD", headers=auth(admin_key))
    changed = {**before.json(), "implementation": "shutil:rmtree"}
    changed.pop("version", None)

    update = await client.put(
        "/v1/catalog/tools/ADD",
        json=changed,
        headers={**auth(admin_key), "If-Match": before.headers["ETag"]},
    )
    imported = await client.put(
        "/v1/catalog",
        content=(
            "tools:\n  - code: READ\n    name: read\n    kind: python\n"
            '    implementation: "linecache:getlines"\n'
        ),
        headers={**auth(admin_key), "Content-Type": "application/yaml"},
    )

    refused(update, "implementation")
    refused(imported, "implementation")
    after = await client.get("/v1/catalog/tools/ADD", headers=auth(admin_key))
    assert after.json() == before.json()
    missing = await client.get("/v1/catalog/tools/READ", headers=auth(admin_key))
    assert missing.status_code == 404


async def test_a_stored_row_naming_server_code_is_not_run_in_a_turn(
    server_state: ServerState, scripted: ScriptedModel, secrets_file: Path
) -> None:
    scripted.script.steps.extend(
        [ToolCall("getlines", {"filename": str(secrets_file)}, call_id="g1"), Reply("Done.")]
    )

    turn = await server_state.pilothouse.command.start_and_send("read it", action="READER")

    transcript = await server_state.pilothouse.query.get_transcript(turn.conversation_uuid)
    [call] = transcript.tool_calls
    assert call.status == "failed"
    assert call.result is not None and SETTING in call.result
    assert "sk-other-tenant-secret" not in str(transcript.messages)
    assert "sk-other-tenant-secret" not in str(scripted.requests)


async def test_a_stored_row_naming_server_code_is_not_run_on_a_direct_call(
    client: httpx.AsyncClient,
    api_key: str,
    server_state: ServerState,
    secrets_file: Path,
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    (victim / "inside").mkdir(parents=True)
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "pilothouse/command/callTool/v1",
        "params": {"name": "getlines", "arguments": {"filename": str(secrets_file)}},
    }

    over_rpc = (await client.post("/jsonrpc", json=body, headers=auth(api_key))).json()
    wiped = await server_state.pilothouse.command.call_tool("rmtree", {"path": str(victim)})

    assert "sk-other-tenant-secret" not in str(over_rpc)
    assert over_rpc["result"]["status"] == "failed", over_rpc
    assert SETTING in over_rpc["result"]["content"]
    assert wiped.status == "failed" and SETTING in wiped.content
    assert (victim / "inside").is_dir()


async def test_a_stored_row_naming_server_code_is_not_run_over_mcp(
    app: Any, api_key: str, secrets_file: Path
) -> None:
    import httpx2
    import mcp_types as mt
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from server_helpers import serve_on_loopback

    async with (
        serve_on_loopback(app) as url,
        httpx2.AsyncClient(headers={"X-API-Key": api_key}, timeout=30) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as client,
    ):
        result = await client.call_tool("tool_getlines", {"filename": str(secrets_file)})

    assert result.is_error
    [content] = result.content
    assert isinstance(content, mt.TextContent)
    assert SETTING in content.text and "sk-other-tenant-secret" not in content.text


async def test_a_stored_advisor_naming_ungranted_code_ends_the_turn_before_it_runs(
    server_state: ServerState, scripted: ScriptedModel, calls: list[str]
) -> None:
    scripted.script.steps.append(Reply("never"))

    with pytest.raises(PilothouseError) as caught:
        await server_state.pilothouse.command.start_and_send("hi", action="ADVISED")

    assert "advisor 'RECADV': implementation:" in str(caught.value)
    assert SETTING in str(caught.value)
    assert calls == []
    assert scripted.requests == []


@pytest.fixture
async def served(server_settings: Settings) -> AsyncIterator[Settings]:
    # The database the service uses, seeded; tests open their own facades on it.
    yield server_settings


async def direct_add(settings: Settings, *, served: bool, authorizer: str | None = None) -> Any:
    async with Pilothouse(settings, catalog_egress=served, authorizer=authorizer) as ph:
        return await ph.command.call_tool("add", {"a": 2, "b": 3})


async def test_an_authorizer_tool_naming_ungranted_code_denies_and_never_runs(
    served: Settings, calls: list[str]
) -> None:
    only_add = served.model_copy(update={"catalog_code": ["server_code_helpers:add"]})

    denied = await direct_add(only_add, served=True, authorizer="AUTHZ")

    assert denied.status == "denied"
    assert calls == []

    granted = served.model_copy(update={"catalog_code": ["server_code_helpers"]})
    allowed = await direct_add(granted, served=True, authorizer="AUTHZ")
    assert (allowed.status, allowed.content) == ("succeeded", "5")
    assert calls == ["approve", "add"]


async def test_the_operator_grants_code_by_module_or_by_name(
    client: httpx.AsyncClient, admin_key: str, served: Settings, calls: list[str]
) -> None:
    # Not granted: the service's own call refuses the stored row.
    assert (await direct_add(served, served=True)).status == "failed"
    for grant in (["server_code_helpers"], ["server_code_helpers:add"]):
        settings = served.model_copy(update={"catalog_code": grant})
        outcome = await direct_add(settings, served=True)
        assert (outcome.status, outcome.content) == ("succeeded", "5")
    assert calls == ["add", "add"]


async def test_the_operators_cli_import_keeps_full_power(
    tmp_path: Path, served: Settings, calls: list[str]
) -> None:
    from pilothouse.cli import app

    catalog = tmp_path / "tools.yaml"
    catalog.write_text(
        "tools:\n  - code: SUM\n    name: sum_two\n    kind: python\n"
        '    implementation: "server_code_helpers:add"\n',
        encoding="utf-8",
    )
    result = await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(
            app,
            ["--database-url", served.database_url, "catalog", "import", str(catalog)],
            catch_exceptions=False,
        )
    )
    assert result.exit_code == 0, result.output

    async with Pilothouse(served) as operator:
        own = await operator.command.call_tool("sum_two", {"a": 1, "b": 2})
    async with Pilothouse(served, catalog_egress=True) as service:
        ungranted = await service.command.call_tool("sum_two", {"a": 1, "b": 2})

    assert (own.status, own.content) == ("succeeded", "3")
    assert ungranted.status == "failed" and SETTING in ungranted.content
    assert calls == ["add"]


async def test_the_example_catalog_imports_under_the_default_grant(
    server_settings: Settings,
    server_config: ServerSettings,
    scripted: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The examples' provider key is the operator's to map to the tenant, as
    # a deployment keeping it in the environment does (docs/security.md).
    monkeypatch.setenv("OPENAI_API_KEY", "sk-example")
    settings = server_settings.model_copy(update={"secrets_env": {"default": ["OPENAI_API_KEY"]}})
    state = ServerState(settings, model=scripted, server=server_config)
    await state.open()
    try:
        assert state.pilothouse.settings.catalog_code == []

        summary = await state.pilothouse.catalog.import_files([EXAMPLES])
    finally:
        await state.aclose()

    assert summary.counts["actions"].unchanged >= 1


def test_refused_names_are_never_imported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pilothouse.tools._code import CodeNotGrantedError, CodePolicy

    marker = tmp_path / "imported"
    (tmp_path / "side_effect_module.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).touch()\ndef f():\n    return 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    with pytest.raises(CodeNotGrantedError, match=SETTING):
        CodePolicy.granted([]).resolve("side_effect_module:f")

    assert not marker.exists()
    assert "side_effect_module" not in sys.modules
