"""The MCP endpoint as an OAuth 2.1 resource server (MCP authorization, RFC 9728).

When the operator names an authorization server (``oauth_issuer``, its
``oauth_jwks_url`` and this service's ``oauth_audience``), ``/mcp`` and the
SSE transport also accept a bearer access token that server issued: a JWT
signed by a key of its JWKS, whose ``iss`` is the issuer, whose ``aud``
holds the audience and which has not expired. Its ``scope`` claim says
what it may do:

- ``pilothouse:tenant:<name>``: the tenant it acts for (exactly one);
- ``mcp:tool:<glob>``: a tool allow-list, as an API key's scopes.

API keys keep working beside tokens. ``GET
/.well-known/oauth-protected-resource`` publishes the metadata clients use
to find the authorization server, and a refused MCP request's
``WWW-Authenticate`` names it.
"""

from __future__ import annotations

__all__ = ["OAuthToken", "OAuthVerifier", "TENANT_SCOPE"]

from dataclasses import dataclass
from typing import Any

import anyio

from pilothouse.errors import ForbiddenError, UnauthorizedError

TENANT_SCOPE = "pilothouse:tenant:"
"""The scope prefix naming the tenant a token acts for."""

_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256"]


@dataclass(frozen=True)
class OAuthToken:
    """A verified access token.

    Attributes:
        tenant: the tenant it acts for.
        subject: its ``sub`` (who), or its client id.
        scopes: its scopes (the ``mcp:tool:`` ones are its allow-list).
    """

    tenant: str
    subject: str
    scopes: tuple[str, ...]


class OAuthVerifier:
    """Verifies bearer tokens of one authorization server against its JWKS.

    Args:
        issuer: the authorization server's issuer identifier (``iss``).
        jwks_url: where its signing keys are published.
        audience: this resource's identifier (``aud`` must hold it).
    """

    def __init__(self, issuer: str, jwks_url: str, audience: str) -> None:
        from jwt import PyJWKClient

        self.issuer = issuer
        self.audience = audience
        # Keys are fetched on first use and cached; an unknown key id
        # refetches (a rotated key), at most once per token.
        self._keys = PyJWKClient(jwks_url, cache_keys=True, lifespan=300)

    def metadata(self, scopes: list[str] | None = None) -> dict[str, Any]:
        """The protected-resource metadata (RFC 9728) of the MCP endpoint."""
        return {
            "resource": self.audience,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
            "scopes_supported": scopes or [f"{TENANT_SCOPE}<tenant>", "mcp:tool:<glob>"],
            "resource_name": "pilothouse MCP server",
        }

    async def verify(self, token: str) -> OAuthToken:
        """Verify ``token`` and read its tenant and scopes.

        Raises:
            UnauthorizedError: the token is not one this issuer signed for
                this audience, or it expired.
            ForbiddenError: it names no tenant, or more than one.
        """
        import jwt

        try:
            # The key fetch is blocking I/O (urllib): off the event loop.
            key = await anyio.to_thread.run_sync(self._keys.get_signing_key_from_jwt, token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=_ALGORITHMS,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            # The library's words say which check failed, never the token.
            raise UnauthorizedError(f"the access token is not accepted: {exc}") from None
        scope = claims.get("scope")
        scopes = tuple(str(scope).split()) if isinstance(scope, str) else ()
        tenants = [s.removeprefix(TENANT_SCOPE) for s in scopes if s.startswith(TENANT_SCOPE)]
        if len(tenants) != 1 or not tenants[0]:
            raise ForbiddenError(
                f"the access token must carry exactly one '{TENANT_SCOPE}<name>' scope, "
                f"not {len(tenants)}"
            )
        subject = claims.get("sub") or claims.get("client_id") or "unknown"
        return OAuthToken(tenants[0], str(subject), scopes)
