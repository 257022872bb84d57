"""Catalog tables in the browser UI: search (key, name, description) and pages of 25."""

from __future__ import annotations

import re

import httpx
import pytest

from pilothouse.server._state import ServerState

pytestmark = pytest.mark.anyio


async def _login(client: httpx.AsyncClient, key: str) -> None:
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303, response.text


def _keys(html: str) -> list[str]:
    return re.findall(r'<td><a href="/catalog/configurations/([A-Z0-9_]+)">', html)


async def test_a_catalog_table_searches_and_pages(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    for i in range(30):
        name = "Quiet preset" if i % 10 == 3 else f"Preset {i}"
        await ph.catalog.create(
            "configurations", {"code": f"Z{i:03d}", "name": name, "max_tokens": 64}
        )
    await _login(client, api_key)
    everything = {e.key for e in await ph.catalog.list_entries("configurations")}
    first = await client.get("/catalog/configurations")
    assert first.status_code == 200
    assert len(_keys(first.text)) == 25
    total = len(everything)
    assert f"{total} in all · page 1 of 2" in first.text
    assert "Next page" in first.text and "Previous page" not in first.text
    second = await client.get("/catalog/configurations", params={"page": 2})
    assert "Previous page" in second.text and "Next page" not in second.text
    assert set(_keys(first.text)) | set(_keys(second.text)) == everything
    assert not set(_keys(first.text)) & set(_keys(second.text))
    # A page past the end shows the last one.
    assert _keys((await client.get("/catalog/configurations", params={"page": 9})).text) == (
        _keys(second.text)
    )
    # Search: by name (any case) and by key; the count says how many of how many.
    quiet = await client.get("/catalog/configurations", params={"q": "QUIET"})
    assert _keys(quiet.text) == ["Z003", "Z013", "Z023"]
    assert f"3 of {total} match “QUIET”" in quiet.text and "Next page" not in quiet.text
    by_key = await client.get("/catalog/configurations", params={"q": "z02"})
    assert _keys(by_key.text) == [f"Z02{i}" for i in range(10)]
    none = await client.get("/catalog/configurations", params={"q": "no such thing"})
    assert "No configurations match “no such thing”." in none.text
    for bad in ({"page": 0}, {"page": "x"}, {"q": "x" * 201}):
        assert (await client.get("/catalog/configurations", params=bad)).status_code == 422
