"""Fetching an OpenAPI document from a URL is bounded in total time, not only per read.

A loopback server answers 200 and then sends its document one byte at a
time, each well within the client's per-read timeout: only a limit on the
whole fetch ends it. The limit here is a fraction of a second, passed in.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pilothouse.tools import ToolError
from pilothouse.tools._openapi import load_document
from trickle import trickling_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def trickling_url() -> Iterator[str]:
    with trickling_server("/openapi.yaml", "application/yaml", b"#") as url:
        yield url


async def test_a_document_url_trickling_its_body_fails_at_the_total_fetch_limit(
    trickling_url: str,
) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0)) as client:
        with pytest.raises(ToolError) as caught:
            await load_document(trickling_url, client, fetch_seconds=0.3)
    message = str(caught.value)
    assert message.startswith(f"OpenAPI document {trickling_url}: not sent whole within 0.3 s")
    assert "the most one document fetch may take" in message
