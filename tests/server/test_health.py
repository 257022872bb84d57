from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.anyio


async def test_healthz_needs_no_key(client: httpx.AsyncClient) -> None:
    response = await client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_reports_current_migrations(client: httpx.AsyncClient) -> None:
    response = await client.get("/readyz")
    assert response.status_code == 200
    assert response.json()["checks"] == {"database": "ok", "migrations": "current"}


async def test_unknown_route_is_a_404_problem(client: httpx.AsyncClient) -> None:
    response = await client.get("/nope")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 404


async def test_wrong_method_is_a_405_problem(client: httpx.AsyncClient) -> None:
    response = await client.delete("/healthz")
    assert response.status_code == 405
    assert response.headers["content-type"] == "application/problem+json"
    assert "GET" in response.headers["allow"]


async def test_metrics_open_on_loopback(client: httpx.AsyncClient) -> None:
    await client.get("/healthz")
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert 'pilothouse_http_requests_total{method="GET",route="/healthz",status="200"}' in (
        response.text
    )
