"""The egress policy judges an IPv6 address that carries an IPv4 address by the IPv4 inside."""

from __future__ import annotations

import pytest

from pilothouse.errors import InvalidFieldError
from pilothouse.providers._egress import EgressPolicy

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "address",
    [
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "64:ff9b::a00:5",  # NAT64 of 10.0.0.5
        "64:ff9b:1::808:808",  # local-use NAT64: the operator's own networks
        "2002:a9fe:a9fe::",  # 6to4 of 169.254.169.254
        "2002:c0a8:101::1",  # 6to4 of 192.168.1.1
        "::a9fe:a9fe",  # IPv4-compatible 169.254.169.254
        "::7f00:1",  # IPv4-compatible 127.0.0.1
        "::ffff:a9fe:a9fe",  # IPv4-mapped
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo, client 192.0.2.45
        "::1",
    ],
)
async def test_an_ipv6_address_carrying_a_private_ipv4_is_refused_naming_it(address: str) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        await EgressPolicy().check(f"http://[{address}]/", "base_url")
    assert refused.value.rule.startswith(f"{address} ")
    assert "is a private, local or reserved address" in refused.value.rule


async def test_the_refusal_names_the_ipv4_address_inside() -> None:
    with pytest.raises(InvalidFieldError) as refused:
        await EgressPolicy().check("http://[64:ff9b::a9fe:a9fe]/", "base_url")
    assert refused.value.rule.startswith(
        "64:ff9b::a9fe:a9fe (which carries 169.254.169.254) is a private, local or reserved"
    )


@pytest.mark.parametrize(
    "address", ["64:ff9b::808:808", "2002:808:808::1", "::ffff:808:808", "2606:4700::1111"]
)
async def test_an_ipv6_address_carrying_a_public_ipv4_passes(address: str) -> None:
    await EgressPolicy().check(f"http://[{address}]/", "base_url")


async def test_the_operator_allows_an_embedded_address_by_its_ipv4_or_ipv6_network() -> None:
    await EgressPolicy.parse(["169.254.169.254"]).check("http://[64:ff9b::a9fe:a9fe]/", "url")
    await EgressPolicy.parse(["2002::/16"]).check("http://[2002:a9fe:a9fe::]/", "url")
    await EgressPolicy.parse(["64:ff9b:1::/48"]).check("http://[64:ff9b:1::a00:1]/", "url")
