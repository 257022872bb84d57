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

__all__ = ["KeptMerges", "UrlKeepingClient"]

from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar, cast

import httpx2

K = TypeVar("K", bound=Hashable)
U = TypeVar("U")

_LIMIT = 256
"""Entries kept; a client calls a handful of URLs, so this bounds only odd callers."""


class KeptMerges(Generic[K, U]):
    """A small bounded map from what a merge was given to what it made.

    A client keeps one per kind of merge: a URL's spelling with its
    ``base_url``, a request's header list with the client's headers. A merge
    is handed out again only while ``base`` is the same object it was made
    with: a client whose ``base_url`` is set again parses afresh (what a
    merge depends on by value belongs in the key instead). Emptied when full
    rather than evicting one by one: a client that sends many distinct URLs
    (query strings in the path) only loses the cache.
    """

    def __init__(self) -> None:
        self._kept: dict[K, tuple[object, U]] = {}

    def merged(self, key: K, base: object, merge: Callable[[K], U]) -> U:
        """The kept merge of ``key`` with ``base``, or ``merge(key)``, kept.

        Args:
            key: what the caller gave (a URL as spelled, a header list).
            base: the client's object the merge also depends on, by identity.
            merge: the client's own merge.
        """
        found = self._kept.get(key)
        if found is not None and found[0] is base:
            return found[1]
        if len(self._kept) >= _LIMIT:
            self._kept.clear()
        value = merge(key)
        self._kept[key] = (base, value)
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

    _merged: KeptMerges[str, httpx2.URL] | None = None
    """Each URL string's merge, with the ``base_url`` it was merged with."""

    _merged_headers: KeptMerges[tuple[Hashable, ...], httpx2.Headers] | None = None
    """Each merge of the client's headers and a request's header list, by both."""

    def _merge_headers(self, headers: Any = None) -> Any:
        request = _header_key(headers)
        if request is None:
            return super()._merge_headers(headers)
        kept = self._merged_headers
        if kept is None:
            kept = self._merged_headers = KeptMerges()
        merge = super()._merge_headers
        # The client's headers are in the key by value: they change in place.
        found = kept.merged(
            (tuple(self.headers.raw), request), None, lambda _: httpx2.Headers(merge(headers))
        )
        return httpx2.Headers(found)

    def _merge_url(self, url: httpx2.URL | str) -> httpx2.URL:
        if type(url) is not str:
            return super()._merge_url(url)
        merged = self._merged
        if merged is None:
            merged = self._merged = KeptMerges()
        return merged.merged(url, self.base_url, super()._merge_url)
