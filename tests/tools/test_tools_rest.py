"""Hand-declared REST tools: method, URL template, secret headers, body mapping, limits."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import respx
from tool_rows import tool_row

from pilothouse.catalog._enums import ToolKind
from pilothouse.providers._secrets import SecretResolver
from pilothouse.tools import RestTool, ToolContext, ToolError, ToolRegistry

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="default", conversation_uuid="conv-1", call_id="call-1", timeout=5)
TOKEN = "s3cr3t-token-value"
ITEM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "count": {"type": "integer"},
    },
    "required": ["id"],
}


@pytest.fixture
async def registry() -> AsyncIterator[ToolRegistry]:
    async with ToolRegistry(SecretResolver({"API_TOKEN": TOKEN})) as reg:
        yield reg


async def rest_tool(registry: ToolRegistry, **settings: Any) -> RestTool:
    row = tool_row(ToolKind.REST, name="items", settings=settings, input_schema=ITEM_SCHEMA)
    built = await registry.from_catalog(row)
    assert isinstance(built, RestTool)
    return built


async def test_post_fills_the_url_template_resolves_secret_headers_and_sends_the_rest_as_body(
    registry: ToolRegistry,
) -> None:
    tool = await rest_tool(
        registry,
        method="post",
        url="https://api.example.test/items/{id}",
        headers={"Authorization": "Bearer @secrets(API_TOKEN)", "X-App": "pilothouse"},
    )
    with respx.mock:
        route = respx.post("https://api.example.test/items/a%2Fb").respond(
            201, json={"ok": True, "id": "a/b"}
        )
        result = await tool.execute({"id": "a/b", "name": "bolt", "count": 3}, CONTEXT)
    assert not result.is_error
    assert result.data == {"ok": True, "id": "a/b"}
    assert json.loads(result.content) == {"ok": True, "id": "a/b"}
    request = route.calls.last.request
    assert request.headers["Authorization"] == f"Bearer {TOKEN}"
    assert request.headers["X-App"] == "pilothouse"
    assert json.loads(request.content) == {"name": "bolt", "count": 3}
    assert TOKEN not in result.content
    assert TOKEN not in repr(tool.endpoint)


async def test_get_sends_arguments_not_in_the_template_as_query(registry: ToolRegistry) -> None:
    tool = await rest_tool(registry, url="https://api.example.test/items/{id}")
    with respx.mock:
        route = respx.get("https://api.example.test/items/7").respond(200, text="plain")
        result = await tool.execute({"id": "7", "name": "x y", "count": 2}, CONTEXT)
    assert (result.content, result.data) == ("plain", None)
    assert dict(route.calls.last.request.url.params) == {"name": "x y", "count": "2"}
    assert route.calls.last.request.content == b""


async def test_body_mapping_renames_fields_and_leaves_the_rest_to_the_query(
    registry: ToolRegistry,
) -> None:
    tool = await rest_tool(
        registry,
        method="PUT",
        url="https://api.example.test/items/{id}",
        body={"item_name": "name"},
    )
    with respx.mock:
        route = respx.put("https://api.example.test/items/1").respond(204)
        result = await tool.execute({"id": "1", "name": "nut", "count": 4}, CONTEXT)
    assert not result.is_error
    request = route.calls.last.request
    assert json.loads(request.content) == {"item_name": "nut"}
    assert dict(request.url.params) == {"count": "4"}


async def test_body_as_a_list_of_argument_names(registry: ToolRegistry) -> None:
    tool = await rest_tool(
        registry, method="PATCH", url="https://api.example.test/items/{id}", body=["count"]
    )
    with respx.mock:
        route = respx.patch("https://api.example.test/items/1").respond(200, json={})
        await tool.execute({"id": "1", "name": "n", "count": 4}, CONTEXT)
    assert json.loads(route.calls.last.request.content) == {"count": 4}
    assert dict(route.calls.last.request.url.params) == {"name": "n"}


async def test_long_responses_are_truncated_with_a_note(registry: ToolRegistry) -> None:
    tool = await rest_tool(
        registry, url="https://api.example.test/items/{id}", max_response_bytes=10
    )
    with respx.mock:
        respx.get("https://api.example.test/items/1").respond(200, text="0123456789" * 10)
        result = await tool.execute({"id": "1"}, CONTEXT)
    assert not result.is_error
    assert result.content == "0123456789…[truncated: 10 of 100 bytes]"


async def test_the_default_limit_is_64_kib(registry: ToolRegistry) -> None:
    tool = await rest_tool(registry, url="https://api.example.test/items/{id}")
    with respx.mock:
        respx.get("https://api.example.test/items/1").respond(200, text="x" * 70_000)
        result = await tool.execute({"id": "1"}, CONTEXT)
    assert result.content.endswith("…[truncated: 65536 of 70000 bytes]")


async def test_non_2xx_is_an_error_result_with_the_status_and_an_excerpt(
    registry: ToolRegistry,
) -> None:
    tool = await rest_tool(registry, url="https://api.example.test/items/{id}")
    with respx.mock:
        respx.get("https://api.example.test/items/404").respond(
            404, json={"detail": "no such item " + "z" * 1000}
        )
        result = await tool.execute({"id": "404"}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.http_404"
    assert result.content.startswith('HTTP 404 Not Found: {"detail":"no such item zzz')
    assert result.content.endswith("…")
    assert len(result.content) < 600


async def test_missing_secret_is_an_error_result_naming_it(registry: ToolRegistry) -> None:
    tool = await rest_tool(
        registry,
        url="https://api.example.test/items/{id}",
        headers={"Authorization": "Bearer @secrets(NOT_SET)"},
    )
    with respx.mock:
        result = await tool.execute({"id": "1"}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.secret_missing"
    assert "'NOT_SET'" in result.content


async def test_timeout_is_an_error_result(registry: ToolRegistry) -> None:
    tool = await rest_tool(registry, url="https://api.example.test/items/{id}", timeout=0.5)
    with respx.mock:
        respx.get("https://api.example.test/items/1").mock(side_effect=httpx.ReadTimeout("slow"))
        result = await tool.execute({"id": "1", "name": "secret-ish"}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.timeout"
    assert result.content == "GET https://api.example.test/items/1 timed out after 0.5 s"


async def test_unreachable_server_is_an_error_result(registry: ToolRegistry) -> None:
    tool = await rest_tool(registry, url="https://api.example.test/items/{id}")
    with respx.mock:
        respx.get("https://api.example.test/items/1").mock(
            side_effect=httpx.ConnectError("refused")
        )
        result = await tool.execute({"id": "1"}, CONTEXT)
    assert (result.is_error, result.error_code) == (True, "tool.exec.connection")


async def test_missing_url_argument_is_an_error_result(registry: ToolRegistry) -> None:
    tool = await rest_tool(registry, url="https://api.example.test/items/{id}")
    result = await tool.execute({"name": "x"}, CONTEXT)
    assert (result.is_error, result.error_code) == (True, "tool.args.invalid")
    assert "id" in result.content


async def test_schema_is_derived_from_the_url_template_when_the_row_has_none(
    registry: ToolRegistry,
) -> None:
    row = tool_row(
        ToolKind.REST, name="by_id", settings={"url": "https://api.example.test/{kind}/{id}"}
    )
    built = await registry.from_catalog(row)
    assert built.definition.parameters == {
        "type": "object",
        "properties": {"kind": {"type": "string"}, "id": {"type": "string"}},
        "required": ["kind", "id"],
    }


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, r"tool 'items': settings.url: required, an http\(s\) URL template"),
        ({"url": "ftp://x/{id}"}, r"settings.url: required"),
        ({"url": "https://x/{a.b}"}, r"settings.url: template field '\{a.b\}' must be a name"),
        ({"url": "https://x/", "method": "FETCH"}, r"settings.method: unknown HTTP method"),
        ({"url": "https://x/", "headers": ["a"]}, r"settings.headers: must be a mapping"),
        ({"url": "https://x/", "body": 3}, r"settings.body: expected a list"),
        ({"url": "https://x/", "timeout": -1}, r"settings.timeout: must be a positive number"),
    ],
)
async def test_bad_settings_are_tool_errors_naming_the_tool(
    registry: ToolRegistry, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ToolError, match=message):
        await rest_tool(registry, **settings)


@pytest.mark.parametrize(
    "url",
    [
        # A width pads the argument to that many characters: 4 GB per call.
        "https://x/items/{id:>4000000000}",
        "https://x/items/{id!r}",
        "https://x/items/{id:{id}}",
    ],
)
async def test_a_url_field_with_a_conversion_or_format_spec_is_refused_naming_the_plain_form(
    registry: ToolRegistry, url: str
) -> None:
    with pytest.raises(
        ToolError,
        match=r"tool 'items': settings.url: template field '\{id.+\}' must be a plain name; "
        r"write '\{id\}'",
    ):
        await rest_tool(registry, url=url)


async def test_registry_shares_one_client_and_closes_only_its_own() -> None:
    async with httpx.AsyncClient() as client:
        reg = ToolRegistry(SecretResolver({}), http=client)
        assert reg.http is client
        await reg.aclose()
        assert not client.is_closed
    own = ToolRegistry(SecretResolver({}))
    made = own.http
    assert own.http is made
    await own.aclose()
    assert made.is_closed
