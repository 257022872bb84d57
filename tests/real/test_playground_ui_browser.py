"""The playground and catalog UI in Debian's Chromium: what a user does, and what they must see.

A real ``pilothouse serve`` (example catalog, a fresh SQLite file, a
scripted OpenAI-compatible upstream on loopback, so no local model is
needed) is driven by Playwright. Each test is one thing a user tries:
editing an entity keeps what they did not touch; a refusal is shown where
it happened; Stop cancels a streamed answer and keeps what was written; a
bare model's chat exports and imports back; a fork shows its system prompt
once; a duplicated configuration is offered a code that fits; both API docs
pages render with no network; a missing page is an HTML page; at phone
width Send stays on screen and Settings opens as a drawer over the chat.

Every page visited is checked with axe-core (the copy ``axe-playwright-python``
ships; nothing is downloaded): no critical or serious violation, at
1280×800 and at 390×844. ``PILOTHOUSE_SCREENSHOTS=<dir>`` (``make
screenshots``) writes the pictures of ``docs/playground.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

CATALOG = """
providers:
  - code: UP
    kind: openai
    base_url: {upstream}
    api_key: "@secrets(UI_UP_KEY)"
models:
  - code: UPM
    provider: UP
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0.5
    output_price: 1.5
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
    with serve_catalog(tmp_path_factory.mktemp("ui"), CATALOG, "UI_UP_KEY") as both:
        yield both


@pytest.fixture(scope="module")
def browser(served: Served) -> Iterator[Browser]:
    del served  # the server first: Chromium is launched only when serving worked
    with chromium() as launched:
        yield launched


