"""What the browser tests of the UI share: a served catalog, Chromium, a logged-in page, axe.

A real ``pilothouse serve`` on a fresh SQLite file, fed by a scripted
OpenAI-compatible upstream on loopback, driven by Playwright in Debian's
Chromium. Pages may reach nothing but loopback: the UI must need no network.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fault_upstream import Upstream, running_upstream
from live_serve import LiveServer, live_serve

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WAIT = 60_000
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}

Served = tuple[LiveServer, Upstream]
"""The server and the upstream it answers from."""


@contextmanager
def serve_catalog(folder: Path, catalog: str, key_variable: str) -> Iterator[Served]:
    """Serve ``catalog`` (``{upstream}`` filled in) with the upstream's key in ``key_variable``.

    Skips when Playwright, axe or Chromium is missing, saying how to install it.
    """
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("playwright is not installed: pip install 'pilothouse[test]'")
    if importlib.util.find_spec("axe_playwright_python") is None:
        pytest.skip("axe-playwright-python is not installed: pip install 'pilothouse[test]'")
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: make install (apt-get install chromium)")
    os.environ[key_variable] = "sk-test"
    os.environ["PILOTHOUSE_SECRETS_ENV"] = f'{{"default": ["{key_variable}"]}}'
    try:
        with running_upstream() as upstream:
            with live_serve(
                folder, catalog.format(upstream=upstream.base_url), admin=True
            ) as server:
                yield server, upstream
    finally:
        del os.environ[key_variable]
        del os.environ["PILOTHOUSE_SECRETS_ENV"]


@contextmanager
def chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, with Playwright's expectations waiting up to ``WAIT``."""
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        try:
            yield launched
        finally:
            launched.close()


def base(served: Served) -> str:
    """The server's root (the UI's pages), without ``/v1``."""
    return served[0].base_url.removesuffix("/v1")


def logged_in_page(browser: Browser, served: Served, viewport: ViewportSize) -> Page:
    """A logged-in page; every request off loopback fails (the UI must need none)."""
    context = browser.new_context(viewport=viewport, accept_downloads=True)
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]).*"), lambda route: route.abort())
    page = context.new_page()
    page.set_default_timeout(WAIT)
    page.goto(f"{base(served)}/login")
    page.get_by_label("API key").fill(served[0].key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/playground$"))
    return page


def axe(page: Page) -> None:
    """No critical or serious axe-core violation on the page as it is now."""
    import axe_playwright_python

    script = Path(axe_playwright_python.__file__).parent / "axe.min.js"
    # A form submit or link just clicked may still be loading the next
    # document; the script tag needs it.
    page.wait_for_load_state("load")
    page.add_script_tag(content=script.read_text())
    result: dict[str, Any] = page.evaluate("async () => await axe.run(document)")
    bad = [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']]}"
        for v in result["violations"]
        if v["impact"] in ("critical", "serious")
    ]
    assert not bad, f"{page.url}: {bad}"


def api(served: Served) -> httpx.Client:
    """A REST client with the served admin key."""
    return httpx.Client(
        base_url=served[0].base_url,
        headers={"Authorization": f"Bearer {served[0].key}"},
        timeout=60,
    )


def shots() -> Path | None:
    """The folder for screenshots (``PILOTHOUSE_SCREENSHOTS``), or None when none are wanted."""
    folder = os.environ.get("PILOTHOUSE_SCREENSHOTS")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path
