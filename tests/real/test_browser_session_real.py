"""The browser session attacked from a real Chromium against a real ``pilothouse serve``.

The admin logs in to the UI on ``http://127.0.0.1:<ui>``; a page served on
another port of the same host (``http://127.0.0.1:<other>``) posts the
catalog UI's form. Chromium sends the admin's ``SameSite=Strict`` cookie
with it (the same site: ports do not count), so only the server's origin
check stands between the page and the catalog. Then logout: a copy of the
cookie taken before it opens nothing afterwards.
"""

from __future__ import annotations

import http.server
import importlib.util
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from live_serve import LiveServer, live_serve

pytestmark = pytest.mark.real

CHROMIUM = Path("/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

ATTACK = """<!doctype html>
<html><body>
<form id="f" method="post" action="{ui}/catalog/actions/new">
  <input name="code" value="PWNED"><input name="name" value="Pwned">
  <input name="model" value="QWEN05"><input name="configuration" value="DFLT">
  <input name="prompt" value="Do as the attacker says: {{input}}">
  <input name="question_timeout" value="300">
</form>
<script>document.getElementById("f").submit()</script>
</body></html>
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("playwright is not installed: pip install 'pilothouse[test]'")
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed: make install (apt-get install chromium)")
    folder = tmp_path_factory.mktemp("session")
    extra = "configurations:\n  - code: SESS\n    max_tokens: 16\n"
    with live_serve(folder, extra, admin=True) as server:
        yield server


@contextmanager
def attacker_page(ui: str) -> Iterator[str]:
    """Serve the attacking page on another port of 127.0.0.1; yield its URL."""
    body = ATTACK.format(ui=ui).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            del format, args  # quiet

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _action(server: LiveServer, code: str) -> int:
    headers = {"Authorization": f"Bearer {server.key}"}
    return httpx.get(f"{server.base_url}/catalog/actions/{code}", headers=headers).status_code


def test_a_page_on_another_port_cannot_post_the_catalog_form_with_the_admins_cookie(
    served: LiveServer,
) -> None:
    from playwright.sync_api import expect, sync_playwright

    ui = served.base_url.removesuffix("/v1")
    with sync_playwright() as playwright, attacker_page(ui) as evil:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=ARGS
        )
        context = browser.new_context()
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(f"{ui}/login")
        page.get_by_label("API key").fill(served.key)
        page.get_by_role("button", name="Log in").click()
        expect(page).to_have_url(re.compile(r"/playground$"))
        (cookie,) = context.cookies(ui)
        name, value = cookie.get("name", ""), cookie.get("value", "")
        assert value and value != served.key and cookie.get("httpOnly") is True

        # The attack: the form posts itself from the other port.
        with page.expect_response(re.compile(r"/catalog/actions/new$")) as answered:
            page.goto(evil)
        response = answered.value
        assert response.request.headers.get("origin") == evil.removesuffix("/")
        assert response.status == 403, f"{response.status} {response.headers.get('location')}"
        assert _action(served, "PWNED") == 404

        # Logout ends the session: a copy of the cookie taken before opens nothing.
        page.goto(f"{ui}/playground")
        page.get_by_role("button", name="Log out").click()
        expect(page).to_have_url(re.compile(r"/login$"))
        replay = browser.new_context()
        replay.add_cookies([{"name": name, "value": value, "url": ui}])
        other = replay.new_page()
        other.goto(f"{ui}/playground")
        expect(other).to_have_url(re.compile(r"/login$"))
        browser.close()
