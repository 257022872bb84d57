"""A time filter whose UTC reading leaves the calendar is answered, not a 500.

``9999-12-31T23:59:59-01:00`` is a valid ISO 8601 time, one hour after the
last moment a UTC datetime can hold; ``0001-01-01T00:00:00+01:00`` is an
hour before the first. Converting either to UTC for the query overflowed.
On SQLite and PostgreSQL, REST and JSON-RPC.
"""

from __future__ import annotations

import httpx
import pytest
from server_helpers import auth

from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio

AFTER_THE_LAST = "9999-12-31T23:59:59-01:00"
BEFORE_THE_FIRST = "0001-01-01T00:00:00+01:00"


@pytest.fixture
def server_settings(database_url: str) -> Settings:
    # SQLite and PostgreSQL, each seeded with the examples and ECHO.
    return Settings(database_url=database_url, secrets_file=None)


async def test_times_beyond_either_end_of_the_calendar_bound_a_listing(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    created = await client.post(
        "/v1/conversations", json={"action": "ECHO"}, headers=auth(admin_key)
    )
    assert created.status_code == 201, created.text
    totals: dict[tuple[str, str], int] = {}
    for name, moment in (("from", AFTER_THE_LAST), ("to", AFTER_THE_LAST)):
        listed = await client.get(
            "/v1/conversations", params={name: moment}, headers=auth(admin_key)
        )
        assert listed.status_code == 200, listed.text
        totals[(name, moment)] = listed.json()["total"]
    for name, moment in (("from", BEFORE_THE_FIRST), ("to", BEFORE_THE_FIRST)):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "pilothouse/query/listConversations/v1",
            "params": {"createdFrom" if name == "from" else "createdTo": moment},
        }
        answer = (await client.post("/jsonrpc", json=body, headers=auth(admin_key))).json()
        assert "result" in answer, answer
        totals[(name, moment)] = answer["result"]["total"]
    assert totals == {
        ("from", AFTER_THE_LAST): 0,
        ("to", AFTER_THE_LAST): 1,
        ("from", BEFORE_THE_FIRST): 1,
        ("to", BEFORE_THE_FIRST): 0,
    }
    dataset = await client.post(
        "/v1/evaluation/datasets",
        json={"name": "late", "from_conversations": True, "since": AFTER_THE_LAST},
        headers=auth(admin_key),
    )
    assert dataset.status_code == 201, dataset.text
