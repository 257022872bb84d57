"""Browser sessions: the cookie holds a session id, changes come only from the UI's own origin.

The attack: the admin is logged in to the UI at ``http://127.0.0.1:8000``;
a page on another port of the same host (``http://127.0.0.1:8001``) posts a
catalog form. SameSite does not tell ports apart, so the browser sends the
admin's cookie with it; the server must refuse it (403) and create nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from fastapi import FastAPI
from server_helpers import auth

from pilothouse.errors import NotFoundError
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import ScriptedModel

pytestmark = pytest.mark.anyio

UI = "http://127.0.0.1:8000"
OTHER_PORT = "http://127.0.0.1:8001"

GREET = {
    "code": "GREET",
    "name": "Greet",
    "model": "QWEN05",
    "configuration": "DFLT",
    "prompt": "Greet the user: {input}",
    "ask_user": "on",
    "question_timeout": "300",
}


@pytest.fixture
async def browser(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the UI at 127.0.0.1:8000 (the cookie jar is the browser's)."""
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=UI) as http:
        yield http


async def _login(browser: httpx.AsyncClient, key: str) -> dict[str, str]:
    """Log in from the UI's own page; return the cookie the browser keeps (name: value)."""
    response = await browser.post("/login", data={"api_key": key}, headers={"Origin": UI})
    assert response.status_code == 303, response.text
    cookie = response.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()
    return dict(browser.cookies.items())


async def _greet_exists(state: ServerState) -> bool:
    try:
        await state.pilothouse.catalog.get("actions", "GREET")
    except NotFoundError:
        return False
    return True


