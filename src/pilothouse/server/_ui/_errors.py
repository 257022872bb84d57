"""Errors as a browser reads them: an HTML page, or a fragment htmx swaps in.

The service answers every error as ``application/problem+json``; a person
who opens ``/catalog/actions/NOPE`` should not be shown JSON. A request for
one of the UI's own paths that asks for HTML (a page) gets an error page
with the same title and detail; one made by htmx (a fragment) gets the
notice fragment, which the page swaps in where the action happened. The
REST API and every other face keep their problem documents.
"""

from __future__ import annotations

__all__ = ["for_browser"]

import json
from typing import Any, cast

from fastapi import Request
from fastapi.responses import Response

from pilothouse.server._ui._base import render

_UI_PAGES = frozenset(
    {
        "/",
        "/login",
        "/logout",
        "/playground",
        "/catalog",
        "/compare",
        "/knowledge",
        "/memory",
        "/spend",
    }
)
_UI_PREFIXES = ("/catalog/", "/ui/", "/knowledge/")


def _is_ui(request: Request) -> bool:
    path = request.url.path
    return path in _UI_PAGES or path.startswith(_UI_PREFIXES)


def for_browser(request: Request, response: Response) -> Response:
    """Return ``response`` as HTML when a browser asked one of the UI's paths for a page.

    Args:
        request: the request that failed.
        response: its problem document (status 400 or more).

    Returns:
        An HTML page (a page request), the notice fragment (an htmx request),
        or ``response`` unchanged (anything else, a redirect included).
    """
    if response.status_code < 400 or not _is_ui(request):
        return response
    fragment = bool(request.headers.get("hx-request"))
    if not fragment and "text/html" not in request.headers.get("accept", ""):
        return response
    try:
        body: Any = json.loads(bytes(response.body))
    except ValueError:
        return response
    problem = cast("dict[str, Any]", body) if isinstance(body, dict) else {}
    title = str(problem.get("title") or "Error")
    detail = str(problem.get("detail") or "")
    raw_errors: Any = problem.get("errors") or []
    rules = [
        f"{e.get('field')}: {e.get('rule')}"
        for e in cast("list[dict[str, Any]]", raw_errors)
        if isinstance(e, dict) and e.get("field")  # pyright: ignore[reportUnnecessaryIsInstance]
    ]
    headers = {k: v for k, v in response.headers.items() if k.lower() in ("retry-after", "allow")}
    if fragment:
        text = detail if not rules else f"{detail} ({'; '.join(rules)})"
        html = render(request, "_notice.html", status_code=response.status_code, error=text)
    else:
        html = render(
            request,
            "error.html",
            status_code=response.status_code,
            status=response.status_code,
            title=title,
            detail=detail,
            rules=rules,
        )
    html.headers.update(headers)
    return html
