"""Fixtures for the provider tests (see provider_helpers for the httpx2 bridge)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import respx
from provider_helpers import bridge

from pilothouse.providers import ModelFactory
from pilothouse.testing import allow_model_requests


@pytest.fixture
def router() -> Iterator[respx.Router]:
    with respx.mock(assert_all_called=True, assert_all_mocked=True) as mock_router:
        yield mock_router


@pytest.fixture
async def factory(router: respx.Router) -> AsyncIterator[ModelFactory]:
    made = ModelFactory(transport=bridge(router))
    yield made
    await made.aclose()


@pytest.fixture(autouse=True)
def real_model_requests() -> Iterator[None]:
    """Real provider models, on mock transports: allowed here, blocked in the rest of the suite."""
    with allow_model_requests():
        yield
