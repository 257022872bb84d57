"""Fixtures for tests against real third-party components (see DESIGN.md)."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Iterator

import pytest

from pilothouse.providers._local import LocalModelServers
from pilothouse.testing import allow_model_requests


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    # asyncio only: the local model servers use asyncio locks, and trio is not installed.
    return "asyncio"


@pytest.fixture(scope="session")
def local_model_servers() -> Iterator[LocalModelServers]:
    """One LocalModelServers for the whole session, closed at its end.

    Its default model is the product's (Qwen2.5-Coder-0.5B), so a catalog's
    ``local`` provider without ``model_path`` serves what its model rows
    name (``examples/catalog``'s ``QWEN05`` on ``LOCL``): a row naming
    another model is refused, as in production. Tests that want the small
    SmolLM2-135M name it (``model_path: smollm2``, ``local_llm_base_url``).
    """
    if importlib.util.find_spec("llama_cpp") is None:
        reason = "llama_cpp is not importable: pip install 'pilothouse[local]'"
        print(f"skipping local model tests: {reason}")
        pytest.skip(reason)
    servers = LocalModelServers(startup_timeout=120.0)
    try:
        yield servers
    finally:
        servers.close()


@pytest.fixture(scope="session")
def local_llm_base_url(local_model_servers: LocalModelServers) -> str:
    """The OpenAI-compatible base URL of the SmolLM2 server, started once per session.

    A sync fixture with its own short-lived loop, so that any test (sync, or
    async under any runner) can use it.
    """
    started = time.perf_counter()
    url = asyncio.run(local_model_servers.base_url(model_path="smollm2"))
    print(f"local SmolLM2 server ready at {url} in {time.perf_counter() - started:.2f} s")
    return url


@pytest.fixture(autouse=True)
def real_model_requests() -> Iterator[None]:
    """Real models (the local one): allowed here, blocked in the rest of the suite."""
    with allow_model_requests():
        yield


@pytest.fixture(scope="session")
def qwen_base_url(local_model_servers: LocalModelServers) -> str:
    """The base URL of the default model's server (Qwen2.5-Coder-0.5B), started once."""
    started = time.perf_counter()
    url = asyncio.run(local_model_servers.base_url(model_path="qwen2.5-coder-0.5b"))
    print(f"local Qwen server ready at {url} in {time.perf_counter() - started:.2f} s")
    return url
