"""Each tenant's ``@secrets(NAME)`` resolves in its own scope, never the server's environment.

The service runs as ``pilothouse serve`` runs it (``ServerState``, the
FastAPI app over ASGI); a real HTTP server on loopback stands for a model
provider and records every request's headers. The process environment holds
the values an attacker wants (``SOME_ENV_VAR``, ``PILOTHOUSE_DATABASE_URL``)
and a different value under the name the tenant's own secret has; the secrets
file gives tenants ``acme`` and ``beta`` their own sections.

- The attack: a provider written over REST with ``api_key:
  "@secrets(SOME_ENV_VAR)"`` and a header ``X-Db:
  "@secrets(PILOTHOUSE_DATABASE_URL)"`` is refused with 422 naming both
  fields and secrets; nothing is written.
- A real turn sends the tenant's own secret (from its section of the file),
  not the environment's value of the same name.
- A tenant cannot write, nor resolve from a row already stored, another
  tenant's secret or an environment variable; the model server hears nothing.
- The operator's explicit mapping of an environment variable to a tenant works.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from fault_upstream import completion

from pilothouse.api import Pilothouse
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.anyio]

ENV_VALUE = "env-value-the-tenant-must-never-see"
DATABASE_URL_VALUE = "postgresql://admin:hunter2@db.internal/prod"
ACME_KEY = "acme-own-key-from-the-secrets-file"
BETA_KEY = "beta-own-key-from-the-secrets-file"
MAPPED_VALUE = "acme-key-the-operator-mapped-from-the-environment"


@dataclass
class ModelServer:
    """A loopback OpenAI-compatible server that records each request's headers."""

    base_url: str
    headers: list[dict[str, str]] = field(default_factory=lambda: [])


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.rfile.read(int(self.headers.get("content-length", "0")))
            body = json.dumps(completion("an answer")).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            del format, args

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield ModelServer(f"http://127.0.0.1:{server.server_address[1]}/v1", seen)
    finally:
        server.shutdown()
        server.server_close()


def provider(base_url: str, api_key: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "code": "UP",
        "kind": "openai-compatible",
        "base_url": base_url,
        "api_key": api_key,
    }
    if headers:
        document["headers"] = headers
    return document


def catalog(base_url: str, api_key: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "providers": [provider(base_url, api_key, headers)],
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


@dataclass
class Service:
    http: httpx.AsyncClient
    state: ServerState
    keys: dict[str, str]

    def headers(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    async def put_catalog(self, tenant: str, document: dict[str, Any]) -> httpx.Response:
        return await self.http.put(
            "/v1/catalog",
            content=yaml.safe_dump(document),
            headers={**self.headers(tenant), "Content-Type": "application/yaml"},
        )

    async def ask(self, tenant: str) -> httpx.Response:
        started = await self.http.post(
            "/v1/conversations", json={"action": "ASK"}, headers=self.headers(tenant)
        )
        assert started.status_code == 201, started.text
        uuid = started.json()["uuid"]
        return await self.http.post(
            f"/v1/conversations/{uuid}/messages", json={"text": "Hi"}, headers=self.headers(tenant)
        )


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'secrets.db'}"
    # What the server's environment holds: the attacker's targets, and a
    # value under the very name acme's own secret has.
    monkeypatch.setenv("SOME_ENV_VAR", ENV_VALUE)
    monkeypatch.setenv("PILOTHOUSE_DATABASE_URL", database_url)
    monkeypatch.setenv("UPSTREAM_KEY", ENV_VALUE)
    monkeypatch.setenv("ACME_UPSTREAM_KEY", MAPPED_VALUE)
    secrets = tmp_path / "secrets.env"
    secrets.write_text(
        f"[acme]\nUPSTREAM_KEY={ACME_KEY}\n\n[beta]\nBETA_ONLY_KEY={BETA_KEY}\n", encoding="utf-8"
    )
    return Settings(
        database_url=database_url,
        secrets_file=secrets,
        # The model server is on loopback: the operator allows it.
        egress_allow=["127.0.0.1"],
    )


@asynccontextmanager
async def open_service(settings: Settings) -> AsyncIterator[Service]:
    state = ServerState(settings, server=ServerSettings(host="127.0.0.1"))
    await state.open()
    try:
        keys: dict[str, str] = {}
        for tenant in ("acme", "beta"):
            keys[tenant], _ = await state.pilothouse.keys.create(
                tenant=tenant, name=tenant, admin=True
            )
        app: FastAPI = create_app(settings, state=state)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://testserver", timeout=60
            ) as http,
        ):
            yield Service(http, state, keys)
    finally:
        await state.aclose()


@pytest.fixture
async def service(settings: Settings) -> AsyncIterator[Service]:
    async with open_service(settings) as opened:
        yield opened


