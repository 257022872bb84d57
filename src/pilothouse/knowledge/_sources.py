"""Where documents come from: files, folders (recursively), URLs, given text.

A source becomes a :class:`Loaded` document: its identity in the
collection (the resolved path, the URL as given, or the caller's name), its
bytes or text, its format and the metadata found on the way. Folders are
walked in name order, skipping hidden entries; a file of an unknown type in
a folder is reported as skipped, one named on its own as failed.
"""

from __future__ import annotations

__all__ = ["FETCH_SECONDS", "MAX_BYTES", "Loaded", "Pending", "expand", "load"]

import os
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from pilothouse.knowledge._documents import SUFFIXES, format_of
from pilothouse.knowledge._errors import DocumentError
from pilothouse.knowledge._types import FileDocument, TextDocument

UrlCheck = Callable[[str], Awaitable[None]]
"""Refuses a URL (raising) before it is fetched; asked again for every redirect."""

_MAX_REDIRECTS = 5

MAX_BYTES = 50 * 1024 * 1024
"""The largest document read from a file or URL."""

FETCH_SECONDS = 120.0
"""The longest one URL's fetch may take, redirects and the whole body included.

The HTTP client's timeout bounds each read only, so a server sending a byte
a minute would hold an ingestion (its memory, its place among the tenant's
running ingestions) for ever. Two minutes carry the largest document read
(:data:`MAX_BYTES`) at about 0.4 MB/s, which a server meant to publish
documents exceeds by far; a slower one's document can be uploaded instead.
"""


@dataclass(frozen=True)
class Pending:
    """A source found, not yet read.

    Attributes:
        source: its identity in the collection.
        kind: ``file``, ``url`` or ``text``.
        path: the file, for ``file``.
        document: the given document, for ``text``.
        skip: why it is skipped (a file of an unknown type in a folder).
    """

    source: str
    kind: str
    path: Path | None = None
    document: TextDocument | FileDocument | None = None
    skip: str | None = None


@dataclass
class Loaded:
    """A document's content, ready to parse.

    Attributes:
        source: its identity in the collection.
        data: its bytes.
        format: its format.
        title: a title the caller gave, if any.
        metadata: what was found while loading (file name, URL, content type).
    """

    source: str
    data: bytes
    format: str
    title: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict[str, Any])


def _is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def expand(sources: Sequence[str | Path | TextDocument | FileDocument]) -> Iterator[Pending]:
    """List every document the sources name, walking folders.

    Args:
        sources: paths (files or folders), ``http(s)://`` URLs, given documents.

    Yields:
        One pending document per file, URL or given document.
    """
    for item in sources:
        if isinstance(item, TextDocument):
            yield Pending(item.source, "text", document=item)
        elif isinstance(item, FileDocument):
            yield Pending(item.source, "bytes", document=item)
        elif isinstance(item, str) and _is_url(item):
            yield Pending(item, "url")
        else:
            path = Path(item).expanduser()
            if path.is_dir():
                yield from _walk(path.resolve())
            else:
                yield Pending(str(path.resolve()), "file", path=path)


def _walk(folder: Path) -> Iterator[Pending]:
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = Path(root) / name
            skip = None
            if path.suffix.lower() not in SUFFIXES:
                skip = f"not a supported type ({', '.join(sorted(SUFFIXES))})"
            yield Pending(str(path), "file", path=path, skip=skip)


async def load(
    pending: Pending,
    client: httpx.AsyncClient,
    url_check: UrlCheck | None = None,
    *,
    fetch_seconds: float = FETCH_SECONDS,
) -> Loaded:
    """Read a pending document.

    Args:
        pending: what to read.
        client: fetches URLs.
        url_check: refuses URLs a caller may not make this process fetch
            (asked for the URL and every redirect).
        fetch_seconds: the longest a URL's fetch may take, all of it.

    Returns:
        The content.

    Raises:
        DocumentError: missing, unreadable, too large, of an unknown type, or
            a URL that did not answer 200 or not within ``fetch_seconds``.
    """
    if isinstance(pending.document, FileDocument):
        upload = pending.document
        fmt = format_of(upload.file_name)
        if fmt is None:
            raise DocumentError(
                f"{upload.source}: not a supported type (supported: {', '.join(sorted(SUFFIXES))})"
            )
        if len(upload.data) > MAX_BYTES:
            raise DocumentError(f"{upload.source}: more than the {MAX_BYTES} bytes read")
        metadata = {"file_name": upload.file_name, "format": fmt}
        return Loaded(upload.source, upload.data, fmt, upload.title, metadata)
    if pending.document is not None:
        doc = pending.document
        return Loaded(
            doc.source, doc.text.encode("utf-8"), doc.format, doc.title, {"format": doc.format}
        )
    if pending.kind == "url":
        # The block is left without a return only when the time ran out.
        with anyio.move_on_after(fetch_seconds):
            return await _fetch(pending.source, client, url_check)
        raise DocumentError(
            f"{pending.source}: {httpx.URL(pending.source).host} did not send the whole "
            f"document within {fetch_seconds:g} s, the most one URL fetch may take; "
            "serve it faster or upload the file instead"
        )
    assert pending.path is not None
    return await _read_file(pending.path, pending.source)


async def _read_file(path: Path, source: str) -> Loaded:
    fmt = format_of(path.name)
    if fmt is None:
        raise DocumentError(
            f"{source}: not a supported type (supported: {', '.join(sorted(SUFFIXES))})"
        )
    try:
        size = (await anyio.Path(path).stat()).st_size
        if size > MAX_BYTES:
            raise DocumentError(f"{source}: {size} bytes, more than the {MAX_BYTES} read")
        data = await anyio.Path(path).read_bytes()
    except FileNotFoundError as exc:
        raise DocumentError(f"{source}: no such file") from exc
    except OSError as exc:
        raise DocumentError(f"{source}: cannot be read ({exc.strerror or exc})") from exc
    return Loaded(source, data, fmt, None, {"file_name": path.name, "format": fmt})


async def _fetch(url: str, client: httpx.AsyncClient, url_check: UrlCheck | None) -> Loaded:
    target = url
    try:
        # Redirects are followed here, hop by hop, so a URL check sees each one.
        for _ in range(_MAX_REDIRECTS + 1):
            if url_check is not None:
                await url_check(target)
            response = await client.send(client.build_request("GET", target), stream=True)
            try:
                if response.is_redirect and response.next_request is not None:
                    target = str(response.next_request.url)
                    continue
                return await _read_response(url, response)
            finally:
                await response.aclose()
    except httpx.HTTPError as exc:
        raise DocumentError(f"{url}: could not be fetched ({type(exc).__name__})") from exc
    raise DocumentError(f"{url}: more than {_MAX_REDIRECTS} redirects")


async def _read_response(url: str, response: httpx.Response) -> Loaded:
    if response.status_code != 200:
        raise DocumentError(f"{url}: HTTP {response.status_code}")
    content_type = response.headers.get("content-type", "")
    fmt = format_of(str(response.url), content_type)
    if fmt is None:
        raise DocumentError(f"{url}: content type '{content_type}' is not supported")
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_BYTES:
            raise DocumentError(f"{url}: more than the {MAX_BYTES} bytes read")
        chunks.append(chunk)
    metadata = {"url": url, "content_type": content_type.split(";")[0].strip(), "format": fmt}
    return Loaded(url, b"".join(chunks), fmt, None, metadata)