async def test_a_catalog_form_posted_from_another_port_with_the_admins_cookie_is_refused(
    browser: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(browser, admin_key)

    attack = await browser.post("/catalog/actions/new", data=GREET, headers={"Origin": OTHER_PORT})

    assert attack.status_code == 403, attack.text
    assert "another origin" in attack.text
    assert not await _greet_exists(server_state)


@pytest.mark.parametrize(
    "headers",
    [
        {"Referer": f"{OTHER_PORT}/evil.html"},  # no Origin: its Referer decides
        {},  # neither: nothing says where it comes from
        {"Origin": "null"},  # a sandboxed frame or a file
        {"Origin": "https://127.0.0.1:8000"},  # another scheme
        {"Origin": "http://localhost:8000"},  # another host name
    ],
    ids=["referer-other-port", "no-origin", "null-origin", "other-scheme", "other-host"],
)
async def test_every_other_origin_or_none_is_refused(
    browser: httpx.AsyncClient,
    admin_key: str,
    server_state: ServerState,
    headers: dict[str, str],
) -> None:
    await _login(browser, admin_key)

    attack = await browser.post("/catalog/actions/new", data=GREET, headers=headers)

    assert attack.status_code == 403, attack.text
    assert not await _greet_exists(server_state)


async def test_the_same_form_from_the_uis_own_page_creates_the_entity(
    browser: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(browser, admin_key)
    for headers in ({"Origin": UI}, {"Referer": f"{UI}/catalog/actions/new"}):
        created = await browser.post("/catalog/actions/new", data=GREET, headers=headers)
        assert created.status_code in (303, 409), created.text
    assert await _greet_exists(server_state)


@pytest.mark.parametrize("route", ["/ui/conversations/import", "/logout", "/login"])
async def test_other_state_changing_routes_check_the_origin_too(
    browser: httpx.AsyncClient, api_key: str, route: str
) -> None:
    cookie = await _login(browser, api_key)

    refused = await browser.post(route, data={"api_key": api_key}, headers={"Origin": OTHER_PORT})

    assert refused.status_code == 403, refused.text
    # The session still works: a cross-origin logout did not end it.
    browser.cookies.clear()
    browser.cookies.update(cookie)
    assert (await browser.get("/playground")).status_code == 200


async def test_header_authenticated_requests_are_not_affected_by_the_origin(
    browser: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    document = {
        "code": "GREET",
        "model": "QWEN05",
        "configuration": "DFLT",
        "prompt": "Greet the user: {input}",
    }
    created = await browser.post(
        "/v1/catalog/actions", json=document, headers={**auth(admin_key), "Origin": OTHER_PORT}
    )
    assert created.status_code == 201, created.text
    assert await _greet_exists(server_state)


async def test_the_cookie_holds_a_session_id_not_the_key(
    browser: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    response = await browser.post("/login", data={"api_key": api_key}, headers={"Origin": UI})
    assert response.status_code == 303
    assert api_key not in response.headers["set-cookie"]
    (name,) = browser.cookies.keys()
    value = browser.cookies[name]
    assert name == "pilothouse_session"
    assert value != api_key and api_key not in value and len(value) >= 40
    # The cookie's value is no key at all...
    assert await server_state.pilothouse.keys.verify(value) is None
    # ...and a cookie holding the raw key opens nothing.
    browser.cookies.clear()
    browser.cookies.set("pilothouse_session", api_key)
    assert (await browser.get("/playground")).headers.get("location") == "/login"
    browser.cookies.clear()
    browser.cookies.set("pilothouse_key", api_key)
    assert (await browser.get("/playground")).headers.get("location") == "/login"


async def test_logout_ends_the_session_so_the_old_cookie_opens_nothing(
    browser: httpx.AsyncClient, app: FastAPI, admin_key: str, server_state: ServerState
) -> None:
    cookie = await _login(browser, admin_key)
    assert (await browser.get("/playground")).status_code == 200

    out = await browser.post("/logout", headers={"Origin": UI})
    assert out.status_code == 303 and out.headers["location"] == "/login"

    # A copy of the old cookie (kept by an attacker, or another tab) is dead.
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=UI, cookies=cookie) as stolen:
        page = await stolen.get("/playground")
        assert page.status_code == 303 and page.headers["location"] == "/login"
        write = await stolen.post("/catalog/actions/new", data=GREET, headers={"Origin": UI})
        assert write.status_code == 303 and write.headers["location"] == "/login"
    assert not await _greet_exists(server_state)


async def test_revoking_the_key_ends_its_sessions(
    browser: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    await _login(browser, api_key)
    assert (await browser.get("/playground")).status_code == 200
    prefix = api_key.split("_")[1]

    await server_state.pilothouse.keys.revoke(prefix)

    assert (await browser.get("/playground")).headers.get("location") == "/login"


async def _short_state(server_settings: Settings, scripted: ScriptedModel, **server: Any) -> Any:
    state = ServerState(
        server_settings, model=scripted, server=ServerSettings(host="127.0.0.1", **server)
    )
    await state.open()
    return state


async def test_a_session_expires(
    server_settings: Settings, scripted: ScriptedModel, api_key: str
) -> None:
    state = await _short_state(server_settings, scripted, ui_session_seconds=1.0)
    try:
        app = create_app(state.settings, state=state)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=UI
        ) as browser:
            response = await browser.post(
                "/login", data={"api_key": api_key}, headers={"Origin": UI}
            )
            assert "max-age=1" in response.headers["set-cookie"].lower()
            assert (await browser.get("/playground")).status_code == 200
            await anyio.sleep(1.2)
            # The server decides, not the browser's max-age: send it anyway.
            (value,) = browser.cookies.values()
            browser.cookies.clear()
            browser.cookies.set("pilothouse_session", value)
            assert (await browser.get("/playground")).headers.get("location") == "/login"
    finally:
        await state.aclose()


async def test_ui_origins_lets_a_proxy_s_public_origin_through(
    server_settings: Settings, scripted: ScriptedModel, admin_key: str
) -> None:
    public = "https://pilothouse.example.com"
    state = await _short_state(server_settings, scripted, ui_origins=[public])
    try:
        app = create_app(state.settings, state=state)
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url=UI
        ) as browser:
            logged = await browser.post(
                "/login", data={"api_key": admin_key}, headers={"Origin": public}
            )
            assert logged.status_code == 303, logged.text
            created = await browser.post(
                "/catalog/actions/new", data=GREET, headers={"Origin": public}
            )
            assert created.status_code == 303, created.text
            refused = await browser.post(
                "/catalog/actions/GREET/delete", headers={"Origin": OTHER_PORT}
            )
            assert refused.status_code == 403
    finally:
        await state.aclose()


@pytest.mark.parametrize("origin", ["pilothouse.example.com", "https://a.example/path", "ftp://x"])
def test_ui_origins_must_be_origins(origin: str) -> None:
    with pytest.raises(ValueError, match="is not an origin; write scheme://host"):
        ServerSettings(ui_origins=[origin])
