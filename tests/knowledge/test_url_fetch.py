"""Fetching a document from a URL is bounded in total time, not only per read.

A loopback server answers 200 and then sends its body one byte at a time,
each well within the client's per-read timeout: only a limit on the whole
fetch ends it. The limit here is a fraction of a second, passed in.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from pilothouse.knowledge._errors import DocumentError
from pilothouse.knowledge._sources import Pending, load
from trickle import trickling_server

pytestmark = pytest.mark.anyio


@pytest.fixture
def trickling_url() -> Iterator[str]:
    with trickling_server("/slow.txt", "text/plain", b"a") as url:
        yield url


async def test_a_url_trickling_its_body_fails_at_the_total_fetch_limit(trickling_url: str) -> None:
    async with httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0)) as client:
        with pytest.raises(DocumentError) as caught:
            await load(Pending(trickling_url, "url"), client, fetch_seconds=0.3)
    message = str(caught.value)
    assert message.startswith(f"{trickling_url}: 127.0.0.1 did not send the whole document")
    assert "within 0.3 s, the most one URL fetch may take" in message
    assert "upload the file instead" in message
