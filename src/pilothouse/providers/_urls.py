"""Parsed request URLs and merged headers kept per client, so a request does not redo them.

Every chat completion the OpenAI SDK sends parses its URL three times:
the SDK merges ``/chat/completions`` into its ``base_url`` (a parse of the
path and a parse of the merged URL), turns the result back into a string,
and httpx parses that string again when it builds the request. Each parse
of an IP or host URL costs about 35–40 µs of CPU here (the host's IDNA and
IP checks), roughly 0.1 ms of a governed turn that is otherwise about 3 ms
(``docs/benchmarks.md``). httpx's ``URL`` is immutable, so the parse of a
given string can be kept and handed out again: the request sent is the same.

The headers are merged twice per request the same way: the SDK builds its
headers (authorization, user agent, platform, retry count, read timeout)
afresh for every request, and httpx merges them with the client's own
defaults into a new ``Headers``, normalizing every name and value again:
about 40 µs of CPU per chat completion here, for the same dozen headers
each time. The merge is a function of the client's headers and the
request's, so it is kept per pair and a copy handed out.
"""

from __future__ import annotations

__all__ = ["ParsedUrls", "UrlKeepingClient"]

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, cast

import httpx2

U = TypeVar("U")

_LIMIT = 256
"""Entries kept; a client calls a handful of URLs, so this bounds only odd callers."""


class ParsedUrls(Generic[U]):
    """A small bounded map from a URL's spelling to its merge with a base URL.

    A merge is handed out again only while the client's ``base_url`` is the
    same object it was merged with: a client whose ``base_url`` is set again
    parses afresh. Emptied when full rather than evicting one by one: a
    client that sends many distinct URLs (query strings in the path) only
    loses the cache.
    """

    def __init__(self) -> None:
        self._parsed: dict[str, tuple[object, U]] = {}

    def merged(self, url: str, base: object, merge: Callable[[str], U]) -> U:
        """The kept merge of ``url`` with ``base``, or ``merge(url)``, kept.

        Args:
            url: the URL or path as the caller spelled it.
            base: the client's ``base_url`` now.
            merge: the client's own merge of a URL with its ``base_url``.
        """
        found = self._parsed.get(url)
        if found is not None and found[0] is base:
            return found[1]
        if len(self._parsed) >= _LIMIT:
            self._parsed.clear()
        value = merge(url)
        self._parsed[url] = (base, value)
        return value


def _header_key(headers: object) -> tuple[Hashable, ...] | None:
    """A request's headers as a key, when given as a list of string pairs (as the SDKs do)."""
    if type(headers) is not list:
        return None
    pairs = cast("list[object]", headers)
    for pair in pairs:
        if type(pair) is not tuple:
            return None
        items = cast("tuple[object, ...]", pair)
        if len(items) != 2 or type(items[0]) is not str or type(items[1]) is not str:
            return None
    return tuple(cast("list[Hashable]", pairs))


class UrlKeepingClient(httpx2.AsyncClient):
    """``httpx2.AsyncClient`` that keeps each URL's parse and each set of headers' merge.

    Only the merge of a string with the client's ``base_url`` is kept, and
    only while that ``base_url`` is the same object: a client whose
    ``base_url`` is set again parses afresh. Headers given as a list of
    string pairs are merged with the client's once per pair of the two
    (the client's headers are part of the key, so changing them merges
    afresh); every request gets its own copy.
    """

    _merged: ParsedUrls[httpx2.URL] | None = None
    """Each URL string's merge, with the ``base_url`` it was merged with."""

    _merged_headers: dict[tuple[Hashable, ...], httpx2.Headers] | None = None
    """Each request header list's merge with the client's headers, by both."""

    def _merge_headers(self, headers: Any = None) -> Any:
        request = _header_key(headers)
        if request is None:
            return super()._merge_headers(headers)
        key = (tuple(self.headers.raw), request)
        kept = self._merged_headers
        if kept is None:
            kept = self._merged_headers = {}
        found = kept.get(key)
        if found is None:
            if len(kept) >= _LIMIT:
                kept.clear()
            found = kept[key] = httpx2.Headers(super()._merge_headers(headers))
        return httpx2.Headers(found)

    def _merge_url(self, url: httpx2.URL | str) -> httpx2.URL:
        if type(url) is not str:
            return super()._merge_url(url)
        merged = self._merged
        if merged is None:
            merged = self._merged = ParsedUrls()
        return merged.merged(url, self.base_url, super()._merge_url)
