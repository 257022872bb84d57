"""Parsed request URLs kept per client: the same URLs as without the cache."""

from __future__ import annotations

import httpx2
from openai import AsyncOpenAI

from pilothouse.providers._openai_client import FastAsyncOpenAI
from pilothouse.providers._urls import UrlKeepingClient


def test_the_client_merges_urls_as_httpx_does_and_follows_its_base_url() -> None:
    client = UrlKeepingClient(base_url="http://127.0.0.1:9/v1")
    first = client.build_request("POST", "chat/completions").url
    again = client.build_request("POST", "chat/completions").url
    assert str(first) == str(again) == "http://127.0.0.1:9/v1/chat/completions"
    assert str(client.build_request("GET", "https://example.com/x?y=1").url) == (
        "https://example.com/x?y=1"
    )
    client.base_url = "http://localhost:8/v2"
    assert str(client.build_request("POST", "chat/completions").url) == (
        "http://localhost:8/v2/chat/completions"
    )


def test_the_client_stays_right_past_its_bound() -> None:
    client = UrlKeepingClient(base_url="http://127.0.0.1:9/")
    for i in range(600):
        assert (
            str(client.build_request("GET", f"p{i % 300}").url) == f"http://127.0.0.1:9/p{i % 300}"
        )


def test_the_openai_client_prepares_the_stock_url_and_follows_its_base_url() -> None:
    fast = FastAsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    stock = AsyncOpenAI(api_key="k", base_url="http://127.0.0.1:9/v1")
    for _ in range(2):
        assert fast._prepare_url("/chat/completions") == stock._prepare_url("/chat/completions")
    fast.base_url = "http://localhost:8/v2"
    assert str(fast._prepare_url("/chat/completions")) == "http://localhost:8/v2/chat/completions"


_SDK_HEADERS = [
    ("Authorization", "Bearer k"),
    ("User-Agent", "AsyncOpenAI/Python 3"),
    ("X-Stainless-Retry-Count", "0"),
    ("User-Agent", "pydantic-ai/2"),
]


def _headers(request: httpx2.Request) -> list[tuple[str, str]]:
    return list(request.headers.multi_items())


def test_kept_header_merges_send_what_httpx_sends() -> None:
    kept = UrlKeepingClient(headers={"X-Client": "a"})
    stock = httpx2.AsyncClient(headers={"X-Client": "a"})
    for _ in range(3):
        assert _headers(kept.build_request("POST", "http://h/x", headers=_SDK_HEADERS)) == (
            _headers(stock.build_request("POST", "http://h/x", headers=_SDK_HEADERS))
        )
    # Other spellings (a dict, Headers) take httpx's own path, with the same result.
    for given in ({"A": "1"}, httpx2.Headers({"A": "1"}), [(b"A", b"1")]):
        assert _headers(kept.build_request("GET", "http://h/", headers=given)) == (
            _headers(stock.build_request("GET", "http://h/", headers=given))
        )


def test_kept_header_merges_follow_the_clients_headers_and_are_not_shared() -> None:
    client = UrlKeepingClient(headers={"X-Client": "a"})
    first = client.build_request("POST", "http://h/x", headers=_SDK_HEADERS)
    # A request's headers are its own: changing them changes no later request.
    first.headers["X-Changed"] = "yes"
    second = client.build_request("POST", "http://h/x", headers=_SDK_HEADERS)
    assert "X-Changed" not in second.headers
    assert second.headers["X-Client"] == "a"
    client.headers["X-Client"] = "b"
    assert (
        client.build_request("POST", "http://h/x", headers=_SDK_HEADERS).headers["X-Client"] == "b"
    )


def test_kept_header_merges_stay_right_past_their_bound() -> None:
    client = UrlKeepingClient()
    for i in range(600):
        headers = [("X-N", str(i % 300))]
        assert client.build_request("GET", "http://h/", headers=headers).headers["X-N"] == str(
            i % 300
        )