def test_saving_an_edit_keeps_every_field_the_user_did_not_touch(
    served: Served, browser: Browser
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    page = _page(browser, served, DESKTOP)
    edited = 0
    with _api(served) as api:
        page.goto(f"{base}/catalog/actions")
        links = page.locator(".kinds a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
        for href in links:
            kind = href.rsplit("/", 1)[1]
            items = api.get(f"/catalog/{kind}").json()["items"]
            if not items:
                continue
            before = items[0]
            key_field = "name" if kind == "mcp_clients" else "code"
            key = before[key_field]
            page.goto(f"{base}/catalog/{kind}/{key}")
            renamed = page.locator("#f-name")
            if renamed.count() and kind != "mcp_clients":
                renamed.fill("Edited in the browser")
            with page.expect_navigation():
                page.get_by_role("button", name="Save").click()
            refused = page.locator(".error-summary, .conflict")
            assert not refused.count(), (kind, key, refused.first.inner_text())
            expect(page.get_by_role("status")).to_contain_text(f"{key} (version")
            after = api.get(f"/catalog/{kind}/{key}").json()
            for field in set(before) | set(after):
                if field in ("version", "name"):
                    continue
                assert after.get(field) == before.get(field), (kind, key, field)
            edited += 1
    assert edited >= 8
    # The edited action is still active: the playground still offers it.
    page.goto(f"{base}/playground")
    expect(page.locator("#target option[value='action:SHOP']")).to_have_count(1)
    page.context.close()


def test_refusals_are_shown_where_the_action_happened(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    page = _page(browser, served, DESKTOP)
    page.goto(f"{base}/playground?target=action:SHOP")
    # A file that is not JSON.
    junk = tmp_path / "notes.json"
    junk.write_text("this is no JSON")
    page.get_by_label("Import conversation").set_input_files(str(junk))
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.locator("#import-notice")).to_contain_text("not a JSON export")
    # An export of an action this tenant does not have (422).
    foreign = tmp_path / "foreign.json"
    foreign.write_text(
        json.dumps(
            {
                "format": "pilothouse.conversation/1",
                "conversation": {"action_code": "NOPE", "agent_code": None, "messages": []},
            }
        )
    )
    page.get_by_label("Import conversation").set_input_files(str(foreign))
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.locator("#import-notice")).to_contain_text("NOPE")
    # "Update configuration" on a version someone else changed meanwhile (409).
    expect(page.locator("#settings-form")).to_be_visible()
    with _api(served) as api:
        current = api.get("/catalog/configurations/DFLT").json()
        changed = api.put("/catalog/configurations/DFLT", json={**current, "temperature": 0.3})
        assert changed.status_code == 200, changed.text
    page.get_by_label("Temperature value").fill("0.9")
    page.get_by_role("button", name="Update configuration").click()
    expect(page.locator("#settings-panel [role=alert]")).to_contain_text("changed by someone else")
    _axe(page)
    page.context.close()


def test_stop_cancels_a_streamed_answer_and_keeps_what_was_written(
    served: Served, browser: Browser
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    upstream = served[1]
    upstream.script(Reply(events=text_stream(*[f"word{i} " for i in range(60)]), delay=0.5))
    page = _page(browser, served, DESKTOP)
    page.goto(f"{base}/playground?target=action:SHOP")
    page.get_by_label("Prompt", exact=True).fill("Tell me a long story.")
    page.get_by_role("button", name="Send").click()
    expect(page.locator(".bubble.assistant .text").last).to_contain_text("word1 ")
    stop = page.get_by_role("button", name="Stop")
    expect(stop).to_be_visible()
    stop.click()
    expect(page.locator("#stream-status")).to_have_text("Stopped.")
    expect(stop).to_be_hidden()
    expect(page.locator("#chat .status")).to_have_text("terminated")
    page.reload()
    kept = page.locator(".bubble.assistant").last
    expect(kept).to_contain_text("word0 word1 ")
    expect(kept.locator(".stopped")).to_be_visible()
    assert "word59" not in kept.inner_text()
    page.context.close()


def test_round_trips_bare_model_import_fork_prompt_and_duplicate_code(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    upstream = served[1]
    page = _page(browser, served, DESKTOP)
    # A bare model's chat exports, and its export imports back.
    upstream.script(Reply(events=text_stream("Apples ", "are red.")))
    page.goto(f"{base}/playground?target=model:UPM")
    page.get_by_label("Prompt", exact=True).fill("Name a fruit.")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("body")).to_have_attribute("data-turns", "1")
    bare = page.url.split("c=")[1]
    page.locator("#conversation-list li.current").get_by_role("button").first.click()
    with page.expect_download() as download_info:
        page.get_by_role("link", name="Export").click()
    exported = tmp_path / "bare.json"
    download_info.value.save_as(exported)
    page.get_by_label("Import conversation").set_input_files(str(exported))
    page.get_by_role("button", name="Import", exact=True).click()
    page.wait_for_url(lambda url: "c=" in url and bare not in url)
    expect(page.locator("#chat")).to_contain_text("Apples are red.")
    expect(page.locator("#chat .meta").first).to_contain_text("bare model UPM")

    # A fork (edit and submit) shows the system prompt once.
    upstream.script(
        Reply(events=text_stream("A blue shirt.")), Reply(events=text_stream("A red one."))
    )
    page.goto(f"{base}/playground?target=action:SHOP")
    page.get_by_label("Prompt", exact=True).fill("A shirt, please.")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("body")).to_have_attribute("data-turns", "1")
    page.get_by_role("button", name="Prompt actions: A shirt, please.").click()
    page.get_by_role("button", name="Edit prompt").click()
    page.get_by_label("Edit prompt").fill("A red shirt, please.")
    page.get_by_role("button", name="Submit", exact=True).click()
    expect(page.locator("#chat")).to_contain_text("A red one.")
    expect(page.locator("#chat")).to_contain_text("edited copy of")
    expect(page.locator("details.system")).to_have_count(1)

    # "Duplicate configuration" offers a code that fits the codes' four characters.
    code = page.locator("#new_code")
    expect(code).to_have_attribute("maxlength", "4")
    suggested = code.input_value()
    assert suggested and len(suggested) <= 4 and suggested != "DFLT", suggested
    page.get_by_role("button", name="Duplicate configuration").click()
    expect(page.locator("#settings-panel [role=status]")).to_contain_text(
        f"Configuration {suggested} created"
    )
    _axe(page)
    page.context.close()


def test_both_api_docs_pages_render_with_no_network(served: Served, browser: Browser) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    page = _page(browser, served, DESKTOP)
    page.goto(f"{base}/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("pilothouse")
    page.goto(f"{base}/redoc")
    expect(
        page.get_by_text("Ingest documents: files (multipart), URLs or texts").first
    ).to_be_attached()
    assert "Invalid reference token" not in page.locator("body").inner_text()
    page.context.close()


def test_a_missing_page_is_an_html_page_for_a_browser(served: Served, browser: Browser) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    for viewport in (DESKTOP, PHONE):
        page = _page(browser, served, viewport)
        response = page.goto(f"{base}/catalog/actions/NOPE")
        assert response is not None and response.status == 404
        assert response.headers["content-type"].startswith("text/html")
        expect(page.get_by_role("heading", level=1)).to_contain_text("Not Found")
        expect(page.locator("main")).to_contain_text("NOPE")
        expect(page.get_by_role("link", name="Catalog").first).to_be_visible()
        _axe(page)
        page.context.close()
    # The REST API still answers problem+json.
    with _api(served) as api:
        assert (
            api.get("/catalog/actions/NOPE")
            .headers["content-type"]
            .startswith("application/problem+json")
        )


def _long_conversation(path: Path) -> Path:
    messages: list[dict[str, Any]] = []
    for i in range(12):
        messages.append({"role": "US", "content": f"Question {i}: which shirt?"})
        messages.append({"role": "AS", "content": f"Answer {i}: " + "a fine shirt " * 12})
    path.write_text(
        json.dumps(
            {
                "format": "pilothouse.conversation/1",
                "title": "A long chat",
                "conversation": {"action_code": "SHOP", "agent_code": None, "messages": messages},
            }
        )
    )
    return path


def test_at_phone_width_send_stays_on_screen_and_settings_is_a_drawer(
    served: Served, browser: Browser, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    shots = _shots()
    page = _page(browser, served, PHONE)
    page.goto(f"{base}/playground?target=action:SHOP")
    page.get_by_role("button", name="Conversations").click()
    page.get_by_label("Import conversation").set_input_files(
        str(_long_conversation(tmp_path / "long.json"))
    )
    page.get_by_role("button", name="Import", exact=True).click()
    page.wait_for_url(lambda url: "c=" in url)
    expect(page.locator("#chat")).to_contain_text("Answer 11")
    send = page.get_by_role("button", name="Send")
    expect(send).to_be_in_viewport()
    _axe(page)
    page.locator(".bubble.assistant").last.scroll_into_view_if_needed()
    expect(send).to_be_in_viewport()
    page.evaluate("window.scrollTo(0, 0)")
    expect(send).to_be_in_viewport()
    if shots:
        page.screenshot(path=str(shots / "playground-phone.png"))
    # Settings opens over the chat, where the user is, not below the composer.
    page.get_by_role("button", name="Settings", exact=True).click()
    expect(page.get_by_role("tab", name="Settings")).to_be_focused()
    expect(page.get_by_label("Max tokens value")).to_be_in_viewport()
    drawer = page.locator("#settings-side").bounding_box()
    assert drawer is not None and drawer["y"] < 100 and drawer["x"] + drawer["width"] <= 391
    fits = "document.documentElement.scrollWidth <= window.innerWidth"
    assert page.evaluate(fits)
    _axe(page)
    if shots:
        page.screenshot(path=str(shots / "playground-phone-settings.png"))
    page.keyboard.press("Escape")
    expect(page.locator("#settings-side")).to_be_hidden()
    # The catalog at phone width too.
    page.goto(f"{base}/catalog/actions")
    assert page.evaluate(fits)
    _axe(page)
    page.goto(f"{base}/catalog/actions/SHOP")
    _axe(page)
    page.context.close()


def test_the_pages_at_desktop_width_pass_axe(served: Served, browser: Browser) -> None:
    base = _base(served)
    page = _page(browser, served, DESKTOP)
    for path in ("/playground?target=action:SHOP", "/catalog/actions", "/catalog/actions/SHOP",
                 "/catalog/configurations/new"):  # fmt: skip
        page.goto(f"{base}{path}")
        _axe(page)
    page.context.close()


def test_each_prompt_has_a_readable_run_trace_and_its_code(
    served: Served, browser: Browser
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    shots = _shots()
    upstream = served[1]
    upstream.script(Reply(events=text_stream("Linen ", "is cool.")))
    page = _page(browser, served, DESKTOP)
    page.goto(f"{base}/playground?target=action:SHOP")
    page.get_by_label("Prompt", exact=True).fill("Which fabric for summer?")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("body")).to_have_attribute("data-turns", "1")
    expect(page.locator(".turn-cost")).to_contain_text(" · completed")
    uuid = page.url.split("c=")[1]
    for viewport in (DESKTOP, PHONE):
        page.set_viewport_size(viewport)
        page.goto(f"{base}/playground?c={uuid}")
        page.get_by_text("Run trace").click()
        steps = page.locator(".trace-steps")
        expect(steps).to_contain_text("not started → running")
        expect(steps).to_contain_text("model call")
        expect(steps).to_contain_text("out tokens in")
        expect(steps).to_contain_text(re.compile(r"first token after [0-9.]+ ms"))
        expect(steps).to_contain_text("running → completed")
        page.get_by_text("View code").click()
        code = page.locator("details.view-code")
        expect(code).to_contain_text("/v1/conversations/$UUID/messages")
        expect(code).to_contain_text("model='action:SHOP'")
        expect(code).to_contain_text('"model": "UPM"')
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        _axe(page)
        if shots and viewport is DESKTOP:
            page.locator(".trace-steps").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "playground-trace-1280x800.png"))
    page.context.close()


MARKDOWN_ANSWER = (
    "Use **linen**.\n\n```python\ndef pick(fabric):\n    return 'linen'\n```\n\n"
    '<img src=x onerror="window.__xss = 1"><script>window.__xss = 2</script>'
    '[click](javascript:window.__xss=3) <a href="#" onclick="window.__xss=4">here</a>'
)


def test_answers_are_markdown_highlighted_sanitised_copyable_and_regenerable(
    served: Served, browser: Browser
) -> None:
    from playwright.sync_api import expect

    base = _base(served)
    shots = _shots()
    upstream = served[1]
    upstream.script(
        Reply(events=text_stream(MARKDOWN_ANSWER[:40], MARKDOWN_ANSWER[40:])),
        Reply(events=text_stream("A second ", "answer.")),
    )
    page = _page(browser, served, DESKTOP)
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    page.goto(f"{base}/playground?target=action:SHOP")
    page.get_by_label("Prompt", exact=True).fill("Which fabric, in code?")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("body")).to_have_attribute("data-turns", "1")
    answer = page.locator(".bubble.assistant .markdown").last
    expect(answer.locator("strong")).to_have_text("linen")
    expect(answer.locator("pre code.hljs .hljs-keyword").first).to_have_text("def")
    # What a model writes is never run: no handler, script or javascript: link survives.
    assert answer.locator("script, img, [onerror], [onclick], a[href^='javascript']").count() == 0
    assert page.evaluate("window.__xss === undefined")
    uuid = page.url.split("c=")[1]
    for viewport in (DESKTOP, PHONE):
        page.set_viewport_size(viewport)
        page.goto(f"{base}/playground?c={uuid}")
        answer = page.locator(".bubble.assistant .markdown").last
        expect(answer.locator("pre code.hljs")).to_contain_text("return 'linen'")
        assert page.evaluate("window.__xss === undefined")
        _axe(page)
        if shots and viewport is DESKTOP:
            page.screenshot(path=str(shots / "playground-markdown-1280x800.png"))
    page.get_by_role("button", name="Copy code").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    assert page.evaluate("navigator.clipboard.readText()").startswith("def pick(fabric):")
    page.locator(".answer-actions").get_by_role("button", name="Copy").click()
    assert page.evaluate("navigator.clipboard.readText()") == MARKDOWN_ANSWER
    page.get_by_role("button", name="Regenerate").click()
    expect(page.locator("body")).to_have_attribute("data-turns", "1")
    expect(page.locator(".bubble.assistant .markdown").last).to_have_text("A second answer.")
    expect(page.locator(".bubble.assistant")).to_have_count(1)
    assert page.url.split("c=")[1] != uuid
    # The two answers are two versions of one conversation: one list entry, ‹ 2/2 › in the chat.
    versions = page.get_by_role("navigation", name="Versions of this conversation")
    expect(versions).to_contain_text("version 2/2")
    entries = page.locator("#conversation-list li", has_text="Which fabric, in code?")
    expect(entries).to_have_count(1)
    _axe(page)
    versions.get_by_role("link", name="Previous version").click()
    expect(versions).to_contain_text("version 1/2")
    expect(page.locator(".bubble.assistant .markdown strong")).to_have_text("linen")
    versions.get_by_role("link", name="Next version").click()
    # Rendered: the page's scripts ran, so htmx listens to the search box typed in next.
    expect(page.locator(".bubble.assistant .markdown.rendered").last).to_have_text(
        "A second answer."
    )
    # Find: the search box keeps the conversations whose title or text holds the words.
    page.set_viewport_size(DESKTOP)
    search = page.get_by_label("Search conversations")
    search.fill("SECOND ANSWER")
    expect(page.locator("#conversation-list li")).to_have_count(1)
    expect(page.locator("#conversation-list li")).to_contain_text("Which fabric, in code?")
    search.fill("no such words_%")
    expect(page.locator("#conversation-list li.empty")).to_contain_text("No conversation holds")
    _axe(page)
    # At phone width the search is in the Conversations drawer.
    page.set_viewport_size(PHONE)
    page.reload()
    page.get_by_role("button", name="Conversations").click()
    page.get_by_label("Search conversations").fill("linen")
    # The search event too (Enter): an input event sent before the reloaded
    # page's htmx listens is not lost.
    page.get_by_label("Search conversations").press("Enter")
    listed = page.locator("#conversation-list li")
    # One entry stands for all versions of a conversation; which version's
    # title it shows depends on what else the module's server holds.
    expect(listed.filter(has_text="Name a fruit.")).to_have_count(0)
    expect(listed.filter(has_text="Which fabric")).not_to_have_count(0)
    _axe(page)
    page.context.close()
