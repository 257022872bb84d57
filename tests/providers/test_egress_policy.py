"""The egress policy's per-tenant lists and its pinned transports."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
import httpx2
import pytest

from pilothouse.catalog._enums import McpTransport
from pilothouse.errors import InvalidFieldError
from pilothouse.mcp import McpClientConfig, McpClientPool, McpUnavailableError
from pilothouse.providers._egress import EgressPolicy, EgressRefusal, current_egress
from pilothouse.providers._egress_transport import PinnedHttpxTransport, PinnedTransport
from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def answering(*addresses: str):
    async def resolve(host: str, port: int) -> list[_Address]:
        return [ipaddress.ip_address(a) for a in addresses]

    return resolve


def test_egress_tenants_setting_reads_json_and_refuses_bad_entries_naming_the_tenant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "PILOTHOUSE_EGRESS_TENANTS", '{"acme": ["10.1.0.0/16", "crm.acme.internal"]}'
    )
    assert Settings().egress_tenants == {"acme": ["10.1.0.0/16", "crm.acme.internal"]}

    monkeypatch.setenv("PILOTHOUSE_EGRESS_TENANTS", '{"acme": ["10.1.0.0/99"]}')
    with pytest.raises(ValueError, match=r"egress_tenants\['acme'\]: '10.1.0.0/99'"):
        Settings()


async def test_tenant_allow_list_applies_to_that_tenant_only() -> None:
    policy = EgressPolicy.parse(["10.20.0.0/16"], {"acme": ["10.1.0.0/16"], "beta": ["x.internal"]})

    acme, beta, other = (policy.for_tenant(t) for t in ("acme", "beta", "other"))

    await acme.check("http://10.1.2.3/v1", "base_url")
    await acme.check("http://10.20.0.1/v1", "base_url")
    await beta.check("http://x.internal/v1", "base_url")
    with pytest.raises(InvalidFieldError, match="PILOTHOUSE_EGRESS_TENANTS"):
        await beta.check("http://10.1.2.3/v1", "base_url")
    with pytest.raises(InvalidFieldError):
        await other.check("http://10.1.2.3/v1", "base_url")
    with pytest.raises(InvalidFieldError):
        await acme.check("http://x.internal/v1", "base_url")


async def test_pinned_transport_sends_to_the_checked_address_keeping_host_and_sni() -> None:
    seen: list[httpx2.Request] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, text="ok")

    policy = EgressPolicy().with_resolver(answering("93.184.216.34"))
    transport = PinnedTransport(lambda: httpx2.MockTransport(handler), policy)
    async with httpx2.AsyncClient(transport=transport) as client:
        answered = await client.get("https://models.example.com:8443/v1/models")

    assert answered.text == "ok"
    (request,) = seen
    assert request.url.host == "93.184.216.34" and request.url.port == 8443
    assert request.headers["host"] == "models.example.com:8443"
    assert request.extensions["sni_hostname"] == "models.example.com"


async def test_pinned_transport_refuses_before_sending_under_the_turns_tenant_policy() -> None:
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200)

    policy = EgressPolicy.parse([], {"acme": ["10.1.0.0/16"]}).with_resolver(answering("10.1.0.7"))
    transport = PinnedHttpxTransport(policy, lambda: httpx.MockTransport(handler))
    async with httpx.AsyncClient(transport=transport) as client:
        # Outside a turn: the deployment's policy, which refuses it.
        with pytest.raises(httpx.ConnectError) as refused:
            await client.get("http://crm.acme.test/api")
        assert isinstance(refused.value, EgressRefusal)
        assert "crm.acme.test resolves to 10.1.0.7" in str(refused.value)
        # In acme's turn: acme's list allows it.
        token = current_egress.set(policy.for_tenant("acme"))
        try:
            assert (await client.get("http://crm.acme.test/api")).status_code == 200
        finally:
            current_egress.reset(token)
        # In beta's turn: refused again.
        token = current_egress.set(policy.for_tenant("beta"))
        try:
            with pytest.raises(httpx.ConnectError):
                await client.get("http://crm.acme.test/api")
        finally:
            current_egress.reset(token)
    assert [r.url.host for r in sent] == ["10.1.0.7"]


def _pinned_client(stack: str, policy: EgressPolicy, sent: list[Any], made: list[str]) -> Any:
    """A client of ``stack`` over its pinned transport, recording what reaches the wire."""
    http: Any = httpx if stack == "httpx" else httpx2

    def handler(request: Any) -> Any:
        sent.append(request)
        return http.Response(200, text="ok")

    def make() -> Any:
        made.append(stack)
        return http.MockTransport(handler)

    if stack == "httpx":
        return httpx.AsyncClient(transport=PinnedHttpxTransport(policy, make))
    return httpx2.AsyncClient(transport=PinnedTransport(make, policy))


@pytest.mark.parametrize("stack", ["httpx", "httpx2"])
async def test_both_stacks_pin_refuse_and_pool_per_host_name(stack: str) -> None:
    # The two transports share one pinning step: each stack must still send
    # to the checked address, refuse with its own ConnectError before
    # sending, and keep one inner transport per host name.
    http: Any = httpx if stack == "httpx" else httpx2
    sent: list[Any] = []
    made: list[str] = []
    policy = EgressPolicy().with_resolver(answering("93.184.216.34"))
    async with _pinned_client(stack, policy, sent, made) as client:
        assert (await client.get("https://a.example.com/v1")).text == "ok"
        assert (await client.get("https://a.example.com/v2")).text == "ok"
        assert (await client.get("http://b.example.com:8080/v1")).text == "ok"
    assert [r.url.host for r in sent] == ["93.184.216.34"] * 3
    assert [r.headers["host"] for r in sent] == [
        "a.example.com",
        "a.example.com",
        "b.example.com:8080",
    ]
    assert sent[0].extensions["sni_hostname"] == "a.example.com"
    assert "sni_hostname" not in sent[2].extensions
    assert made == [stack, stack]

    sent.clear()
    private = EgressPolicy().with_resolver(answering("169.254.169.254"))
    async with _pinned_client(stack, private, sent, made) as client:
        with pytest.raises(http.ConnectError) as refused:
            await client.get("http://metadata.example.com/latest")
    assert isinstance(refused.value, EgressRefusal)
    assert "egress refused" in str(refused.value)
    assert sent == []


@pytest.mark.parametrize("transport", [McpTransport.STREAMABLE_HTTP, McpTransport.SSE])
async def test_mcp_client_session_outside_the_policy_is_refused_before_connecting(
    transport: McpTransport,
) -> None:
    config = McpClientConfig(
        name="inside",
        transport=transport,
        url="http://169.254.169.254/mcp",
        egress=EgressPolicy().for_tenant("beta"),
    )
    async with McpClientPool() as pool:
        with pytest.raises(McpUnavailableError, match=r"169\.254\.169\.254 is a private"):
            await pool.tools(config)
    # Sessions are keyed per tenant: one tenant's session never serves another.
    other = McpClientConfig(
        name="inside",
        transport=transport,
        url="http://169.254.169.254/mcp",
        egress=EgressPolicy().for_tenant("acme"),
    )
    assert other.key != config.key
