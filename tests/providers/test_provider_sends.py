"""A request leaves in one send: the provider transport coalesces its head and body.

httpcore writes a request's head and its body with two ``send`` calls;
the provider transport holds the head until the body (or the read of the
response) and sends them together (``providers/_pool.py``,
``CoalescingBackend``). The server here is a real asyncio server on
loopback, over plain TCP and over TLS (a certificate made for the test),
and the sends are counted where they reach the operating system:
``socket.socket.send``, the call asyncio's transports make.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pilothouse.providers._pool import ShardedTransport, provider_transport

pytestmark = pytest.mark.anyio


class _EchoServer:
    """Answers each request with its method, body length and the body's SHA-256.

    With ``close_after_answer`` it closes the connection after each answer
    without saying so (no ``Connection: close``), as a server whose idle
    timeout ran out does.
    """

    def __init__(self, *, close_after_answer: bool = False) -> None:
        self.connections = 0
        self.closed = 0
        self.close_after_answer = close_after_answer

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = sum(
                    int(line.split(":", 1)[1])
                    for line in lines
                    if line.lower().startswith("content-length:")
                )
                body = await reader.readexactly(length)
                answer = json.dumps(
                    {
                        "method": lines[0].split(" ", 1)[0],
                        "length": len(body),
                        "sha256": hashlib.sha256(body).hexdigest(),
                    }
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )
                await writer.drain()
                if self.close_after_answer:
                    return
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()
            self.closed += 1


class _Sends:
    """Counts ``send`` system calls made to one server port (the client's side)."""

    def __init__(self) -> None:
        self.port = 0
        self.count = 0


@pytest.fixture
def sends(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Sends]:
    counted = _Sends()
    original = socket.socket.send

    def send(self: socket.socket, data: Any, flags: int = 0) -> int:
        peer: Any = self.getpeername()
        if isinstance(peer, tuple) and peer[1] == counted.port:
            counted.count += 1
        return original(self, data, flags)

    monkeypatch.setattr(socket.socket, "send", send)
    yield counted


def _certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1: (certificate file, key file)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


def _expected(method: str, body: bytes) -> dict[str, Any]:
    return {"method": method, "length": len(body), "sha256": hashlib.sha256(body).hexdigest()}


async def test_each_request_leaves_in_one_send_on_a_kept_connection(sends: _Sends) -> None:
    server = _EchoServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    sends.port = listener.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{sends.port}/v1/chat/completions"
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    try:
        async with httpx2.AsyncClient(transport=provider_transport(10)) as client:
            for _ in range(3):
                response = await client.post(url, content=body)
                assert response.json() == _expected("POST", body)
            assert sends.count == 3
            # A request without a body: its head alone is sent when the response is read.
            response = await client.get(url)
            assert response.json() == _expected("GET", b"")
            assert sends.count == 4
    finally:
        listener.close()
    assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_not_reused(sends: _Sends) -> None:
    # The pool asks each idle connection whether it is readable (here: the
    # end of the stream the server's close left) before reusing it; the
    # coalescing stream answers that itself. A wrong "no" would send the next
    # request into the closed connection and fail it.
    server = _EchoServer(close_after_answer=True)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    sends.port = listener.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{sends.port}/v1/chat/completions"
    try:
        async with httpx2.AsyncClient(transport=provider_transport(10)) as client:
            for done in range(1, 4):
                assert (await client.post(url, content=b"{}")).json() == _expected("POST", b"{}")
                # The server has closed its side (on loopback the FIN is in
                # the client's socket once close returns) before the next request.
                with anyio.fail_after(5):
                    while server.closed < done:
                        await asyncio.sleep(0.005)
    finally:
        listener.close()
    assert server.connections == 3
    assert sends.count == 3


async def test_a_large_body_is_sent_whole_without_being_copied_into_the_head(
    sends: _Sends,
) -> None:
    server = _EchoServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    sends.port = listener.sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{sends.port}/v1/chat/completions"
    small, large = b"x" * (64 * 1024), bytes(range(256)) * 1024  # 64 KiB, 256 KiB
    try:
        async with httpx2.AsyncClient(transport=provider_transport(10)) as client:
            response = await client.post(url, content=small)
            assert response.json() == _expected("POST", small)
            assert sends.count == 1
            response = await client.post(url, content=large)
            assert response.json() == _expected("POST", large)
    finally:
        listener.close()
    # Above 64 KiB the head leaves first and the body after it, unjoined (a
    # send may also write only part of a large buffer, so at least two).
    assert sends.count >= 3


async def test_requests_over_tls_leave_in_one_send_from_sharded_pools_too(
    sends: _Sends, tmp_path: Path
) -> None:
    cert_file, key_file = _certificate(tmp_path)
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)
    server = _EchoServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=server_context)
    sends.port = listener.sockets[0].getsockname()[1]
    url = f"https://127.0.0.1:{sends.port}/v1/chat/completions"
    body = b'{"model": "m", "messages": []}'
    trusting = ssl.create_default_context(cafile=str(cert_file))
    sharded = ShardedTransport(max_connections=128, shards=2, ssl_context=trusting)
    try:
        async with httpx2.AsyncClient(transport=sharded) as client:
            response = await client.post(url, content=body)
            assert response.json() == _expected("POST", body)
            handshake = sends.count  # the TLS handshake's own sends
            for _ in range(3):
                response = await client.post(url, content=body)
                assert response.json() == _expected("POST", body)
            assert sends.count - handshake == 3
    finally:
        listener.close()
    assert server.connections == 1
