"""Each request's ids for its log lines: request id, conversation id, trace context.

:class:`RequestContextMiddleware` runs outermost, so every log line written
while a request is served, the access line included, carries them (see
``pilothouse.api.bind_request``):

- the **request id** is the caller's ``X-Request-ID`` when it is a plain
  token (letters, digits, ``.``, ``_``, ``-``; at most 128), else a new
  one; the response echoes it in ``X-Request-ID``, so a caller can quote it;
- the **conversation id** is the one the path names
  (``/v1/conversations/{uuid}/...``); the run loop names the conversation of
  a turn that starts one;
- with tracing on, the trace id is the current span's: FastAPI's native
  telemetry makes each request a ``SERVER`` span through the global tracer
  provider (a child of the caller's W3C ``traceparent``, when sent), the
  turn's spans nest under it, and this middleware runs inside it.
"""

from __future__ import annotations

__all__ = ["RequestContextMiddleware"]

import re
import uuid
from typing import TYPE_CHECKING, Final

from pilothouse.api import bind_request

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

_TOKEN: Final = re.compile(r"[A-Za-z0-9._\-]{1,128}")
_CONVERSATION_PATH: Final = re.compile(
    r"/v1/conversations/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
)
HEADER: Final = "x-request-id"


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


class RequestContextMiddleware:
    """Bind the request's ids for its log lines; echo ``X-Request-ID``.

    Args:
        app: the wrapped application.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = _header(scope, HEADER.encode())
        request_id = given if given is not None and _TOKEN.fullmatch(given) else uuid.uuid4().hex
        found = _CONVERSATION_PATH.match(str(scope.get("path", "")))
        reset = bind_request(request_id, found.group(1).lower() if found else None)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", ()))
                headers.append((HEADER.encode(), request_id.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            reset()
