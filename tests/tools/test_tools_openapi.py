"""REST tools from OpenAPI operations: parameters, body, refs, servers, errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import respx
from tool_rows import tool_row

from pilothouse.catalog._enums import ToolKind
from pilothouse.providers._secrets import SecretResolver
from pilothouse.tools import RestTool, ToolContext, ToolError, ToolRegistry

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="default", conversation_uuid="conv-1", call_id="call-1", timeout=5)

DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "Shop", "version": "1"},
    "servers": [{"url": "https://shop.example.test/v1"}],
    "paths": {
        "/items/{item_id}": {
            "parameters": [{"$ref": "#/components/parameters/ItemId"}],
            "get": {
                "operationId": "getItem",
                "summary": "Read one item.",
                "parameters": [
                    {
                        "name": "fields",
                        "in": "query",
                        "schema": {"type": "array", "items": {"type": "string"}},
                    },
                    {
                        "name": "X-Trace",
                        "in": "header",
                        "description": "A trace id.",
                        "schema": {"type": "string"},
                    },
                    {"name": "session", "in": "cookie", "schema": {"type": "string"}},
                ],
            },
            "put": {
                "operationId": "replaceItem",
                "description": "Replace an item.",
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Item"}}
                    },
                },
            },
        },
        "/bulk": {
            "post": {
                "operationId": "bulkCreate",
                "requestBody": {
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "array",
                                "items": {"$ref": "#/components/schemas/Item"},
                            }
                        }
                    }
                },
            }
        },
    },
    "components": {
        "parameters": {
            "ItemId": {
                "name": "item_id",
                "in": "path",
                "required": True,
                "schema": {"type": "integer"},
            }
        },
        "schemas": {
            "Item": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "tags": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
                },
                "required": ["name"],
            },
            "Tag": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/components/schemas/Tag"}},
                },
            },
        },
    },
}


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "shop.json"
    path.write_text(json.dumps(DOCUMENT), encoding="utf-8")
    return path


@pytest.fixture
async def registry() -> AsyncIterator[ToolRegistry]:
    async with ToolRegistry(SecretResolver({"SHOP_KEY": "k-123"})) as reg:
        yield reg


async def openapi_tool(
    registry: ToolRegistry, source: str | Path, operation_id: str, **settings: Any
) -> RestTool:
    row = tool_row(
        ToolKind.REST,
        name=operation_id.lower(),
        implementation=f"openapi:{source}#{operation_id}",
        settings=settings,
    )
    built = await registry.from_catalog(row)
    assert isinstance(built, RestTool)
    return built


async def test_parameters_from_path_query_and_header(
    registry: ToolRegistry, spec_file: Path
) -> None:
    tool = await openapi_tool(registry, spec_file, "getItem")
    assert tool.definition.description == "Read one item."
    assert tool.definition.parameters == {
        "type": "object",
        "properties": {
            "item_id": {"type": "integer"},
            "fields": {"type": "array", "items": {"type": "string"}},
            "X-Trace": {"type": "string", "description": "A trace id."},
        },
        "required": ["item_id"],
    }
    with respx.mock:
        route = respx.get("https://shop.example.test/v1/items/5").respond(200, json={"id": 5})
        result = await tool.execute({"item_id": 5, "fields": ["a", "b"], "X-Trace": "t1"}, CONTEXT)
    assert result.data == {"id": 5}
    request = route.calls.last.request
    assert request.url.params.get_list("fields") == ["a", "b"]
    assert request.headers["X-Trace"] == "t1"


async def test_object_body_fields_sit_beside_parameters_with_refs_as_defs(
    registry: ToolRegistry, spec_file: Path
) -> None:
    tool = await openapi_tool(
        registry,
        spec_file,
        "replaceItem",
        base_url="https://staging.example.test/v1/",
        headers={"X-Key": "@secrets(SHOP_KEY)"},
    )
    parameters = dict(tool.definition.parameters)
    assert parameters["properties"] == {
        "item_id": {"type": "integer"},
        "name": {"type": "string"},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
    }
    assert parameters["required"] == ["item_id", "name"]
    assert list(parameters["$defs"]) == ["Tag"]
    assert parameters["$defs"]["Tag"] == {
        "type": "object",
        "properties": {
            "label": {"type": "string"},
            "children": {"type": "array", "items": {"$ref": "#/$defs/Tag"}},
        },
    }
    with respx.mock:
        route = respx.put("https://staging.example.test/v1/items/9").respond(200, json={})
        await tool.execute({"item_id": 9, "name": "bolt", "tags": [{"label": "x"}]}, CONTEXT)
    request = route.calls.last.request
    assert json.loads(request.content) == {"name": "bolt", "tags": [{"label": "x"}]}
    assert request.headers["X-Key"] == "k-123"


async def test_non_object_body_is_one_body_argument(
    registry: ToolRegistry, spec_file: Path
) -> None:
    tool = await openapi_tool(registry, spec_file, "bulkCreate")
    assert tool.definition.parameters["properties"] == {
        "body": {"type": "array", "items": {"$ref": "#/$defs/Item"}}
    }
    assert "required" not in tool.definition.parameters
    with respx.mock:
        route = respx.post("https://shop.example.test/v1/bulk").respond(201, json=[1])
        await tool.execute({"body": [{"name": "a"}]}, CONTEXT)
    assert json.loads(route.calls.last.request.content) == [{"name": "a"}]


async def test_yaml_document_from_a_url_with_a_relative_server(registry: ToolRegistry) -> None:
    yaml_text = """