async def test_the_environment_attack_over_rest_is_refused_with_422_and_nothing_written(
    service: Service, model_server: ModelServer
) -> None:
    attack = provider(
        model_server.base_url,
        "@secrets(SOME_ENV_VAR)",
        {"X-Db": "@secrets(PILOTHOUSE_DATABASE_URL)"},
    )

    refused = await service.http.post(
        "/v1/catalog/providers", json=attack, headers=service.headers("acme")
    )

    assert refused.status_code == 422, refused.text
    errors = {error["field"]: error["rule"] for error in refused.json()["errors"]}
    assert set(errors) == {"api_key", "headers.X-Db"}
    assert "'SOME_ENV_VAR'" in errors["api_key"]
    assert "'PILOTHOUSE_DATABASE_URL'" in errors["headers.X-Db"]
    for rule in errors.values():
        assert "tenant 'acme' does not have" in rule and "docs/security.md" in rule
    assert ENV_VALUE not in refused.text and "hunter2" not in refused.text
    # No row: the provider does not exist, for a read or for an update.
    missing = await service.http.get("/v1/catalog/providers/UP", headers=service.headers("acme"))
    assert missing.status_code == 404
    # The whole-catalog write is refused the same way.
    whole = await service.put_catalog(
        "acme",
        catalog(
            model_server.base_url,
            "@secrets(SOME_ENV_VAR)",
            {"X-Db": "@secrets(PILOTHOUSE_DATABASE_URL)"},
        ),
    )
    assert whole.status_code == 422, whole.text
    assert (
        await service.http.get("/v1/catalog/providers/UP", headers=service.headers("acme"))
    ).status_code == 404
    assert model_server.headers == []


async def test_a_turn_sends_the_tenants_own_secret_never_the_environments(
    service: Service, model_server: ModelServer
) -> None:
    written = await service.put_catalog(
        "acme",
        catalog(
            model_server.base_url, "@secrets(UPSTREAM_KEY)", {"X-Key": "@secrets(UPSTREAM_KEY)"}
        ),
    )
    assert written.status_code == 200, written.text

    answer = await service.ask("acme")

    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "CO", answer.text
    (sent,) = model_server.headers
    assert sent["authorization"] == f"Bearer {ACME_KEY}"
    assert sent["x-key"] == ACME_KEY
    assert ENV_VALUE not in json.dumps(model_server.headers)


async def test_a_tenant_cannot_write_another_tenants_secret(
    service: Service, model_server: ModelServer
) -> None:
    refused = await service.put_catalog(
        "acme", catalog(model_server.base_url, "@secrets(BETA_ONLY_KEY)")
    )

    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["errors"]
    assert (error["entity"], error["code"], error["field"]) == ("provider", "UP", "api_key")
    assert "'BETA_ONLY_KEY'" in error["rule"] and BETA_KEY not in refused.text
    # The owner may write it.
    owned = await service.put_catalog(
        "beta", catalog(model_server.base_url, "@secrets(BETA_ONLY_KEY)")
    )
    assert owned.status_code == 200, owned.text


@pytest.mark.parametrize("reference", ["@secrets(BETA_ONLY_KEY)", "@secrets(SOME_ENV_VAR)"])
async def test_a_stored_row_does_not_resolve_another_tenants_or_the_environments_secret(
    settings: Settings, model_server: ModelServer, reference: str
) -> None:
    # A row already in the database (written before this check existed, or
    # imported by the operator's CLI, which checks nothing at the write).
    async with Pilothouse(settings, tenant="acme") as operator:
        await operator.catalog.import_documents([catalog(model_server.base_url, reference)])

    async with open_service(settings) as service:
        answer = await service.ask("acme")

    # Refused before any model call, naming the secret and the tenant.
    assert answer.status_code == 422, answer.text
    name = reference.removeprefix("@secrets(").removesuffix(")")
    assert f"secret '{name}' is not defined in the secrets of tenant 'acme'" in answer.text
    assert BETA_KEY not in answer.text and ENV_VALUE not in answer.text
    assert model_server.headers == []


async def test_the_operators_mapping_of_an_environment_variable_to_a_tenant_works(
    settings: Settings, model_server: ModelServer
) -> None:
    mapped = settings.model_copy(update={"secrets_env": {"acme": ["MAPPED_KEY=ACME_UPSTREAM_KEY"]}})
    async with open_service(mapped) as service:
        written = await service.put_catalog(
            "acme", catalog(model_server.base_url, "@secrets(MAPPED_KEY)")
        )
        assert written.status_code == 200, written.text
        answer = await service.ask("acme")
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "CO", answer.text
        # The mapping is acme's: beta may not name it.
        refused = await service.put_catalog(
            "beta", catalog(model_server.base_url, "@secrets(MAPPED_KEY)")
        )
        assert refused.status_code == 422, refused.text

    (sent,) = model_server.headers
    assert sent["authorization"] == f"Bearer {MAPPED_VALUE}"
