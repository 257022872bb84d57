"""Budget alerts reach a real HTTP receiver on loopback, once per threshold per period.

The receiver is a plain ``http.server`` on 127.0.0.1 started by the test.
With the egress policy applied (as the HTTP service applies it), the
loopback address is refused unless the deployment allows it: the alert is
then logged as not delivered and the turns go on.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import ProcessStatus

pytestmark = [pytest.mark.real, pytest.mark.anyio]


class Receiver:
    """What the loopback webhook received, one JSON body per POST."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    received = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            received.bodies.append(json.loads(self.rfile.read(length)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received
    finally:
        server.shutdown()
        server.server_close()


def catalog() -> CatalogBuilder:
    # $100 per million tokens: each turn spends 20 tokens, $0.002 of $0.01.
    return (
        CatalogBuilder()
        .model("PRICED", provider="TEST", model_name="priced", input_price=100, output_price=100)
        .configuration("SMAL", max_tokens=10, retry_delay=0)
        .action("ASK", prompt="Answer briefly.", model="PRICED", configuration="SMAL")
        .add(
            "budgets",
            code="WATCH",
            money="0.01",
            period="day",
            on_limit="alert",
            thresholds=[50, 80, 100],
        )
    )


async def six_turns(ph: Pilothouse) -> list[str]:
    uuids: list[str] = []
    for _ in range(6):
        result = await ph.command.start_and_send("Hi", action="ASK")
        assert result.status is ProcessStatus.COMPLETED, result.error
        uuids.append(result.conversation_uuid)
    return uuids


async def test_each_threshold_is_posted_once_to_the_webhook(
    tmp_path: Path, receiver: tuple[str, Receiver]
) -> None:
    url, received = receiver
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}",
        secrets_file=None,
        budget_alert_webhook=url,
        egress_allow=["127.0.0.1"],
    )
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 6)
    async with Pilothouse(settings, model=model, catalog_egress=True) as ph:
        await catalog().import_into(ph)
        uuids = await six_turns(ph)
    # 50 % after the 3rd turn, 80 % after the 4th, 100 % after the 5th; the
    # 6th (120 %) crosses nothing new in this period.
    assert [body["threshold"] for body in received.bodies] == [50, 80, 100]
    first = received.bodies[0]
    assert first["type"] == "budget.threshold" and first["tenant"] == "default"
    assert first["budget"] == "WATCH" and first["scope"] == "tenant"
    assert first["subject"] == "*" and first["used_percent"] == 60.0
    assert [body["conversation_uuid"] for body in received.bodies] == uuids[2:5]


async def test_the_egress_policy_refuses_a_webhook_it_does_not_allow(
    tmp_path: Path, receiver: tuple[str, Receiver], caplog: pytest.LogCaptureFixture
) -> None:
    url, received = receiver
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}",
        secrets_file=None,
        budget_alert_webhook=url,
    )
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 6)
    with caplog.at_level(logging.WARNING, logger="pilothouse.runtime._budgetalerts"):
        async with Pilothouse(settings, model=model, catalog_egress=True) as ph:
            await catalog().import_into(ph)
            uuids = await six_turns(ph)
            timeline = (await ph.query.get_transcript(uuids[2])).timeline
    assert received.bodies == []
    refused = [r.getMessage() for r in caplog.records if "not delivered" in r.getMessage()]
    assert len(refused) == 3 and all("127.0.0.1" in line for line in refused)
    # The alert itself still stands on the turn's timeline.
    assert [e.data["threshold"] for e in timeline if e.kind.value == "budget"] == [50]


def test_a_webhook_that_is_not_http_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="http:// or https://"):
        Settings(budget_alert_webhook="ftp://alerts.example/hook", secrets_file=None)