openapi: 3.0.3
info: {title: t, version: '1'}
servers: [{url: /api}]
paths:
  /ping:
    get:
      operationId: ping
      responses: {'200': {description: ok}}
"""
    with respx.mock:
        respx.get("http://127.0.0.1:9/docs/openapi.yaml").respond(200, text=yaml_text)
        route = respx.get("http://127.0.0.1:9/api/ping").respond(200, text="pong")
        tool = await openapi_tool(registry, "http://127.0.0.1:9/docs/openapi.yaml", "ping")
        result = await tool.execute({}, CONTEXT)
    assert result.content == "pong"
    assert route.called


async def test_the_document_is_read_once_per_registry(
    registry: ToolRegistry, spec_file: Path
) -> None:
    await openapi_tool(registry, spec_file, "getItem")
    spec_file.unlink()
    tool = await openapi_tool(registry, spec_file, "bulkCreate")
    assert tool.definition.name == "bulkcreate"


@pytest.mark.parametrize(
    ("implementation", "message"),
    [
        ("openapi:{spec}", r"is not 'openapi:<url-or-path>#<operationId>'"),
        ("openapi:#getItem", r"is not 'openapi:<url-or-path>#<operationId>'"),
        ("openapi:{spec}#nope", r"tool 'broken': OpenAPI operation 'nope' is not in the document"),
        ("openapi:/no/such/file.json#x", r"OpenAPI document /no/such/file.json: cannot read it"),
        ("https://x/openapi.json#x", r"a rest implementation must be 'openapi:"),
    ],
)
async def test_bad_references_are_tool_errors(
    registry: ToolRegistry, spec_file: Path, implementation: str, message: str
) -> None:
    row = tool_row(
        ToolKind.REST, name="broken", implementation=implementation.format(spec=spec_file)
    )
    with pytest.raises(ToolError, match=message):
        await registry.from_catalog(row)


async def test_not_an_openapi_3_document_is_refused(registry: ToolRegistry, tmp_path: Path) -> None:
    path = tmp_path / "swagger.json"
    path.write_text(json.dumps({"swagger": "2.0", "paths": {}}), encoding="utf-8")
    with pytest.raises(ToolError, match=r"not OpenAPI 3 \(openapi: None\)"):
        await openapi_tool(registry, path, "x")


async def test_document_without_absolute_server_needs_a_base_url(
    registry: ToolRegistry, tmp_path: Path
) -> None:
    document = {**DOCUMENT, "servers": [{"url": "/relative"}]}
    path = tmp_path / "relative.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ToolError, match="set settings.base_url on the tool"):
        await openapi_tool(registry, path, "getItem")
    tool = await openapi_tool(registry, path, "replaceItem", base_url="http://127.0.0.1:1")
    assert tool.endpoint.url == "http://127.0.0.1:1/items/{item_id}"


async def test_required_cookie_parameter_is_refused(registry: ToolRegistry, tmp_path: Path) -> None:
    document = json.loads(json.dumps(DOCUMENT))
    document["paths"]["/items/{item_id}"]["get"]["parameters"][2]["required"] = True
    path = tmp_path / "cookie.json"
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ToolError, match="required cookie parameter 'session' is not supported"):
        await openapi_tool(registry, path, "getItem")


@pytest.mark.parametrize(
    ("path", "message"),
    [
        # The path is filled with str.format: a width would build a string
        # of that many characters in the server at each call.
        (
            "/items/{item_id:>4000000000}",
            r"OpenAPI operation 'getItem': URL 'https://shop.example.test/v1/items/"
            r"\{item_id:>4000000000\}': template field '\{item_id:>4000000000\}' must be a plain "
            r"name; write '\{item_id\}'",
        ),
        (
            "/items/{item_id}/{other}",
            r"OpenAPI operation 'getItem': URL 'https://shop.example.test/v1/items/\{item_id\}/"
            r"\{other\}': '\{other\}' is not a path parameter of the operation; declare it",
        ),
    ],
)
async def test_a_path_template_the_call_cannot_fill_plainly_is_refused(
    registry: ToolRegistry, tmp_path: Path, path: str, message: str
) -> None:
    document = json.loads(json.dumps(DOCUMENT))
    document["paths"] = {path: document["paths"]["/items/{item_id}"]}
    source = tmp_path / "formatted.json"
    source.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(ToolError, match=message):
        await openapi_tool(registry, source, "getItem")


async def test_a_huge_document_url_is_not_read_past_the_bound() -> None:
    """A tenant's document URL answering 64 MiB costs at most the bound, then a tool error."""
    import httpx

    from pilothouse.tools._openapi import load_document

    sent: list[int] = []

    async def huge() -> AsyncIterator[bytes]:
        block = b"#" + b" " * (1024 * 1024 - 2) + b"\n"
        for _ in range(64):
            sent.append(len(block))
            yield block

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "application/yaml"}, content=huge())

    async with httpx.AsyncClient(transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(ToolError, match=r"openapi.yaml: more than 10485760 bytes"):
            await load_document("https://docs.example.test/openapi.yaml", client)
    assert sum(sent) <= 11 * 1024 * 1024
