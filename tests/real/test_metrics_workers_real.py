"""One scrape of ``/metrics`` sees every worker of ``pilothouse serve --workers 2``.

A real ``serve`` with two worker processes and a scripted upstream on
loopback: turns are sent over REST on new connections (the kernel hands
them to either worker), then ``/metrics`` is scraped several times, each on
a new connection too. Every scrape, whichever worker answers it, counts
every turn and every request of the process group.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream
from live_serve import ServeProcess, prepare_database
from ports import free_port

pytestmark = [pytest.mark.real]

CATALOG = """\
providers:
  - code: MWP
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: MWM
    provider: MWP
    model_name: mock
configurations:
  - code: MWC
    max_tokens: 16
    retry_count: 0
actions:
  - code: MWTALK
    name: Talk
    model: MWM
    configuration: MWC
    prompt: Answer.
    ask_user: false
"""
TURNS = 8
SCRAPES = 10


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        up.script(Reply(body=completion("counted")))
        yield up


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one series of a Prometheus text exposition (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        series, _, value = line.rpartition(" ")
        found = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return 0.0


def test_every_scrape_counts_the_turns_of_both_workers(tmp_path: Path, upstream: Upstream) -> None:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'workers.db'}"
    key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    # A sample file left by an earlier run is not counted again.
    (metrics_dir / "counter_4242.db").write_bytes(b"\0" * 16)
    port = free_port()
    server = ServeProcess(
        database_url,
        tmp_path / "serve.log",
        port,
        workers=2,
        env={"PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1", "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)},
    )
    server.start()
    try:
        headers = {"Authorization": f"Bearer {key}"}
        for n in range(TURNS):
            # A new connection per request: either worker may take it.
            with httpx.Client(base_url=f"{server.root}/v1", headers=headers, timeout=30) as http:
                started = http.post("/conversations", json={"action": "MWTALK"})
                assert started.status_code == 201, started.text
                uuid = started.json()["uuid"]
                sent = http.post(f"/conversations/{uuid}/messages", json={"text": f"q{n}"})
                assert sent.status_code == 200, sent.text
                assert sent.json()["status"] == "CO"
        scrapes = [httpx.get(f"{server.root}/metrics", timeout=10) for _ in range(SCRAPES)]
    finally:
        server.stop()
    for scrape in scrapes:
        assert scrape.status_code == 200, scrape.text
        text = scrape.text
        assert _sample(text, "pilothouse_turns_total", tenant="default", status="CO") == TURNS
        assert (
            _sample(
                text,
                "pilothouse_http_requests_total",
                method="POST",
                route="/v1/conversations/{uuid}/messages",
                status="200",
            )
            == TURNS
        )
        assert _sample(text, "pilothouse_action_turns_total", action="MWTALK", status="CO") == TURNS
    assert "counter_4242.db" not in {p.name for p in metrics_dir.iterdir()}
    log = (tmp_path / "serve.log").read_text()
    assert f"write their samples to {metrics_dir}" in log
