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

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browser_ui import (
    DESKTOP,
    PHONE,
    Served,
    chromium,
    serve_catalog,
)
from browser_ui import api as _api
from browser_ui import axe as _axe
from browser_ui import base as _base
from browser_ui import logged_in_page as _page
from browser_ui import shots as _shots
from fault_upstream import Reply, text_stream

pytestmark = pytest.mark.real

if TYPE_CHECKING:
    from playwright.sync_api import Browser

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
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve_catalog(tmp_path_factory.mktemp("workbench"), CATALOG, "WB_UP_KEY") as both:
        yield both


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[Browser]:
    del served  # the server first: Chromium is launched only when serving worked
    with chromium() as launched:
        yield launched


def test_compare_sends_one_prompt_to_each_column_with_tokens_cost_and_latency(
    served: Served, browser: Browser
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


def test_a_streaming_answer_is_markdown_while_it_streams(served: Served, browser: Browser) -> None:
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


OFFICE = "# Office\n\n" + "\n\n".join(
    f"## Room {i}\n\nRoom {i} has {i + 2} desks, a whiteboard and a window facing the yard."
    for i in range(8)
)


def test_a_collection_page_uploads_with_progress_shows_chunks_and_searches(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    shots = _shots()
    (tmp_path / "office.md").write_text(OFFICE)
    (tmp_path / "cat.txt").write_text("The office cat Pixel sleeps on the printer in room 4.")
    page = _page(browser, served, DESKTOP)
    page.get_by_role("link", name="Knowledge", exact=True).click()
    page.wait_for_url(re.compile(r"/knowledge$"))
    _axe(page)
    page.get_by_role("link", name="OFFICE").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Office facts")
    expect(page.locator("#documents")).to_contain_text("No documents yet.")
    page.get_by_label("Files").set_input_files([tmp_path / "office.md", tmp_path / "cat.txt"])
    page.get_by_role("button", name="Upload").click()
    # The first upload loads the embedding model: on a busy machine that takes a while.
    page.wait_for_function(
        "document.body.dataset.uploads || document.querySelector('#upload-log .error')",
        timeout=240_000,
    )
    assert page.locator("#upload-log .error").count() == 0, page.locator("#upload-log").inner_text()
    expect(page.locator("body")).to_have_attribute("data-uploads", "1")
    # Each document's steps were shown as they came, then the whole.
    log = page.locator("#upload-log")
    expect(log).to_contain_text("office.md: reading…")
    expect(log).to_contain_text(re.compile(r"office\.md: added, \d+ chunks"))
    expect(log).to_contain_text("cat.txt: added, 1 chunks")
    expect(page.get_by_role("status").filter(has_text="Done:")).to_have_text(
        "Done: 2 added, 0 replaced, 0 unchanged, 0 failed."
    )
    assert page.locator("#upload-progress").evaluate("bar => bar.value") == 100
    # The documents list was refreshed; a document's chunks open in document order.
    documents = page.locator("#documents")
    expect(documents).to_contain_text("cat.txt")
    page.get_by_role("button", name="Chunks of office.md").click()
    chunks = page.locator("#chunks")
    expect(chunks).to_contain_text("Chunks of office.md")
    first = chunks.locator(".chunk-list > li").first
    expect(first).to_contain_text("Chunk 1 · Office > Room 0")
    expect(first).to_contain_text("Room 0 has 2 desks")
    expect(chunks.locator(".chunk-list > li").nth(1)).to_contain_text("Room 1 has 3 desks")
    # A search shows each hit with its similarity and score, best first.
    page.get_by_label("Query").fill("Where does the cat sleep?")
    page.get_by_role("button", name="Search").click()
    best = page.locator("#hits table.hits tbody tr").first
    expect(best).to_contain_text("cat.txt")
    similarity = float(best.locator(".similarity").inner_text())
    assert 0.1 < similarity <= 1.0
    assert float(best.locator(".score").inner_text()) > 0
    _axe(page)
    if shots:
        page.screenshot(path=str(shots / "knowledge-1280x800.png"), full_page=True)
    page.set_viewport_size(PHONE)
    page.reload()
    page.get_by_role("button", name="Chunks of cat.txt").click()
    expect(page.locator("#chunks")).to_contain_text("Pixel sleeps")
    assert page.evaluate(FITS)
    _axe(page)
    page.context.close()


@pytest.mark.parametrize(
    ("path", "script", "button", "form"),
    [
        ("/knowledge/OFFICE", "knowledge.js", "Upload", "#upload-form"),
        ("/compare", "compare.js", "Compare", "#compare-form"),
        ("/playground", "playground.js", "Send", "#composer"),
    ],
)
def test_a_form_waits_for_the_script_that_handles_it(
    served: Served, browser: Browser, path: str, script: str, button: str, form: str
) -> None:
    """Submitted before its deferred script ran, a form submitted natively and lost its input."""
    from playwright.sync_api import Route, expect

    page = _page(browser, served, DESKTOP)
    held: list[Route] = []
    page.route(f"**/static/{script}", lambda route: held.append(route))
    page.goto(f"{_base(served)}{path}", wait_until="commit")
    send = page.get_by_role("button", name=button, exact=True)
    expect(send).to_be_disabled()
    page.wait_for_function("document.readyState !== 'loading'")
    assert len(held) == 1
    # The page is parsed but its script is still on the way: the button stays
    # disabled, and a submit by other means (Enter in a field) is stopped.
    expect(send).to_be_disabled()
    page.evaluate(
        """(selector) => {
            window.keptDocument = true;
            const form = document.querySelector(selector);
            form.noValidate = true;  // submit even with its required fields empty
            form.requestSubmit();
        }""",
        form,
    )
    held[0].continue_()
    expect(send).to_be_enabled()
    # Still the same document: a native submit would have loaded the page again.
    assert page.evaluate("window.keptDocument === true")
    assert len(held) == 1
    page.context.close()


def test_the_memory_page_browses_edits_forgets_exports_and_erases_a_user(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    shots = _shots()
    with _api(served) as api:
        for text in ("Maya prefers linen shirts.", "Maya wears size M.", "Maya lives in Porto."):
            added = api.post("/memory", json={"scope": "user", "user_id": "maya", "content": text})
            assert added.status_code == 201, added.text
        api.post("/memory", json={"scope": "user", "user_id": "noah", "content": "Noah: XL."})
    for viewport in (DESKTOP, PHONE):
        page = _page(browser, served, viewport)
        page.goto(f"{base}/knowledge")
        page.get_by_role("link", name="Users' memory").click()
        page.get_by_label("User id").fill("maya" if viewport is DESKTOP else "noah")
        page.get_by_role("button", name="Show memory").click()
        # The button submits a form: wait for the new page before axe adds
        # its script, which needs the new document.
        page.wait_for_url(re.compile(r"/memory\?user="))
        expect(page.locator("#memory-records")).to_be_visible()
        _axe(page)
        if viewport is PHONE:
            expect(page.locator(".memory-record")).to_have_count(1)
            assert page.evaluate(FITS)
            page.context.close()
            continue
        records = page.locator(".memory-record")
        expect(records).to_have_count(3)
        expect(page.locator("#memory-records")).not_to_contain_text("Noah")
        # Edit one record.
        page.get_by_role("button", name="Edit: Maya wears size M.").click()
        edit = records.filter(has_text="Maya wears size M.").get_by_label("Content")
        edit.fill("Maya wears size L.")
        records.filter(has_text="Maya wears size M.").get_by_role("button", name="Save").click()
        expect(page.get_by_role("status")).to_contain_text("Saved “Maya wears size L.”")
        expect(page.locator(".memory-content").filter(has_text="size L")).to_be_visible()
        if shots:
            page.screenshot(path=str(shots / "memory-1280x800.png"))
        # Forget another.
        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Forget: Maya lives in Porto.").click()
        expect(page.get_by_role("status")).to_have_text("Forgotten.")
        expect(records).to_have_count(2)
        # Export: the user's whole record as JSON.
        with page.expect_download() as download_info:
            page.get_by_role("link", name="Export (JSON)").click()
        exported = tmp_path / "maya.json"
        download_info.value.save_as(exported)
        text = exported.read_text()
        assert "size L" in text and "Porto" not in text and "Noah" not in text
        # Erase: only once the id is typed again.
        page.get_by_label("Type the user id to confirm").fill("mya")
        page.get_by_role("button", name="Erase user").click()
        expect(page.get_by_role("alert")).to_contain_text("nothing was erased")
        expect(records).to_have_count(2)
        page.get_by_label("Type the user id to confirm").fill("maya")
        page.get_by_label("Reason (kept with the erasure)").fill("asked by Maya")
        page.get_by_role("button", name="Erase user").click()
        expect(page.get_by_role("status")).to_contain_text("Erased: 2 memory records")
        expect(page.locator("#memory-records")).to_contain_text("No memory of maya")
        _axe(page)
        page.context.close()
    with _api(served) as api:
        left = api.get("/memory", params={"scope": "user", "user_id": "noah"}).json()
        assert [r["content"] for r in left["items"]] == ["Noah: XL."]


def test_catalog_tables_search_and_page(served: Served, browser: Browser) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    shots = _shots()
    with _api(served) as api:
        for i in range(30):
            name = "Quiet preset" if i % 10 == 3 else f"Preset {i}"
            made = api.post(
                "/catalog/configurations",
                json={"code": f"Y{i:03d}", "name": name, "max_tokens": 64},
            )
            assert made.status_code == 201, made.text
        total = len(api.get("/catalog/configurations").json()["items"])
    page = _page(browser, served, DESKTOP)
    page.goto(f"{base}/catalog/configurations")
    rows = page.locator("table.entities tbody tr")
    expect(rows).to_have_count(25)
    expect(page.locator("#catalog-count")).to_have_text(f"{total} in all · page 1 of 2")
    _axe(page)
    page.get_by_role("link", name="Next page").click()
    expect(page.locator("#catalog-count")).to_have_text(f"{total} in all · page 2 of 2")
    expect(rows).to_have_count(total - 25)
    page.get_by_label("Search configurations").fill("quiet")
    page.get_by_role("button", name="Search", exact=True).click()
    expect(rows).to_have_count(3)
    expect(page.locator("#catalog-count")).to_have_text(f"3 of {total} match “quiet”")
    expect(rows.first).to_contain_text("Quiet preset")
    _axe(page)
    if shots:
        page.screenshot(path=str(shots / "catalog-search-1280x800.png"))
    page.get_by_role("link", name="Show all").click()
    expect(rows).to_have_count(25)
    page.set_viewport_size(PHONE)
    page.goto(f"{base}/catalog/configurations?q=Y01")
    expect(rows).to_have_count(10)
    assert page.evaluate(FITS)
    _axe(page)
    page.context.close()
