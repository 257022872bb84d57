"""Login, logout, the landing redirect, and the API docs served from vendored assets."""

from __future__ import annotations

__all__ = ["router"]

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from pilothouse.errors import TooManyRequestsError, UnauthorizedError
from pilothouse.server._deps import State, principal_from_key
from pilothouse.server._ui._base import COOKIE, check_origin, render

router = APIRouter(include_in_schema=False)

_VENDOR = "/static/vendor"


@router.get("/")
async def landing(request: Request) -> RedirectResponse:
    """Send a visitor to the playground, or to the login page without a login."""
    target = "/playground" if request.cookies.get(COOKIE) else "/login"
    return RedirectResponse(target, status_code=303)


@router.get("/login")
async def login_page(request: Request) -> HTMLResponse:
    """The login form: one API key field."""
    return render(request, "login.html", error=None)


@router.post("/login")
async def login(
    request: Request, state: State, api_key: Annotated[str, Form(max_length=256)] = ""
) -> Response:
    """Check the key like the REST API does; open a session and keep its id in a cookie.

    The key itself is never put in the cookie. From another origin the login
    is refused with 403 (a page that logs its visitors into its own key).
    """
    check_origin(request, state)
    key = api_key.strip()
    error = None
    if not key:
        error = "Enter an API key (pilothouse keys create --tenant <tenant>)."
    else:
        try:
            await principal_from_key(request, state, key)
        except UnauthorizedError:
            error = "This API key is unknown or revoked."
        except TooManyRequestsError:
            error = "Too many attempts; wait a minute and try again."
    if error is not None:
        return render(request, "login.html", status_code=401, error=error)
    lifetime = state.server.ui_session_seconds
    try:
        session_id = await state.pilothouse.keys.open_session(key, lifetime)
    except UnauthorizedError:
        # Revoked between the check and now.
        return render(
            request, "login.html", status_code=401, error="This API key is unknown or revoked."
        )
    response = RedirectResponse("/playground", status_code=303)
    response.set_cookie(
        COOKIE,
        session_id,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        max_age=int(lifetime),
    )
    return response


@router.post("/logout")
async def logout(request: Request, state: State) -> RedirectResponse:
    """End the session: its id opens nothing any more, in this browser or any other."""
    check_origin(request, state)
    session_id = request.cookies.get(COOKIE)
    if session_id:
        await state.pilothouse.keys.end_session(session_id)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(COOKIE)
    return response


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    """Swagger UI from the vendored ``swagger-ui-dist`` (no CDN)."""
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="pilothouse - Swagger UI",
        swagger_js_url=f"{_VENDOR}/swagger-ui-bundle.js",
        swagger_css_url=f"{_VENDOR}/swagger-ui.css",
        swagger_favicon_url=f"{_VENDOR}/favicon-32x32.png",
    )


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    """ReDoc from the vendored ``redoc`` bundle (no CDN, no web fonts)."""
    return get_redoc_html(
        openapi_url="/openapi.json",
        title="pilothouse - ReDoc",
        redoc_js_url=f"{_VENDOR}/redoc.standalone.js",
        redoc_favicon_url=f"{_VENDOR}/favicon-32x32.png",
        with_google_fonts=False,
    )
