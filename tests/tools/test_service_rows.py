"""A catalog python tool with ``settings.service``: every public method of its class (Vantiq)."""

from __future__ import annotations

import pytest
from tool_rows import tool_row

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.providers import SecretResolver
from pilothouse.tools import ToolContext, ToolError, ToolRegistry

pytestmark = pytest.mark.anyio


class Orders:
    """A service of two procedures."""

    def place(self, item: str, price: int) -> str:
        """Place an order.

        Args:
            item: what to order.
            price: the total price.
        """
        return f"ordered {item} for {price}"

    def cancel(self, order_id: str) -> str:
        """Cancel an order.

        Args:
            order_id: the order.
        """
        return f"cancelled {order_id}"

    def _audit(self) -> None:
        """Private: not a tool."""


async def test_the_rows_class_offers_each_public_method_under_the_rows_policy() -> None:
    registry = ToolRegistry(SecretResolver({}))
    row = tool_row(
        ToolKind.PYTHON,
        name="Orders",
        implementation=f"{__name__}:Orders",
        settings={"service": True},
        policy=ExecutionPolicy.AUTHORIZED,
        row_id=7,
    )
    tools = registry.service_from_catalog(row)
    assert [t.definition.name for t in tools] == ["place", "cancel"]
    assert {t.policy for t in tools} == {ExecutionPolicy.AUTHORIZED}
    place = tools[0]
    assert place.definition.parameters["required"] == ["item", "price"]
    result = await place.execute(
        {"item": "pizza", "price": 20}, ToolContext("default", "conv-1", "call-1")
    )
    assert result.content == "ordered pizza for 20"
    # Built once per row version.
    assert registry.service_from_catalog(row)[0] is place


def test_a_service_row_naming_no_class_is_refused_by_name() -> None:
    registry = ToolRegistry(SecretResolver({}))
    row = tool_row(
        ToolKind.PYTHON,
        name="Orders",
        implementation=f"{__name__}:Orders.place",
        settings={"service": True},
    )
    with pytest.raises(ToolError, match="tool 'Orders': a service's implementation must name"):
        registry.service_from_catalog(row)
