"""DNS rebinding against the egress policy, with a real DNS server.

A ``dnslib`` DNS server on a loopback UDP port answers the egress policy's
questions (its resolver is pointed at it); two real OpenAI-compatible
upstreams listen on the same port, one on ``127.0.0.2`` (allowed by the
operator) and one on ``127.0.0.1`` (internal: refused). A turn of the
service's facade (``catalog_egress=True``, as ``pilothouse serve``) calls a
catalog provider by name:

- a name the DNS server answers with the allowed address while the system
  resolver (``/etc/hosts``) maps it to ``127.0.0.1`` reaches the allowed
  upstream only if the connection goes to the address the check saw (the
  pin): resolving again at connect time would reach the internal one;
- a name whose answer changes from allowed to internal after the write is
  refused at the call: the check runs again at every call;
- a name with one allowed and one internal address is refused: every
  address is checked.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from dnslib import QTYPE, RR, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ProcessStatus
from pilothouse.errors import CatalogValidationError
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.anyio]

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


@dataclass
class Answers(BaseResolver):
    """Scripted answers per name: the n-th question gets the n-th list (the last repeats)."""

    script: dict[str, list[list[str]]] = field(default_factory=lambda: {})
    asked: dict[str, int] = field(default_factory=lambda: {})

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        answers = self.script.get(name)
        if answers is not None and request.q.qtype == QTYPE.A:
            count = self.asked.get(name, 0)
            self.asked[name] = count + 1
            for address in answers[min(count, len(answers) - 1)]:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(address), ttl=0))
        return reply


@pytest.fixture
def dns() -> Iterator[tuple[Answers, int]]:
    answers = Answers()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    quiet = DNSLogger(logf=lambda _line: None)
    server = DNSServer(answers, port=port, address="127.0.0.1", logger=quiet)
    server.start_thread()
    try:
        yield answers, port
    finally:
        server.stop()
        server.server.server_close()


def resolver_at(port: int) -> Any:
    """The egress policy's resolver, asking the test's DNS server (one question per call)."""

    async def resolve(host: str, _port: int) -> list[_Address]:
        def ask() -> list[_Address]:
            raw = DNSRecord.question(host, "A").send("127.0.0.1", port, timeout=5)
            found = DNSRecord.parse(raw)
            return [ipaddress.ip_address(str(r.rdata)) for r in found.rr if r.rtype == QTYPE.A]

        return await anyio.to_thread.run_sync(ask)

    return resolve


@dataclass
class Upstreams:
    allowed: Upstream
    internal: Upstream
    port: int


@pytest.fixture
def upstreams() -> Iterator[Upstreams]:
    # One port on two loopback addresses: only the address tells them apart.
    for _ in range(20):
        with running_upstream("127.0.0.1") as internal:
            port = int(internal.base_url.rsplit(":", 1)[1].split("/")[0])
            try:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.2", port))
            except OSError:
                continue
            with running_upstream("127.0.0.2", port) as allowed:
                for up in (allowed, internal):
                    up.script(Reply(body=completion("from " + up.base_url.split("/")[2])))
                yield Upstreams(allowed, internal, port)
                return
    pytest.fail("no port free on both 127.0.0.1 and 127.0.0.2")


def catalog(host: str, port: int) -> dict[str, Any]:
    return {
        "providers": [
            {"code": "UP", "kind": "openai-compatible", "base_url": f"http://{host}:{port}/v1"}
        ],
        "models": [{"code": "UPMODEL", "provider": "UP", "model_name": "mock"}],
        "configurations": [{"code": "ONCE", "max_tokens": 64, "retry_count": 0}],
        "actions": [
            {
                "code": "ASK",
                "name": "Ask",
                "model": "UPMODEL",
                "configuration": "ONCE",
                "prompt": "Answer.",
                "ask_user": False,
            }
        ],
    }


@pytest.fixture
async def service(tmp_path: Path, dns: tuple[Answers, int]) -> Any:
    # The operator allows 127.0.0.2 only; 127.0.0.1 stays internal.
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'pin.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.2"],
    )
    async with Pilothouse(settings, catalog_egress=True) as ph:
        shared = ph._shared  # the resolver hook: private, for this test
        shared.egress = shared.egress.with_resolver(resolver_at(dns[1]))
        yield ph


async def test_dns_pinning_connects_to_the_checked_address_not_a_second_lookup(
    service: Pilothouse, dns: tuple[Answers, int], upstreams: Upstreams
) -> None:
    answers, _ = dns
    # The policy's resolver says 127.0.0.2; the system's (/etc/hosts) says 127.0.0.1.
    answers.script["localhost"] = [["127.0.0.2"]]
    assert socket.gethostbyname("localhost") == "127.0.0.1"
    await service.catalog.import_documents([catalog("localhost", upstreams.port)])

    result = await service.command.start_and_send("Hello", action="ASK")

    assert result.status is ProcessStatus.COMPLETED, result.error
    assert result.output == "from 127.0.0.2:" + str(upstreams.port)
    assert len(upstreams.allowed.requests) == 1
    assert upstreams.internal.requests == []
    # Resolved once at the write, once at the call: never again to connect.
    assert answers.asked["localhost"] == 2


async def test_dns_answer_changing_to_internal_after_the_write_is_refused_at_the_call(
    service: Pilothouse, dns: tuple[Answers, int], upstreams: Upstreams
) -> None:
    answers, _ = dns
    answers.script["rebind.test"] = [["127.0.0.2"], ["127.0.0.1"]]
    await service.catalog.import_documents([catalog("rebind.test", upstreams.port)])

    result = await service.command.start_and_send("Hello", action="ASK")

    assert result.status is ProcessStatus.FAILED
    assert upstreams.internal.requests == []
    assert upstreams.allowed.requests == []
    assert answers.asked["rebind.test"] == 2


async def test_dns_name_with_any_internal_address_is_refused_when_written(
    service: Pilothouse, dns: tuple[Answers, int], upstreams: Upstreams
) -> None:
    answers, _ = dns
    answers.script["mixed.test"] = [["127.0.0.2", "169.254.169.254"]]

    with pytest.raises(CatalogValidationError) as refused:
        await service.catalog.import_documents([catalog("mixed.test", upstreams.port)])

    (issue,) = refused.value.issues
    assert (issue.entity, issue.code, issue.field) == ("provider", "UP", "base_url")
    assert "mixed.test resolves to 169.254.169.254" in issue.rule
    assert "PILOTHOUSE_EGRESS_ALLOW" in issue.rule
    assert upstreams.allowed.requests == [] and upstreams.internal.requests == []
