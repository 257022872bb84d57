"""Credential-like query parameters leave ``pilothouse serve`` masked, in spans and in logs.

A caller that puts its key in the URL (``?api_key=...``) must not find it in
clear in the spans the service exports nor in its log lines. ``pilothouse
serve`` runs as a subprocess with a real OTLP receiver (``otlp_receiver``)
as its span endpoint, once with JSON logs and once with uvicorn's text lines;
a request carries four credentials and one plain parameter in its query.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_serve import PILOTHOUSE, prepare_database
from otlp_receiver import otlp_receiver
from ports import free_port

pytestmark = [pytest.mark.real]

SECRETS = {
    "api_key": "s3cr3t-api-key-in-the-url",
    "token": "s3cr3t-token-in-the-url",
    "Access_Token": "s3cr3t-access-token-in-the-url",
    "password": "s3cr3t-password-in-the-url",
}
QUERY = "&".join(f"{name}={value}" for name, value in SECRETS.items()) + "&page=2"


def _serve(database_url: str, port: int, log: Path, env: dict[str, str], log_format: str) -> Any:
    with log.open("w") as out:
        return subprocess.Popen(
            [
                PILOTHOUSE,
                "--database-url",
                database_url,
                "serve",
                "--port",
                str(port),
                "--grace",
                "5",
                "--log-format",
                log_format,
                "--log-level",
                "info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
                "PILOTHOUSE_SECRETS_FILE": "",
                **env,
            },
        )


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_query_credentials_are_masked_in_exported_spans_and_in_log_lines(
    tmp_path: Path, log_format: str
) -> None:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'mask.db'}"
    key = prepare_database(database_url, tmp_path, "{}\n")
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    with otlp_receiver() as receiver:
        process = _serve(
            database_url,
            port,
            log,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_SERVICE_NAME": "pilothouse-mask-test",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
            log_format,
        )
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log.read_text()
                try:
                    if httpx.get(f"{root}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "pilothouse serve did not start in 60 s"
                time.sleep(0.2)
            answer = httpx.get(
                f"{root}/v1/catalog/actions?{QUERY}",
                headers={"Authorization": f"Bearer {key}"},
                timeout=30,
            )
            spans = receiver.wait_for(
                lambda spans: any(
                    s.kind == 2 and "/v1/catalog/actions" in str(s.attributes.get("url.path"))
                    for s in spans
                )
            )
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for value in SECRETS.values():
        assert value not in answer.text
    (request,) = [
        s for s in spans if s.kind == 2 and s.attributes.get("url.path") == "/v1/catalog/actions"
    ]
    assert request.attributes["url.query"] == (
        "api_key=***&token=***&Access_Token=***&password=***&page=2"
    )
    exported = repr(spans)
    lines = log.read_text()
    for value in SECRETS.values():
        assert value not in exported
        assert value not in lines
    # The access line is there, its query masked.
    assert "/v1/catalog/actions?api_key=***&token=***" in lines, lines
