"""Read a JSON body sent without a JSON ``Content-Type`` as JSON.

``curl -d '{...}'`` labels its body ``application/x-www-form-urlencoded``;
other clients send none. The API's routes read JSON only, so such a request
met a validation error about "body" that says nothing of the header. This
middleware relabels the body ``application/json`` when it parses as a JSON
object or array.

Only requests that carry an ``Authorization`` header are relabelled: a
browser adds that header to a cross-site request only after a CORS
preflight the server must allow, so a form on another site (which may post
``application/x-www-form-urlencoded`` or ``text/plain`` bodies without a
preflight) cannot reach a JSON route this way. The browser UI's own forms
send no ``Authorization`` header and are never touched.
"""

from __future__ import annotations

__all__ = ["JsonBodyMiddleware"]

import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_RELABELLED = frozenset({b"", b"application/x-www-form-urlencoded", b"text/plain"})
"""Media types a JSON body arrives with from curl ``-d`` and header-less clients."""

_METHODS = frozenset({"POST", "PUT", "PATCH"})


def _media_type(value: bytes) -> bytes:
    return value.split(b";", 1)[0].strip().lower()


class JsonBodyMiddleware:
    """Relabel an authorized request's unlabelled JSON body as ``application/json``.

    Args:
        app: the wrapped application.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in _METHODS:
            await self.app(scope, receive, send)
            return
        headers: list[tuple[bytes, bytes]] = list(scope.get("headers", []))
        names = {name for name, _ in headers}
        content_type = next((v for n, v in headers if n == b"content-type"), b"")
        if b"authorization" not in names or _media_type(content_type) not in _RELABELLED:
            await self.app(scope, receive, send)
            return
        # The body is already bounded by the body size limit outside.
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                # The client went away: nothing to read, pass it on.
                await self.app(scope, _replay([], message, receive), send)
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if _is_json(body):
            kept = [(n, v) for n, v in headers if n != b"content-type"]
            scope = {**scope, "headers": [*kept, (b"content-type", b"application/json")]}
        await self.app(scope, _replay(chunks, None, receive), send)


def _is_json(body: bytes) -> bool:
    text = body.strip()
    if not text.startswith((b"{", b"[")):
        return False
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _replay(chunks: list[bytes], first: Message | None, receive: Receive) -> Receive:
    """A ``receive`` that gives the buffered body (or ``first``), then the client's own."""
    pending: list[Message] = [
        {"type": "http.request", "body": b"".join(chunks), "more_body": False}
    ]
    if first is not None:
        pending = [first]

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed
