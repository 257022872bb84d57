"""A query parameter an API route does not read is refused (422), not dropped.

Before: ``GET /v1/conversations?stauts=CO`` listed every conversation, as if
no filter had been asked for.
"""

from __future__ import annotations

import httpx
import pytest
from server_helpers import auth

pytestmark = pytest.mark.anyio


async def test_a_misspelt_filter_is_refused_naming_it_and_what_the_route_reads(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.get(
        "/v1/conversations", params={"stauts": "CO", "limit": 5}, headers=auth(api_key)
    )
    assert response.status_code == 422
    problem = response.json()
    assert problem["detail"] == "invalid field(s): query:stauts"
    assert problem["errors"][0]["msg"] == (
        "Extra inputs are not permitted "
        "(this route reads: action, agent, from, limit, offset, status, to)"
    )


async def test_declared_parameters_and_aliases_still_work(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.get(
        "/v1/conversations",
        params={"status": "CO", "from": "2026-01-01T00:00:00Z", "limit": 5},
        headers=auth(api_key),
    )
    assert response.status_code == 200, response.text
    assert response.json()["limit"] == 5


async def test_a_route_without_query_parameters_refuses_any(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.get("/v1/catalog", params={"x": "1"}, headers=auth(api_key))
    assert response.status_code == 422
    assert "this route reads: none" in response.json()["errors"][0]["msg"]


async def test_the_openai_routes_keep_openai_s_tolerance(
    client: httpx.AsyncClient, api_key: str
) -> None:
    # Clients of other OpenAI flavours add api-version; OpenAI ignores it too.
    response = await client.get("/v1/models", params={"api-version": "1"}, headers=auth(api_key))
    assert response.status_code == 200, response.text
