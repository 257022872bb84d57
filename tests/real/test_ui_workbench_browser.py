"""Compare, knowledge, memory and the catalog's tables in Debian's Chromium, as a user uses them.

A real ``pilothouse serve`` (example catalog plus a scripted OpenAI-compatible
upstream on loopback, a collection on the embedded store with the packaged
MiniLM, a fresh SQLite file) is driven by Playwright: one prompt compared
across columns, each with its tokens, cost and latency; a streamed answer
rendered as Markdown while it streams; documents uploaded to a collection
with progress, their chunks, a search with scores; a user's memory browsed,
edited, forgotten, exported and erased; catalog tables searched and paged.

Every page visited is checked with axe-core (the copy ``axe-playwright-python``
ships): no critical or serious violation, at 1280×800 and 390×844.
``PILOTHOUSE_SCREENSHOTS=<dir>`` (``make screenshots``) writes the pictures
of ``docs/playground.md``.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from fault_upstream import Reply, Upstream, running_upstream, text_stream
from live_serve import LiveServer, live_serve

pytestmark = pytest.mark.real

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page, ViewportSize

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WAIT = 60_000
DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}
FITS = "document.documentElement.scrollWidth <= window.innerWidth"

CATALOG = """
providers:
  - code: UP
    kind: openai
    base_url: {upstream}
    api_key: "@secrets(WB_UP_KEY)"
models:
  - code: UPM
    provider: UP
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0.5
    output_price: 1.5
  - code: UPM2
    provider: UP
    model_name: scripted-two
    capabilities: [FC, SR]
    input_price: 2
    output_price: 4
vector_stores:
  - code: EMBED
document_collections:
  - code: OFFICE
    name: Office facts
    store: EMBED
    collection_name: office
    similarity_threshold: 0.1
    chunk_size: 64
actions:
  - code: SHOP
    name: Shop
    model: UPM
    configuration: DFLT
    ask_user: false
    prompt: "Help the user shop: {{input}}"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, Upstream]]:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("playwright is not installed: pip install 'pilothouse[test]'")
    if importlib.util.find_spec("axe_playwright_python") is None:
        pytest.skip("axe-playwright-python is not installed: pip install 'pilothouse[test]'")
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: make install (apt-get install chromium)")
    os.environ["WB_UP_KEY"] = "sk-test"
    os.environ["PILOTHOUSE_SECRETS_ENV"] = '{"default": ["WB_UP_KEY"]}'
    try:
        with running_upstream() as upstream:
            folder = tmp_path_factory.mktemp("workbench")
            with live_serve(
                folder, CATALOG.format(upstream=upstream.base_url), admin=True
            ) as server:
                yield server, upstream
    finally:
        del os.environ["WB_UP_KEY"]
        del os.environ["PILOTHOUSE_SECRETS_ENV"]


@pytest.fixture(scope="module")
def browser(served: tuple[LiveServer, Upstream]) -> Iterator[Browser]:
    del served
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=WAIT)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        yield launched
        launched.close()


def _base(served: tuple[LiveServer, Upstream]) -> str:
    return served[0].base_url.removesuffix("/v1")


def _page(browser: Browser, served: tuple[LiveServer, Upstream], viewport: ViewportSize) -> Page:
    """A logged-in page; every request off loopback fails (the UI must need none)."""
    base = _base(served)
    context = browser.new_context(viewport=viewport, accept_downloads=True)
    context.route(re.compile(r"^(?!http://127\.0\.0\.1[:/]).*"), lambda route: route.abort())
    page = context.new_page()
    page.set_default_timeout(WAIT)
    page.goto(f"{base}/login")
    page.get_by_label("API key").fill(served[0].key)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/playground$"))
    return page


def _axe(page: Page) -> None:
    """No critical or serious axe-core violation on the page as it is now."""
    import axe_playwright_python

    script = Path(axe_playwright_python.__file__).parent / "axe.min.js"
    page.add_script_tag(content=script.read_text())
    result: dict[str, Any] = page.evaluate("async () => await axe.run(document)")
    bad = [
        f"{v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']]}"
        for v in result["violations"]
        if v["impact"] in ("critical", "serious")
    ]
    assert not bad, f"{page.url}: {bad}"


def _api(served: tuple[LiveServer, Upstream]) -> httpx.Client:
    return httpx.Client(
        base_url=served[0].base_url,
        headers={"Authorization": f"Bearer {served[0].key}"},
        timeout=60,
    )


