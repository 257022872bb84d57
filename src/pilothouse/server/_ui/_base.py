"""What the browser UI's routes share: templates, the session cookie, the tenant facade.

The UI logs in with an API key once; the cookie then holds a random
session id (HttpOnly, SameSite=Strict, Secure over HTTPS), never the key.
Sessions are rows of the database (``ph.keys.open_session``), so every
worker and replica of the service knows them; a session acts for its key
while the key is active, until it expires
(``PILOTHOUSE_SERVER_UI_SESSION_SECONDS``) or its user logs out, with the
key's rate limit and tenant.

SameSite does not tell ports apart: a page on another port of the same host
is "same site" and its form posts carry the cookie. So every request that
changes something (any method but GET, HEAD, OPTIONS) must name its origin
(``Origin``, else ``Referer``) and that origin must be the request's own
(scheme, host and port) or one of ``PILOTHOUSE_SERVER_UI_ORIGINS``: anything
else is refused with 403 before the session is read. Requests with an
``Authorization`` or ``X-API-Key`` header are the REST API's, not the UI's:
browsers never add those to another site's requests.
"""

from __future__ import annotations

__all__ = [
    "COOKIE",
    "SAFE_METHODS",
    "STATIC",
    "LoginRequired",
    "UiAdmin",
    "UiFacade",
    "UiUser",
    "check_origin",
    "render",
    "templates",
]

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from pilothouse.api import Pilothouse
from pilothouse.errors import ForbiddenError
from pilothouse.server._deps import Principal, State, admit_key
from pilothouse.server._state import ServerState
from pilothouse.server._ui._trace import status_name
from pilothouse.types import cost_text

HERE = Path(__file__).parent
STATIC = HERE / "static"
COOKIE = "pilothouse_session"
"""The session cookie (a random id; the key itself is never in a cookie)."""
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}

# Autoescaping is on for .html (Jinja2Templates selects it by extension).
templates = Jinja2Templates(directory=str(HERE / "templates"))


def plain_decimal(value: object) -> str:
    """A cost as every face writes it (``cost_text``): ``7.5E-7`` is ``0.00000075``.

    Costs are recorded as decimal strings (a turn's) or numerics of eight
    places (a conversation's); ``playground.js`` writes a live turn's cost
    the same way. A value that is no number is shown as it is.
    """
    if not isinstance(value, Decimal | int | str):
        return str(value)
    try:
        return cost_text(value)
    except ValueError:
        return str(value)


templates.env.filters["cost"] = plain_decimal  # pyright: ignore[reportUnknownMemberType]
templates.env.filters["status_name"] = status_name  # pyright: ignore[reportUnknownMemberType]


class LoginRequired(StarletteHTTPException):
    """No valid login: a page is redirected to ``/login``; htmx is told to go there."""

    def __init__(self) -> None:
        super().__init__(
            303, "log in with an API key", headers={"Location": "/login", "HX-Redirect": "/login"}
        )


@dataclass(frozen=True)
class UiUser:
    """The logged-in caller: the key's principal and its tenant's facade."""

    principal: Principal
    ph: Pilothouse

    @property
    def is_admin(self) -> bool:
        """Whether the key may change the catalog."""
        return self.principal.is_admin


def _origin(url: str) -> tuple[str, str, int] | None:
    """(scheme, host, port) of a URL, the default port filled in; None for no origin."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def check_origin(request: Request, state: ServerState) -> None:
    """Refuse a state-changing UI request that does not come from the UI's own origin.

    The origin is the ``Origin`` header, else the ``Referer``'s; it must be
    the request's own (scheme, host and port: another port is another
    origin) or one of ``ui_origins``. Safe methods pass.

    Raises:
        ForbiddenError: another origin, or none named.
    """
    if request.method in SAFE_METHODS:
        return
    named = request.headers.get("origin") or request.headers.get("referer")
    if not named:
        raise ForbiddenError(
            "this request names no Origin or Referer; the browser UI accepts changes "
            "only from its own pages"
        )
    origin = _origin(named)
    own = _origin(str(request.base_url))
    allowed = {_origin(o) for o in state.server.ui_origins}
    if origin is None or (origin != own and origin not in allowed):
        raise ForbiddenError(
            "this request comes from another origin than the browser UI's own; "
            "set PILOTHOUSE_SERVER_UI_ORIGINS if the UI is also served under that origin"
        )


async def ui_user(request: Request, state: State) -> UiUser:
    """FastAPI dependency: the caller logged in by session, or a redirect to the login page.

    Raises:
        ForbiddenError: a state-changing request from another origin (403).
        LoginRequired: no session, or one ended, expired or of a revoked key.
    """
    check_origin(request, state)
    session_id = request.cookies.get(COOKIE)
    if not session_id:
        raise LoginRequired
    info = await state.pilothouse.keys.session_key(session_id)
    if info is None:
        raise LoginRequired
    principal = await admit_key(request, state, info)
    return UiUser(principal, state.facade(principal.tenant, principal.caller("playground")))


UiFacade = Annotated[UiUser, Depends(ui_user)]
"""A route parameter receiving the logged-in caller."""


async def ui_admin(user: UiFacade) -> UiUser:
    """FastAPI dependency: like :func:`ui_user`; catalog writes need the admin scope."""
    if not user.is_admin:
        raise ForbiddenError("changing the catalog needs an API key with admin scope")
    return user


UiAdmin = Annotated[UiUser, Depends(ui_admin)]
"""A route parameter receiving a logged-in admin."""


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a template (a page, or a fragment for htmx) with ``context``."""
    return templates.TemplateResponse(request, name, context, status_code=status_code)
