"""No secret ever leaves the service: not in a response, a header or a log line.

Planted values: a provider API key resolved from the environment through
``@secrets(...)``, a provider header value resolved the same way, an API key
of the service, and a confidential header a client sends. A fake provider
on loopback answers 401 quoting the key and header it received (as real
vendors do), which tempts every layer to echo them. Every response body and
header, and every log record captured at DEBUG, is then searched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from server_helpers import auth, serve_on_loopback

from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import allow_model_requests

pytestmark = pytest.mark.anyio

PROVIDER_KEY = "sk-planted-provider-key-7f3a9c1e5b"
HEADER_SECRET = "planted-header-secret-2d8e4b6a0c"
CLIENT_HEADER_SECRET = "planted-client-header-9b1c3d5e7f"


@pytest.fixture(autouse=True)
def real_model_requests() -> Iterator[None]:
    """Turns go to the leaky provider for real: allowed here, blocked in the rest of the suite."""
    with allow_model_requests():
        yield


def leaky_provider() -> FastAPI:
    provider = FastAPI()

    @provider.post("/v1/chat/completions")
    async def refuse(request: Request) -> JSONResponse:
        echoed = f"{request.headers.get('authorization')} {request.headers.get('x-api-token')}"
        return JSONResponse(
            {
                "error": {
                    "message": f"Incorrect API key provided: {echoed}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
            status_code=401,
        )

    return provider


def catalog(base_url: str) -> dict[str, Any]:
    return {
        "providers": [
            {
                "code": "LEAK",
                "kind": "openai",
                "base_url": f"{base_url}/v1",
                "api_key": "@secrets(PH_PLANTED_PROVIDER_KEY)",
                "headers": {"X-Api-Token": "@secrets(PH_PLANTED_HEADER)"},
            }
        ],
        "models": [{"code": "LEAKYM", "provider": "LEAK", "model_name": "gpt-planted"}],
        "configurations": [{"code": "NORT", "max_tokens": 16, "retry_count": 0, "retry_delay": 0}],
        "actions": [
            {
                "code": "LEAKACT",
                "name": "Leak test",
                "model": "LEAKYM",
                "configuration": "NORT",
                "prompt": "Answer: {input}",
            }
        ],
    }


class Recorder:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.outputs: list[str] = []

    async def __call__(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        response = await self.client.request(method, url, **kwargs)
        self.outputs.append(response.text)
        self.outputs.extend(f"{k}: {v}" for k, v in response.headers.items())
        return response


async def exercise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> tuple[list[str], list[str], str]:
    """Run every route against the leaky provider; return outputs, log lines and the API key."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("PH_PLANTED_PROVIDER_KEY", PROVIDER_KEY)
    monkeypatch.setenv("PH_PLANTED_HEADER", HEADER_SECRET)
    # The leaky provider is on loopback: the operator allows it (egress policy).
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 's.db'}",
        secrets_file=None,
        # The operator maps the two variables to the tenant (docs/security.md#secrets).
        secrets_env={"default": ["PH_PLANTED_PROVIDER_KEY", "PH_PLANTED_HEADER"]},
        egress_allow=["127.0.0.1"],
    )
    # No scripted model: turns go to the (leaky) provider for real.
    state = ServerState(settings, server=ServerSettings(host="127.0.0.1"))
    await state.open()
    admin, _ = await state.pilothouse.keys.create(name="admin", admin=True)
    app = create_app(settings, state=state)
    try:
        async with (
            serve_on_loopback(leaky_provider()) as provider_url,
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver"
            ) as http,
        ):
            call = Recorder(http)
            headers = {**auth(admin), "X-Api-Token": CLIENT_HEADER_SECRET}
            imported = await call("PUT", "/v1/catalog", json=catalog(provider_url), headers=headers)
            assert imported.status_code == 200, imported.text
            started = await call(
                "POST", "/v1/conversations", json={"action": "LEAKACT"}, headers=headers
            )
            uuid = started.json()["uuid"]
            failed = await call(
                "POST", f"/v1/conversations/{uuid}/messages", json={"text": "hi"}, headers=headers
            )
            assert failed.status_code == 200
            assert failed.json()["status"] == "FA"
            second = (
                await call("POST", "/v1/conversations", json={"action": "LEAKACT"}, headers=headers)
            ).json()["uuid"]
            streamed = await call(
                "POST",
                f"/v1/conversations/{second}/messages?stream=true",
                json={"text": "hi"},
                headers=headers,
            )
            assert "event: finished" in streamed.text
            await call("GET", f"/v1/conversations/{uuid}", headers=headers)
            await call("GET", "/v1/conversations", headers=headers)
            await call("GET", "/v1/catalog", headers=headers)
            await call("GET", "/v1/catalog", headers={**headers, "Accept": "application/json"})
            await call("GET", "/v1/catalog/providers/LEAK", headers=headers)
            await call("GET", "/v1/catalog/providers", headers=headers)
            # A literal secret in the catalog is refused without quoting it.
            literal = {"code": "LIT", "kind": "openai", "api_key": PROVIDER_KEY}
            refused = await call("POST", "/v1/catalog/providers", json=literal, headers=headers)
            assert refused.status_code == 422
            await call("GET", "/v1/catalog", headers={"Authorization": f"Bearer {admin}x"})
            await call("GET", "/v1/catalog", headers={"X-API-Key": PROVIDER_KEY})
            await call(
                "POST", "/v1/conversations", json={"action": PROVIDER_KEY * 3}, headers=headers
            )
            await call("GET", "/metrics")
    finally:
        await state.aclose()

    # The provider really was called with the secrets (the test is not vacuous).
    assert any("Incorrect API key provided" in o for o in call.outputs)
    logs = [caplog.text] + [
        f"{r.getMessage()} {json.dumps(r.__dict__, default=str)}" for r in caplog.records
    ]
    return call.outputs, logs, admin


def assert_absent(secrets: list[str], outputs: list[str], logs: list[str]) -> None:
    for secret in secrets:
        for output in outputs:
            assert secret not in output, f"secret leaked in a response: {output[:300]}"
        for line in logs:
            assert secret not in line, f"secret leaked in a log record: {line[:300]}"


async def test_no_secret_in_any_response_or_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    outputs, logs, api_key = await exercise(tmp_path, monkeypatch, caplog)
    assert_absent([PROVIDER_KEY, CLIENT_HEADER_SECRET, api_key], outputs, logs)


async def test_no_provider_header_secret_in_any_response_or_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    outputs, logs, _ = await exercise(tmp_path, monkeypatch, caplog)
    assert_absent([HEADER_SECRET], outputs, logs)
