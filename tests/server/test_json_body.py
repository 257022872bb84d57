"""A JSON body sent as curl's ``-d`` sends it (form-urlencoded) or with no Content-Type."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from server_helpers import auth

pytestmark = pytest.mark.anyio

BODY = b'{"action": "ECHO", "memoryId": "mem-1"}'


@pytest.mark.parametrize(
    "content_type",
    ["application/x-www-form-urlencoded", "text/plain; charset=utf-8", None],
    ids=["curl-d", "text-plain", "none"],
)
async def test_an_authorized_json_body_is_read_as_json(
    client: httpx.AsyncClient, api_key: str, content_type: str | None
) -> None:
    headers = auth(api_key)
    if content_type is not None:
        headers["Content-Type"] = content_type
    response = await client.post("/v1/conversations", content=BODY, headers=headers)
    assert response.status_code == 201, response.text
    assert response.json()["memory_id"] == "mem-1"


async def test_a_form_body_that_is_not_json_is_left_as_it_is(
    client: httpx.AsyncClient, api_key: str
) -> None:
    response = await client.post(
        "/v1/conversations",
        content=b"action=ECHO",
        headers={**auth(api_key), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert response.status_code == 422, response.text


async def test_without_authorization_a_form_body_is_not_relabelled() -> None:
    # A cross-site form can post this body without a preflight, but cannot
    # add an Authorization header: such a request is never relabelled.
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse

    from pilothouse.server._jsonbody import JsonBodyMiddleware

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        request = Request(scope, receive)
        body = await request.body()
        kind = request.headers.get("content-type", "")
        await PlainTextResponse(f"{kind}|{body.decode()}")(scope, receive, send)

    transport = httpx.ASGITransport(app=JsonBodyMiddleware(echo))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        plain = await http.post("/v1/conversations", content=BODY, headers=form)
        keyed = await http.post(
            "/v1/conversations", content=BODY, headers={**form, "Authorization": "Bearer k"}
        )
    assert plain.text == f"application/x-www-form-urlencoded|{BODY.decode()}"
    assert keyed.text == f"application/json|{BODY.decode()}"
