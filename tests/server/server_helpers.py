"""Helpers the HTTP service tests share (fixtures are in conftest.py)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pilothouse.catalog import import_catalog
from pilothouse.store import Database


def auth(key: str) -> dict[str, str]:
    """The request headers carrying an API key."""
    return {"Authorization": f"Bearer {key}"}


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Split a Server-Sent Events body into (event, data) pairs."""
    events: list[tuple[str, dict[str, Any]]] = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines["event"], json.loads(lines["data"])))
    return events


@asynccontextmanager
async def serve_on_loopback(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app with uvicorn on a free loopback port; yield its base URL.

    A real server, so a client reads a streamed response as it is produced
    (``httpx.ASGITransport`` buffers the whole body first).
    """
    import socket

    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    async with anyio.create_task_group() as group:
        group.start_soon(server.serve, [sock])
        with anyio.fail_after(10):
            while not server.started:
                await anyio.sleep(0.01)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.should_exit = True
    sock.close()


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"
# A plain action beside the examples: no skills, no placeholders besides the
# message, so route tests exercise the service rather than prompt assembly.
# Its model is not the local one: llama.cpp cannot stream while tools are
# offered, so the runtime does not stream local models; the scripted model
# replaces this one anyway and streams.
ECHO_ACTION = """
providers:
  - code: SCRP
    kind: openai
    base_url: http://127.0.0.1:9/v1
models:
  - code: SCRIPTEDM
    provider: SCRP
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
actions:
  - code: ECHO
    name: Echo
    model: SCRIPTEDM
    configuration: DFLT
    prompt: "Answer the user: {input}"
"""


async def import_yaml(database: Database, tenant: str, paths: Sequence[Path], *extra: str) -> None:
    """Import catalog files, then YAML documents given as text, into one tenant at once."""
    with tempfile.TemporaryDirectory() as folder:
        files = list(paths)
        for index, text in enumerate(extra):
            files.append(Path(folder) / f"extra-{index}.yaml")
            files[-1].write_text(text, encoding="utf-8")
        await import_catalog(database, tenant, files)


async def seed_examples(database: Database) -> None:
    """The examples and ``ECHO``, for tenants ``default`` and ``other``."""
    for tenant in ("default", "other"):
        await import_yaml(database, tenant, [EXAMPLES], ECHO_ACTION)


@dataclass(frozen=True)
class ExamplesAnd:
    """A seed: :func:`seed_examples`, then ``extra`` (YAML text) for tenant ``default``.

    Compared by value, so modules seeding the same text share one template.
    """

    extra: str

    async def __call__(self, database: Database) -> None:
        await seed_examples(database)
        await import_yaml(database, "default", [EXAMPLES], self.extra)
