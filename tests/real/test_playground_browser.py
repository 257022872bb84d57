"""The playground and the catalog UI in a real browser: Debian's Chromium driven by Playwright.

A real ``pilothouse serve`` (example catalog, a fresh SQLite file) is driven
through one whole session: log in with an API key, create an action in the
catalog UI, chat with it on the packaged local model (SmolLM2 on llama.cpp,
streamed), edit a prompt and resubmit it, answer a question the model asks,
export the conversation and import it again, switch RAG on for a
collection a small text was ingested into (packaged MiniLM) and find the
retrieval in the timeline viewer. The question comes from a
scripted OpenAI-compatible upstream on loopback (``fault_upstream``): a
135M-parameter model does not reliably ask one.

Playwright never downloads a browser here: it launches ``/usr/bin/chromium``
(``make install`` installs it with apt). With ``PILOTHOUSE_SCREENSHOTS=<dir>``
(``make screenshots``) the screenshots of ``docs/playground.md`` are written
there, at 1280×800 and at phone width.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from browser_ui import CHROMIUM, Served, serve_catalog
from browser_ui import shots as _shots
from fault_upstream import Reply, chunk, completion, text_stream

pytestmark = pytest.mark.real

ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT = 240_000
"""Milliseconds a step may take: the local model starts on the first turn."""

if TYPE_CHECKING:
    from playwright.sync_api import ViewportSize

OFFICE = "The office cat is called Pixel. Pixel sleeps on the printer in room 4 and is fed at noon."
"""The text the RAG step ingests."""

DESKTOP: ViewportSize = {"width": 1280, "height": 800}
PHONE: ViewportSize = {"width": 390, "height": 844}


# The question-asking action runs on the scripted upstream.
CATALOG = """
providers:
  - code: UP
    kind: openai
    base_url: {upstream}
    api_key: "@secrets(PLAYGROUND_UP_KEY)"
models:
  - code: UPM
    provider: UP
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0.5
    output_price: 1.5
vector_stores:
  - code: EMBED
document_collections:
  - code: OFFICE
    name: Office facts
    store: EMBED
    collection_name: office
    similarity_threshold: 0.1
    qa_model: UPM                 # the collection's own model: the scripted upstream
actions:
  - code: SHIRTS
    name: Order a shirt
    model: UPM
    configuration: DFLT
    prompt: "Help the user order a shirt: {{input}}"
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'pilothouse[local]'")
    # The served process reads the scripted upstream's key from its environment,
    # where the operator maps it to the tenant (docs/security.md#secrets).
    folder = tmp_path_factory.mktemp("browser")
    with serve_catalog(folder, CATALOG, "PLAYGROUND_UP_KEY") as both:
        yield both


