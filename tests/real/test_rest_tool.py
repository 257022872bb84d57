"""REST tools against a real HTTP server: a FastAPI app served by uvicorn on loopback.

The OpenAPI tool is loaded from the app's live ``/openapi.json`` by
operationId, so parameter, body and server mapping meet a real generated
document, not a hand-written one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from fastapi import FastAPI, Header, HTTPException
from pydantic import BaseModel
from uvicorn_thread import uvicorn_in_thread

from pilothouse.catalog._enums import ToolKind
from pilothouse.catalog._models import Tool
from pilothouse.providers._secrets import SecretResolver
from pilothouse.tools import ToolContext, ToolRegistry

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CONTEXT = ToolContext(tenant="default", conversation_uuid="conv-1", call_id="call-1", timeout=10)


class Order(BaseModel):
    item: str
    quantity: int = 1


def make_app() -> FastAPI:
    app = FastAPI(title="orders")
    stock = {"bolt": 10, "nut": 0}

    @app.get("/stock/{item}", operation_id="getStock")
    async def get_stock(item: str, unit: str = "pieces") -> dict[str, object]:
        if item not in stock:
            raise HTTPException(404, f"unknown item {item}")
        return {"item": item, "count": stock[item], "unit": unit}

    @app.post("/orders", operation_id="placeOrder", status_code=201)
    async def place_order(
        order: Order, authorization: str = Header(default="")
    ) -> dict[str, object]:
        if authorization != "Bearer real-token":
            raise HTTPException(401, "bad token")
        return {"placed": order.item, "quantity": order.quantity}

    return app


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    with uvicorn_in_thread(make_app(), name="the inventory service") as url:
        yield url


@pytest.fixture
async def registry() -> AsyncIterator[ToolRegistry]:
    async with ToolRegistry(SecretResolver({"ORDERS_TOKEN": "real-token"})) as reg:
        yield reg


def row(name: str, **fields: object) -> Tool:
    values: dict[str, object] = {
        "version": 1,
        "code": name.upper()[:12],
        "name": name,
        "kind": ToolKind.REST,
        "input_schema": {},
        "settings": {},
        "output_schema": None,
    }
    values.update(fields)
    return Tool(**values)


async def test_openapi_operation_from_the_live_document(
    server_url: str, registry: ToolRegistry
) -> None:
    tool = await registry.from_catalog(
        row("get_stock", implementation=f"openapi:{server_url}/openapi.json#getStock")
    )
    assert tool.definition.parameters["required"] == ["item"]
    assert set(tool.definition.parameters["properties"]) == {"item", "unit"}
    result = await tool.execute({"item": "bolt", "unit": "boxes"}, CONTEXT)
    assert not result.is_error
    assert result.data == {"item": "bolt", "count": 10, "unit": "boxes"}

    missing = await tool.execute({"item": "screw"}, CONTEXT)
    assert (missing.is_error, missing.error_code) == (True, "tool.exec.http_404")
    assert "unknown item screw" in missing.content


async def test_openapi_operation_with_a_body_and_a_secret_header(
    server_url: str, registry: ToolRegistry
) -> None:
    tool = await registry.from_catalog(
        row(
            "place_order",
            implementation=f"openapi:{server_url}/openapi.json#placeOrder",
            settings={"headers": {"Authorization": "Bearer @secrets(ORDERS_TOKEN)"}},
        )
    )
    properties = tool.definition.parameters["properties"]
    assert {"item", "quantity"} <= set(properties)
    result = await tool.execute({"item": "nut", "quantity": 3}, CONTEXT)
    assert not result.is_error, result.content
    assert result.data == {"placed": "nut", "quantity": 3}
    assert "real-token" not in result.content


async def test_hand_declared_endpoint(server_url: str, registry: ToolRegistry) -> None:
    tool = await registry.from_catalog(
        row(
            "order",
            settings={
                "method": "POST",
                "url": f"{server_url}/orders",
                "headers": {"Authorization": "Bearer @secrets(ORDERS_TOKEN)"},
            },
            input_schema={
                "type": "object",
                "properties": {"item": {"type": "string"}, "quantity": {"type": "integer"}},
                "required": ["item"],
            },
        )
    )
    result = await tool.execute({"item": "bolt", "quantity": 2}, CONTEXT)
    assert result.data == {"placed": "bolt", "quantity": 2}

    stock = await registry.from_catalog(
        row("stock", settings={"url": f"{server_url}/stock/{{item}}", "max_response_bytes": 8})
    )
    cut = await stock.execute({"item": "nut"}, CONTEXT)
    assert cut.content.startswith('{"item":')
    assert "…[truncated: 8 of " in cut.content
