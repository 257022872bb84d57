"""Parsed request URLs kept per client: the same URLs as without the cache."""

from __future__ import annotations

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