def test_a_whole_playground_session_in_chromium(served: Served, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    server, upstream = served
    base = server.base_url.removesuffix("/v1")
    shots = _shots()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        context = browser.new_context(viewport=DESKTOP, accept_downloads=True)
        page = context.new_page()
        page.set_default_timeout(WAIT)
        expect.set_options(timeout=WAIT)

        # Log in with the API key.
        page.goto(f"{base}/")
        expect(page).to_have_url(re.compile(r"/login$"))
        page.get_by_label("API key").fill(server.key)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(re.compile(r"/playground$"))

        # Create an action in the catalog UI; the model is picked from the catalog's models.
        page.goto(f"{base}/catalog/actions/new")
        page.locator("#f-code").fill("COLORS")
        page.locator("#f-name").fill("Name colors")
        page.locator("#f-model").select_option("SMOLLM2")
        page.locator("#f-configuration").select_option("DFLT")
        page.locator("#f-prompt").fill("Answer in one short sentence: {input}")
        page.locator("#f-ask_user").uncheck()
        if shots:
            page.evaluate("window.scrollTo(0, 0)")
            page.screenshot(path=str(shots / "catalog-form-1280x800.png"))
        page.get_by_role("button", name="Create").click()
        expect(page.get_by_role("status")).to_contain_text("Created action COLORS")

        # Chat with it, streamed from the local model.
        page.goto(f"{base}/playground?target=action:COLORS")
        page.get_by_label("Prompt", exact=True).fill("Name one color of the sky.")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("body")).to_have_attribute("data-turns", "1")
        cost = page.locator(".turn-cost")
        expect(cost).to_contain_text("out tokens")
        expect(cost).to_contain_text("completed")
        assert int(page.locator("body").get_attribute("data-last-deltas") or 0) >= 2
        # After a reload the turn's line comes from its record, in the live chat's words.
        live = page.locator("body").get_attribute("data-last-turn") or ""
        assert live.startswith("This turn: ") and live.endswith(" · completed"), live
        page.reload()
        expect(page.locator(".turn-cost")).to_have_text([live])
        expect(page.locator("#chat-title")).to_have_text("Name one color of the sky.")
        expect(page.locator("#conversation-list")).to_contain_text("Name one color of the sky.")
        first = page.url.split("c=")[1]
        answer = page.locator(".bubble.assistant .text").last.inner_text()
        assert answer.strip()
        if shots:
            page.screenshot(path=str(shots / "playground-1280x800.png"))

        # Edit the prompt and submit it: a fork holds the new turn; the original stays recorded.
        # The prompt's menu from the keyboard: Enter opens it, Escape closes it and gives
        # the focus back to its button.
        more = page.get_by_role("button", name="Prompt actions: Name one color of the sky.")
        more.focus()
        page.keyboard.press("Enter")
        expect(more).to_have_attribute("aria-expanded", "true")
        expect(page.get_by_role("button", name="Edit prompt")).to_be_visible()
        page.keyboard.press("Tab")
        page.keyboard.press("Escape")
        expect(more).to_have_attribute("aria-expanded", "false")
        expect(more).to_be_focused()
        more.click()
        page.get_by_role("button", name="Edit prompt").click()
        page.get_by_label("Edit prompt").fill("Name one color of grass.")
        page.get_by_role("button", name="Submit", exact=True).click()
        # The first turn since the reload above (the counter is the page's).
        expect(page.locator("body")).to_have_attribute("data-turns", "1")
        expect(page.locator(".turn-cost").last).to_contain_text("completed")
        expect(page.locator(".bubble.user .text").first).to_have_text("Name one color of grass.")
        edited = page.url.split("c=")[1]
        assert edited != first
        expect(page.locator("#chat")).to_contain_text("edited copy of")
        # The fork keeps the conversation's title; the edited prompt replaced the old one.
        expect(page.locator(".bubble.user")).to_have_count(1)
        expect(page.locator("#chat-title")).to_have_text("Name one color of the sky.")

        # The audit timeline viewer shows the fork.
        page.get_by_text("Audit timeline").click()
        expect(page.locator("table.timeline")).to_contain_text("fork")

        # The model asks a question; it is answered inline.
        ask = {
            "index": 0,
            "id": "q1",
            "type": "function",
            "function": {
                "name": "AskUserQuestion",
                "arguments": json.dumps({"question": "Which size?", "choices": ["S", "M"]}),
            },
        }
        upstream.script(
            Reply(
                events=[
                    chunk({"role": "assistant", "content": None, "tool_calls": [ask]}),
                    chunk({}, "tool_calls"),
                ]
            ),
            Reply(body=completion("Size M it is.")),
        )
        page.goto(f"{base}/playground?target=action:SHIRTS")
        page.get_by_label("Prompt", exact=True).fill("I want a shirt.")
        page.get_by_role("button", name="Send").click()
        expect(page.locator(".bubble.question")).to_contain_text("Which size?")
        page.get_by_label("M", exact=True).check()
        page.get_by_role("button", name="Answer").click()
        expect(page.locator(".bubble.assistant").last).to_contain_text("Size M it is.")
        assert "M" in json.dumps(upstream.requests[-1]["messages"][-1])
        # Both turns (the one that asked, the one the answer resumed) show their own
        # tokens and cost after a reload: UPM is priced, so neither costs nothing.
        page.reload()
        turns = page.locator(".turn-cost")
        expect(turns).to_have_count(2)
        expect(turns.first).to_contain_text(" · waiting")
        expect(turns.last).to_contain_text(" · completed")
        for line in turns.all_inner_texts():
            assert "cost $0 " not in line and re.search(r"cost \$0\.0*[1-9]", line), line

        # Export the conversation to JSON, then import it back.
        shirt = page.url.split("c=")[1]
        page.locator("#conversation-list li.current").get_by_role("button").first.click()
        with page.expect_download() as download_info:
            page.get_by_role("link", name="Export").click()
        exported = tmp_path / "conversation.json"
        download_info.value.save_as(exported)
        document = json.loads(exported.read_text())
        assert document["format"] == "pilothouse.conversation/1"
        assert document["conversation"]["uuid"] == shirt
        page.get_by_label("Import conversation").set_input_files(str(exported))
        page.get_by_role("button", name="Import", exact=True).click()
        page.wait_for_url(lambda url: "c=" in url and shirt not in url)
        expect(page.locator("#chat")).to_contain_text("Size M it is.")
        expect(page.locator("#chat-title")).to_have_text("I want a shirt.")

        # A bare model (no action): an ad-hoc run, streamed from the local model as a
        # governed turn is. Max tokens keeps the 135M model short.
        page.goto(f"{base}/playground?target=model:SMOLLM2")
        page.get_by_label("Max tokens value").fill("24")
        page.get_by_label("Prompt", exact=True).fill("Name one fruit.")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("body")).to_have_attribute("data-turns", "1")
        assert int(page.locator("body").get_attribute("data-last-deltas") or 0) >= 2
        expect(page.locator("#chat-title")).to_have_text("Name one fruit.")
        expect(page.locator("#chat .meta").first).to_contain_text("bare model SMOLLM2")
        live = page.locator("body").get_attribute("data-last-turn") or ""
        assert live.endswith(" · completed"), live
        if shots:
            page.screenshot(path=str(shots / "playground-bare-model-1280x800.png"))
        # The list and the chat were swapped in by htmx after the turn: every menu is closed.
        expect(page.locator("#conversation-list .menu:visible, #chat .menu:visible")).to_have_count(
            0
        )
        page.reload()
        expect(page.locator(".turn-cost")).to_have_text([live])
        expect(page.locator("#target")).to_have_value("model:SMOLLM2")

        # RAG (seed 004, "Testing Semantic Index"): a small text ingested into a collection
        # with the packaged MiniLM, then the RAG switch at the bottom of the Settings panel.
        ingested = httpx.post(
            f"{base}/v1/knowledge/collections/OFFICE/documents",
            json={"texts": [{"source": "office:cat", "text": OFFICE, "format": "text"}]},
            headers={"Authorization": f"Bearer {server.key}"},
            timeout=120,
        )
        assert ingested.status_code == 200, ingested.text
        assert ingested.json()["counts"]["added"] == 1
        page.goto(f"{base}/playground?target=action:COLORS")
        rag = page.get_by_role("switch", name="RAG")
        rag.focus()
        page.keyboard.press("Space")  # the switch works from the keyboard
        expect(rag).to_be_checked()
        page.get_by_label("Document collection").select_option("OFFICE")
        expect(page.get_by_label("Collection's model")).to_be_enabled()
        expect(page.locator("#rag-qa-note")).to_contain_text("its model UPM")
        page.get_by_label("Playground settings").check()
        page.get_by_label("Prompt", exact=True).fill("What is the name of the office cat?")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("body")).to_have_attribute("data-turns", "1")
        note = page.locator(".rag-note").last
        expect(note).to_contain_text("RAG: searched collection OFFICE")
        expect(note).to_contain_text("answered with the playground settings")
        page.get_by_text("Audit timeline").click()
        timeline = page.locator("table.timeline")
        expect(timeline).to_contain_text("retrieval")
        expect(timeline).to_contain_text("office:cat")
        if shots:
            page.locator("#rag").scroll_into_view_if_needed()
            page.screenshot(path=str(shots / "playground-rag-1280x800.png"))
        # "Collection's model": its qa_model answers, without the playground's settings.
        # (Its qa_model is the scripted upstream's, so the answer shows who gave it.)
        # The ad-hoc run on it streams, as every playground turn does.
        upstream.script(Reply(events=text_stream("Pixel is ", "the office ", "cat [1].")))
        page.get_by_label("Collection's model").check()
        page.get_by_label("Prompt", exact=True).fill("Who is Pixel?")
        page.get_by_role("button", name="Send").click()
        expect(page.locator("body")).to_have_attribute("data-turns", "2")
        expect(page.locator("body")).to_have_attribute("data-last-deltas", "3")
        expect(page.locator(".bubble.assistant").last).to_contain_text("Pixel is the office cat")
        note = page.locator(".rag-note").last
        expect(note).to_contain_text("answered by the collection's model UPM")
        asked = upstream.requests[-1]
        assert asked["model"] == "scripted" and asked["stream"] is True
        assert "The office cat is called Pixel" in json.dumps(asked["messages"][0])
        assert "temperature" not in asked  # the playground's settings are not sent
        page.get_by_text("Audit timeline").click()
        expect(page.locator("table.timeline")).to_contain_text("office:cat")

        # Phone width: the chat is usable, the panels open from buttons.
        phone = browser.new_context(viewport=PHONE)
        small = phone.new_page()
        small.set_default_timeout(WAIT)
        small.goto(f"{base}/login")
        small.get_by_label("API key").fill(server.key)
        small.get_by_role("button", name="Log in").click()
        small.goto(f"{base}/playground?c={edited}")
        expect(small.get_by_label("Prompt", exact=True)).to_be_visible()
        expect(small.get_by_role("button", name="Send")).to_be_visible()
        small.get_by_role("button", name="Conversations").click()
        expect(small.locator("#conversation-list")).to_be_visible()
        fits = "document.documentElement.scrollWidth <= window.innerWidth"
        assert small.evaluate(fits)  # nothing wider than the phone's screen
        # The panels are drawers over the chat: this one closes, then Settings opens and
        # its tab takes the focus.
        small.locator("#conversations-nav").get_by_role("button", name="Close").click()
        expect(small.locator("#conversation-list")).to_be_hidden()
        small.get_by_role("button", name="Settings", exact=True).click()
        expect(small.get_by_role("tab", name="Settings")).to_be_focused()
        expect(small.get_by_label("Max tokens value")).to_be_visible()
        if shots:
            small.screenshot(path=str(shots / "playground-phone.png"), full_page=True)
            page.goto(f"{base}/catalog/actions/COLORS")
            page.screenshot(path=str(shots / "catalog-edit-1280x800.png"))
        # The catalog's tables scroll inside the page at phone width; the page does not.
        small.goto(f"{base}/catalog/actions")
        expect(small.get_by_role("link", name="COLORS")).to_be_visible()
        assert small.evaluate(fits)
        if shots:
            small.screenshot(path=str(shots / "catalog-phone.png"))
        phone.close()
        context.close()
        browser.close()
