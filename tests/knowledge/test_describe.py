"""Discovery by meaning: the packaged model picks the tools a request needs."""

from __future__ import annotations

import pytest

from pilothouse.knowledge import DescriptionMatcher, LocalMiniLM

pytestmark = pytest.mark.anyio

TOOLS = {
    "WEATHER": "Get the current weather forecast for a city.",
    "INVOICE": "Create an invoice for a customer order and send it by email.",
    "STOCK": "Look up how many units of a product are left in the warehouse.",
    "CALENDAR": "Schedule a meeting in the team calendar.",
    "TRANSLATE": "Translate a text into another language.",
}


async def test_the_matching_descriptions_come_first(minilm: LocalMiniLM) -> None:
    matcher = DescriptionMatcher(minilm)
    found = await matcher.match("Will it rain in Hamburg tomorrow?", TOOLS, top_k=2)
    assert found[0].key == "WEATHER"
    assert len(found) == 2 and found[0].similarity > found[1].similarity
    stock = await matcher.match("are any red mugs left in the warehouse?", TOOLS, top_k=1)
    assert [m.key for m in stock] == ["STOCK"]
    assert await matcher.match("anything", TOOLS, threshold=0.99) == []
    assert await matcher.match("anything", {}) == []
