"""Server code is the operator's, against a real ``pilothouse serve`` on SQLite and PostgreSQL.

The operator imports a catalog naming its own module with the real CLI; the
service refuses a tenant admin's write naming ``linecache:getlines`` (422,
nothing stored), and runs the operator's tool only once the operator grants
its module in ``PILOTHOUSE_CATALOG_CODE``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import httpx
from live_serve import CATALOG, ServeProcess, cli
from ports import free_port

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings

TOOLS = """
tools:
  - code: WEATHER
    name: get_weather
    kind: python
    implementation: "real_tools:get_weather"
"""


def call_weather(root: str, key: str) -> dict[str, object]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "pilothouse/command/callTool/v1",
        "params": {"name": "get_weather", "arguments": {"city": "Paris"}},
    }
    answer = httpx.post(f"{root}/jsonrpc", json=body, headers={"X-API-Key": key}, timeout=60)
    result: dict[str, object] = answer.json()["result"]
    return result


def test_the_service_runs_only_the_code_the_operator_granted(
    database_url: str, tmp_path: Path
) -> None:
    tools = tmp_path / "tools.yaml"
    tools.write_text(TOOLS, encoding="utf-8")
    # The operator's own import on the server: any name, as written.
    cli(database_url, "catalog", "import", str(CATALOG), str(tools))

    async def admin_key() -> str:
        async with Pilothouse(Settings(database_url=database_url, secrets_file=None)) as ph:
            key, _ = await ph.keys.create(name="tenant-admin", admin=True)
            return key

    key = anyio.run(admin_key)
    # The served process imports the granted module from the tests' folder.
    path = {"PYTHONPATH": os.pathsep.join(sys.path)}
    server = ServeProcess(database_url, tmp_path / "serve.log", free_port(), env=path)
    server.start()
    try:
        written = httpx.post(
            f"{server.root}/v1/catalog/tools",
            json={
                "code": "READ",
                "name": "read",
                "kind": "python",
                "implementation": "linecache:getlines",
            },
            headers={"X-API-Key": key},
            timeout=30,
        )
        stored = httpx.get(
            f"{server.root}/v1/catalog/tools/READ", headers={"X-API-Key": key}, timeout=30
        )
        ungranted = call_weather(server.root, key)
    finally:
        server.stop()

    assert written.status_code == 422, written.text
    [issue] = written.json()["errors"]
    assert issue["field"] == "implementation"
    assert "PILOTHOUSE_CATALOG_CODE" in issue["rule"]
    assert stored.status_code == 404
    assert ungranted["status"] == "failed"
    assert ungranted["error_code"] == "tool.code_not_granted"

    granted = ServeProcess(
        database_url,
        tmp_path / "serve-granted.log",
        free_port(),
        env={**path, "PILOTHOUSE_CATALOG_CODE": "real_tools"},
    )
    granted.start()
    try:
        ran = call_weather(granted.root, key)
    finally:
        granted.stop()

    assert ran["status"] == "succeeded", ran
    assert "Paris" in str(ran["content"])
