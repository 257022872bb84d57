"""IPv6 addresses that carry an IPv4 address are judged by the IPv4 address inside.

A NAT64 translator (``64:ff9b::/96``), a 6to4 relay (``2002::/16``) or a host
that routes IPv4-compatible addresses (``::a.b.c.d``) delivers a connection
to the IPv4 address embedded in the IPv6 one: ``[64:ff9b::a9fe:a9fe]`` is the
cloud metadata endpoint ``169.254.169.254``. The egress policy must refuse
them as it refuses the IPv4 address.

The tests stand a real HTTP server on loopback in for the internal target,
and put a translator in the path the way a NAT64 gateway sits in a network:
the pinned transport's inner transport forwards whatever reaches it, over a
real TCP connection, to the stand-in. A request the policy lets through
therefore really connects to loopback; a refused one never reaches the
translator, and the stand-in counts no connection. Nothing is sent anywhere
but loopback.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI

from pilothouse.providers._egress import EgressPolicy, EgressRefusal
from pilothouse.providers._egress_transport import PinnedHttpxTransport, PinnedTransport
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.anyio]

METADATA_URLS = [
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[::a9fe:a9fe]/",
]
"""169.254.169.254 (the cloud metadata endpoint) in NAT64, 6to4 and IPv4-compatible form."""

LOOPBACK_FORMS = [
    "64:ff9b::7f00:1",  # NAT64, well-known prefix
    "64:ff9b:1::7f00:1",  # NAT64, local-use prefix
    "2002:7f00:1::",  # 6to4
    "::7f00:1",  # IPv4-compatible
    "::ffff:7f00:1",  # IPv4-mapped
]
"""127.0.0.1 inside IPv6."""


@dataclass
class StandIn:
    """A real HTTP server on loopback, counting the connections it accepts."""

    port: int
    connections: list[tuple[str, int]] = field(default_factory=lambda: [])


@pytest.fixture
def stand_in() -> Iterator[StandIn]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"iam": "instance-credentials"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    class Counting(ThreadingHTTPServer):
        def get_request(self) -> tuple[socket.socket, Any]:
            accepted = super().get_request()
            found.connections.append(accepted[1])
            return accepted

    server = Counting(("127.0.0.1", 0), Handler)
    found = StandIn(int(server.server_address[1]))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()


@dataclass
class Translator:
    """What a NAT64 gateway does: the pinned request goes on to the stand-in, really."""

    port: int
    asked: list[str] = field(default_factory=lambda: [])

    def httpx(self) -> httpx.AsyncBaseTransport:
        translator = self

        class Forward(httpx.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                translator.asked.append(request.url.host)
                url = request.url.copy_with(host="127.0.0.1", port=translator.port)
                async with httpx.AsyncClient() as real:
                    answer = await real.get(str(url))
                return httpx.Response(answer.status_code, content=answer.content)

        return Forward()

    def httpx2(self) -> httpx2.AsyncBaseTransport:
        translator = self

        class Forward(httpx2.AsyncBaseTransport):
            async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
                translator.asked.append(request.url.host)
                url = request.url.copy_with(host="127.0.0.1", port=translator.port)
                async with httpx2.AsyncClient() as real:
                    answer = await real.get(str(url))
                return httpx2.Response(answer.status_code, content=answer.content)

        return Forward()


async def _fetch(stack: str, translator: Translator, url: str) -> Any:
    policy = EgressPolicy()
    if stack == "httpx":
        async with httpx.AsyncClient(
            transport=PinnedHttpxTransport(policy, translator.httpx)
        ) as client:
            return await client.get(url)
    async with httpx2.AsyncClient(transport=PinnedTransport(translator.httpx2, policy)) as client:
        return await client.get(url)


@pytest.mark.parametrize("stack", ["httpx", "httpx2"])
@pytest.mark.parametrize("url", METADATA_URLS)
async def test_the_metadata_endpoint_inside_ipv6_is_refused_before_any_connection(
    stand_in: StandIn, stack: str, url: str
) -> None:
    translator = Translator(stand_in.port)

    with pytest.raises((httpx.ConnectError, httpx2.ConnectError)) as refused:
        await _fetch(stack, translator, url)

    assert isinstance(refused.value, EgressRefusal)
    assert "private, local or reserved" in str(refused.value)
    assert translator.asked == [] and stand_in.connections == []


@pytest.mark.parametrize("stack", ["httpx", "httpx2"])
@pytest.mark.parametrize("address", LOOPBACK_FORMS)
async def test_loopback_inside_ipv6_never_reaches_the_loopback_server(
    stand_in: StandIn, stack: str, address: str
) -> None:
    translator = Translator(stand_in.port)

    with pytest.raises((httpx.ConnectError, httpx2.ConnectError)) as refused:
        await _fetch(stack, translator, f"http://[{address}]:{stand_in.port}/latest/meta-data")

    assert isinstance(refused.value, EgressRefusal)
    assert translator.asked == [] and stand_in.connections == []


async def test_the_translator_really_reaches_the_stand_in_when_the_operator_allows_it(
    stand_in: StandIn,
) -> None:
    # The same path, allowed: the stand-in is reached, so a refusal above is
    # the policy's and not a path that could not connect anyway.
    translator = Translator(stand_in.port)
    policy = EgressPolicy.parse(["64:ff9b::/96"])
    async with httpx.AsyncClient(
        transport=PinnedHttpxTransport(policy, translator.httpx)
    ) as client:
        answer = await client.get(f"http://[64:ff9b::7f00:1]:{stand_in.port}/")

    assert answer.status_code == 200 and b"instance-credentials" in answer.content
    assert translator.asked == ["64:ff9b::7f00:1"] and len(stand_in.connections) == 1


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'egress6.db'}", secrets_file=None
    )
    state = ServerState(settings, server=ServerSettings(host="127.0.0.1"))
    await state.open()
    try:
        key, _ = await state.pilothouse.keys.create(tenant="acme", name="acme", admin=True)
        app: FastAPI = create_app(settings, state=state)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver"
            ) as http,
        ):
            yield http, key
    finally:
        await state.aclose()


@pytest.mark.parametrize("url", METADATA_URLS)
async def test_a_tenant_cannot_write_a_provider_at_the_metadata_endpoint_inside_ipv6(
    service: tuple[httpx.AsyncClient, str], url: str
) -> None:
    http, key = service
    document = {"code": "META", "kind": "openai-compatible", "base_url": url}

    refused = await http.post(
        "/v1/catalog/providers", json=document, headers={"Authorization": f"Bearer {key}"}
    )

    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["errors"]
    assert error["field"] == "base_url"
    assert "private, local or reserved address" in error["rule"]
    missing = await http.get(
        "/v1/catalog/providers/META", headers={"Authorization": f"Bearer {key}"}
    )
    assert missing.status_code == 404
