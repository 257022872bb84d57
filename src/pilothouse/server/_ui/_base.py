"""What the browser UI's routes share: templates, the login cookie, the tenant facade.

The UI logs in with an API key, kept in an HttpOnly, SameSite=Strict cookie
(scripts cannot read it, other sites cannot send it), and verified on every
request like the ``Authorization`` header of the REST API: same key cache,
same rate limit, same tenant scoping.
"""

from __future__ import annotations

__all__ = [
    "COOKIE",
    "STATIC",
    "LoginRequired",
    "UiAdmin",
    "UiFacade",
    "UiUser",
    "render",
    "templates",
]

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from pilothouse.api import Pilothouse
from pilothouse.errors import UnauthorizedError
from pilothouse.server._deps import Principal, State, principal_from_key
from pilothouse.types import cost_text

HERE = Path(__file__).parent
STATIC = HERE / "static"
COOKIE = "pilothouse_key"

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


async def ui_user(request: Request, state: State) -> UiUser:
    """FastAPI dependency: the caller logged in by cookie, or a redirect to the login page."""
    key = request.cookies.get(COOKIE)
    if not key:
        raise LoginRequired
    try:
        principal = await principal_from_key(request, state, key)
    except UnauthorizedError:
        raise LoginRequired from None
    return UiUser(principal, state.facade(principal.tenant, principal.caller("playground")))


UiFacade = Annotated[UiUser, Depends(ui_user)]
"""A route parameter receiving the logged-in caller."""


async def ui_admin(user: UiFacade) -> UiUser:
    """FastAPI dependency: like :func:`ui_user`; catalog writes need the admin scope."""
    from pilothouse.errors import ForbiddenError

    if not user.is_admin:
        raise ForbiddenError("changing the catalog needs an API key with admin scope")
    return user


UiAdmin = Annotated[UiUser, Depends(ui_admin)]
"""A route parameter receiving a logged-in admin."""


def render(request: Request, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    """Render a template (a page, or a fragment for htmx) with ``context``."""
    return templates.TemplateResponse(request, name, context, status_code=status_code)
