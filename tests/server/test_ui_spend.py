"""The spend page: the budgets of the current periods, and spend per day and per month."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal

import httpx
import pytest
from server_helpers import auth

from pilothouse.server._state import ServerState
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def _login(client: httpx.AsyncClient, key: str) -> None:
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303


async def test_the_spend_page_shows_the_budgets_and_a_chart_per_period(
    client: httpx.AsyncClient, admin_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    model = await ph.catalog.get("models", "SCRIPTEDM")
    # $1 per million tokens each way: each turn below costs $0.0001.
    await ph.catalog.update(
        "models",
        "SCRIPTEDM",
        {**model.document, "input_price": 1, "output_price": 1},
        expected_version=model.version,
    )
    created = await client.post(
        "/v1/catalog/budgets",
        json={"code": "MONTHLY", "scope": "tenant", "period": "month", "money": "0.001"},
        headers=auth(admin_key),
    )
    assert created.status_code == 201, created.text
    scripted.script.steps.extend([Reply("hi", input_tokens=60, output_tokens=40)] * 2)
    for _ in range(2):
        started = await client.post(
            "/v1/conversations", json={"action": "ECHO"}, headers=auth(admin_key)
        )
        sent = await client.post(
            f"/v1/conversations/{started.json()['uuid']}/messages",
            json={"text": "Hello"},
            headers=auth(admin_key),
        )
        assert sent.status_code == 200, sent.text

    anonymous = await client.get("/spend")
    assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login"
    await _login(client, admin_key)
    page = await client.get("/spend")
    assert page.status_code == 200
    html = page.text
    assert '<a href="/spend" aria-current="page">Spend</a>' in html
    # The budget's row: two turns of $0.0001 against $0.001 is 20 %.
    row = re.search(r"<td>MONTHLY</td>.*?</tr>", html, re.S)
    assert row is not None
    assert "20.0 %" in row.group() and "money 0.0002" in row.group()
    # A chart per period: today's and this month's bar is the tallest (the only one).
    today = datetime.now(UTC).date()
    for label in (today.isoformat(), today.isoformat()[:7]):
        bar = re.search(
            rf'<rect class="bar" [^>]*height="([0-9.]+)"><title>{label}: ([0-9.]+)</title>', html
        )
        assert bar is not None, label
        assert bar.group(1) == "100.00" and Decimal(bar.group(2)) == Decimal("0.0002")
    assert html.count('<rect class="bar"') == 31 + 12


async def test_a_browser_asking_the_spend_page_wrongly_gets_an_html_error_page(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    await _login(client, admin_key)
    refused = await client.post("/spend", headers={"Accept": "text/html"})
    assert refused.status_code == 405
    assert "text/html" in refused.headers["content-type"], refused.text
    assert "problem" not in refused.headers["content-type"]