def _shots() -> Path | None:
    folder = os.environ.get("PILOTHOUSE_SCREENSHOTS")
    if not folder:
        return None
    path = Path(folder)
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_compare_sends_one_prompt_to_each_column_with_tokens_cost_and_latency(
    served: tuple[LiveServer, Upstream], browser: Browser
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    shots = _shots()
    upstream = served[1]
    upstream.script(
        Reply(events=text_stream("**Red** ", "is warm.")),
        Reply(events=text_stream("Blue ", "is calm.")),
    )
    page = _page(browser, served, DESKTOP)
    page.get_by_role("link", name="Compare").click()
    page.wait_for_url(re.compile(r"/compare"))
    page.get_by_label("Action, agent or model").nth(0).select_option("action:SHOP")
    page.get_by_label("Action, agent or model").nth(1).select_option("model:UPM2")
    page.get_by_label("Configuration").nth(1).select_option("PREC")
    page.get_by_label("Action, agent or model").nth(2).select_option("")
    _axe(page)
    page.get_by_label("Prompt").fill("Which colour for a summer shirt?")
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.locator("body")).to_have_attribute("data-compared", "1")
    columns = page.locator(".compare-column")
    expect(columns).to_have_count(2)
    expect(columns.nth(0).locator("h2")).to_have_text("action:SHOP")
    expect(columns.nth(1).locator("h2")).to_have_text("model:UPM2 · PREC")
    expect(columns.nth(0).locator(".markdown strong")).to_have_text("Red")
    expect(columns.nth(1).locator(".markdown")).to_have_text("Blue is calm.")
    line = re.compile(
        r"^\d+ in / \d+ out tokens · cost \$[0-9.]+ · \d+ ms · first token \d+ ms · completed$"
    )
    for i in range(2):
        expect(columns.nth(i).locator(".compare-meta")).to_have_text(line)
    # The columns were sent as chosen: the second on UPM2 with PREC's options.
    assert upstream.requests[0]["model"] == "scripted"
    assert upstream.requests[1]["model"] == "scripted-two"
    assert upstream.requests[1]["temperature"] == 0
    assert upstream.requests[1]["max_completion_tokens"] == 512
    _axe(page)
    if shots:
        page.screenshot(path=str(shots / "compare-1280x800.png"))
    # Each column is an audited conversation of its own, opened in the playground.
    uuids = [columns.nth(i).get_attribute("data-conversation") for i in range(2)]
    assert all(uuids) and uuids[0] != uuids[1]
    with _api(served) as api:
        for uuid in uuids:
            record = api.get(f"/conversations/{uuid}").json()
            assert record["status"] == "CO", record
            assert record["timeline"], record
    columns.nth(1).get_by_role("link", name="Open in the playground").click()
    page.wait_for_url(re.compile(r"/playground\?c="))
    expect(page.locator("#chat")).to_contain_text("Blue is calm.")
    expect(page.locator("#chat .meta").first).to_contain_text("bare model UPM2")
    # At phone width the columns stack and nothing is wider than the screen.
    page.set_viewport_size(PHONE)
    upstream.script(
        Reply(events=text_stream("One.")), Reply(events=text_stream("Two.")),
        Reply(events=text_stream("Three.")),
    )  # fmt: skip
    page.goto(f"{base}/compare?target=action:SHOP&target=model:UPM2&target=model:UPM")
    page.get_by_label("Prompt").fill("Count.")
    page.get_by_role("button", name="Compare", exact=True).click()
    expect(page.locator("body")).to_have_attribute("data-compared", "1")
    expect(page.locator(".compare-column")).to_have_count(3)
    expect(page.locator(".compare-column .markdown").nth(2)).to_have_text("Three.")
    assert page.evaluate(FITS)
    _axe(page)
    page.context.close()


STREAMED = [
    "# Packing list\n\n",
    "Take **linen** shirts",
    " and `sandals`.\n\n",
    '<img src=x onerror="window.__xss = 1">',
    "[more](javascript:window.__xss=2)\n\n",
    *[f"- item {i}\n" for i in range(12)],
]


def test_a_streaming_answer_is_markdown_while_it_streams(
    served: tuple[LiveServer, Upstream], browser: Browser
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    upstream = served[1]
    upstream.script(Reply(events=text_stream(*STREAMED), delay=0.4))
    for viewport in (DESKTOP, PHONE):
        page = _page(browser, served, viewport)
        page.goto(f"{base}/playground?target=action:SHOP")
        page.get_by_label("Prompt", exact=True).fill("What do I pack?")
        page.get_by_role("button", name="Send").click()
        live = page.locator(".bubble.assistant .markdown").last
        # Rendered while the turn still runs: the heading and bold text, before the list ends.
        expect(live.locator("h1")).to_have_text("Packing list")
        expect(live.locator("strong")).to_have_text("linen")
        expect(live.locator("li").first).to_have_text("item 0")
        assert page.locator("body").get_attribute("data-turns") is None
        expect(page.get_by_role("button", name="Stop")).to_be_visible()
        # Sanitised as it grows: nothing the model wrote runs, no image is fetched.
        assert live.locator("img, [onerror], a[href^='javascript']").count() == 0
        _axe(page)
        expect(page.locator("body")).to_have_attribute("data-turns", "1")
        final = page.locator(".bubble.assistant .markdown").last
        expect(final.locator("li")).to_have_count(12)
        assert page.evaluate("window.__xss === undefined")
        assert page.evaluate(FITS)
        page.context.close()
        upstream.script(Reply(events=text_stream(*STREAMED), delay=0.4))
