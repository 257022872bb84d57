"""Fixtures for the provider tests (see provider_helpers for the httpx2 bridge)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import respx
from provider_helpers import bridge

from pilothouse.providers import ModelFactory


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as mock_router:
        yield mock_router


@pytest.fixture
async def factory(router: respx.Router) -> AsyncIterator[ModelFactory]:
    made = ModelFactory(transport=bridge(router))
    yield made
    await made.aclose()
