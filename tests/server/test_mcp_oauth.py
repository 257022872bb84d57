"""The MCP endpoint as an OAuth 2.1 resource server, against a minimal issuer on loopback.

The issuer is a FastAPI app publishing a JWKS of an RSA key made for the
test; tokens are JWTs signed with it (PyJWT). The client is the official
``mcp`` SDK with the token as its bearer; API keys keep working beside it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from jwt.algorithms import RSAAlgorithm
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import serve_on_loopback

from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

AUDIENCE = "http://pilothouse.test/mcp"


class Issuer:
    """A minimal authorization server: one signing key, its JWKS, tokens on demand."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.url = ""

    def app(self) -> FastAPI:
        app = FastAPI()
        public = RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)

        @app.get("/jwks.json")
        async def jwks() -> dict[str, Any]:
            return {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]}

        return app

    def token(
        self, *, scope: str, audience: str = AUDIENCE, expires: int = 300, **claims: Any
    ) -> str:
        now = int(time.time())
        body = {
            "iss": self.url,
            "sub": "ada@example.com",
            "aud": audience,
            "iat": now,
            "exp": now + expires,
            "scope": scope,
            **claims,
        }
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": "k1"})


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    made = Issuer()
    async with serve_on_loopback(made.app()) as url:
        made.url = url
        yield made


@pytest.fixture
def server_config(issuer: Issuer) -> ServerSettings:
    return ServerSettings(
        host="127.0.0.1",
        shutdown_grace_seconds=2.0,
        oauth_issuer=issuer.url,
        oauth_jwks_url=f"{issuer.url}/jwks.json",
        oauth_audience=AUDIENCE,
    )


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


@asynccontextmanager
async def connect(base_url: str, bearer: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            yield client


async def test_the_protected_resource_metadata_names_the_issuer(
    base_url: str, issuer: Issuer
) -> None:
    async with httpx.AsyncClient(base_url=base_url) as http:
        metadata = await http.get("/.well-known/oauth-protected-resource")
        refused = await http.post("/mcp", json={})
    assert metadata.status_code == 200
    assert metadata.json()["resource"] == AUDIENCE
    assert metadata.json()["authorization_servers"] == [issuer.url]
    assert refused.status_code == 401
    challenge = refused.headers["www-authenticate"]
    assert 'resource_metadata="http://' in challenge
    assert "/.well-known/oauth-protected-resource" in challenge


async def test_a_token_of_the_issuer_acts_for_its_tenant_with_its_allow_list(
    base_url: str,
    issuer: Issuer,
    scripted: ScriptedModel,
    api_key: str,
    server_state: ServerState,
) -> None:
    scripted.script.steps.append(Reply("hello from a token"))
    token = issuer.token(scope="pilothouse:tenant:default mcp:tool:action_ECHO")
    async with connect(base_url, token) as client:
        names = [t.name for t in (await client.list_tools()).tools]
        result = await client.call_tool("action_ECHO", {"message": "hi", "input": "x"})
    assert names == ["action_ECHO"]
    assert not result.is_error
    # Recorded like a key's call: the subject is the caller's name.
    assert result.meta is not None
    transcript = await server_state.pilothouse.query.get_transcript(
        result.meta["pilothouse/conversation_uuid"]
    )
    assert transcript.face == "mcp"
    assert transcript.caller_key_name == "ada@example.com"
    assert (transcript.caller_key_prefix or "").startswith("oauth:")
    assert len(transcript.caller_key_prefix or "") <= 32
    # API keys keep working beside tokens.
    async with connect(base_url, api_key) as client:
        assert len((await client.list_tools()).tools) > 1


@pytest.mark.parametrize(
    ("claims", "status"),
    [
        ({"audience": "http://elsewhere/mcp"}, 401),
        ({"expires": -60}, 401),
        ({"scope": "mcp:tool:*"}, 403),
        ({"scope": "pilothouse:tenant:default pilothouse:tenant:other"}, 403),
    ],
)
async def test_a_token_for_another_audience_expired_or_without_one_tenant_is_refused(
    base_url: str, issuer: Issuer, claims: dict[str, Any], status: int
) -> None:
    options: dict[str, Any] = {"scope": "pilothouse:tenant:default", **claims}
    token = issuer.token(**options)
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.post("/mcp", json=body, headers=headers)
    assert answer.status_code == status, answer.text
    assert token not in answer.text


async def test_a_token_signed_by_another_key_is_refused(base_url: str, issuer: Issuer) -> None:
    forger = Issuer()
    forger.url = issuer.url
    token = forger.token(scope="pilothouse:tenant:default")
    async with httpx.AsyncClient(base_url=base_url) as http:
        answer = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": f"Bearer {token}"},
        )
    assert answer.status_code == 401


def test_the_three_settings_go_together() -> None:
    with pytest.raises(ValueError, match="oauth_jwks_url, oauth_audience"):
        ServerSettings(oauth_issuer="https://auth.example")
