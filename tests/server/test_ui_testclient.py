"""The browser UI through FastAPI's TestClient: the app as ``pilothouse serve`` builds it.

The other UI tests share the service fixtures (an async client); this one
builds the app from settings alone, with its own state and lifespan, as a
deployment does, and walks login, a page, a fragment and the assets.
"""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from pilothouse.server import create_app
from pilothouse.settings import Settings

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"


def test_login_pages_fragments_and_assets_with_testclient(tmp_path: Path) -> None:
    # The examples name @secrets(OPENAI_API_KEY): the default tenant has it.
    secrets = tmp_path / "secrets.env"
    secrets.write_text("OPENAI_API_KEY=sk-unused-by-this-test\n", encoding="utf-8")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ui.db'}", secrets_file=secrets
    )
    app = create_app(settings)
    # A browser names the page's origin on every POST (the UI refuses any other).
    with TestClient(app, follow_redirects=False, headers={"Origin": "http://testserver"}) as client:
        ph = app.state.pilothouse.pilothouse
        client.portal.call(ph.catalog.import_files, [EXAMPLES])  # pyright: ignore[reportOptionalMemberAccess]
        key, _ = client.portal.call(lambda: ph.keys.create(name="ui"))  # pyright: ignore[reportOptionalMemberAccess]
        assert client.get("/playground").headers["location"] == "/login"
        login = client.get("/login")
        assert login.status_code == 200 and '<label for="api_key">API key</label>' in login.text
        logged = client.post("/login", data={"api_key": key})
        assert logged.status_code == 303 and logged.headers["location"] == "/playground"
        page = client.get("/playground")
        assert page.status_code == 200 and 'value="action:SUMBRAND"' in page.text
        settings_panel = client.get("/ui/settings", params={"target": "action:SUMBRAND"})
        assert 'id="opt-temperature"' in settings_panel.text and "PREC" in settings_panel.text
        catalog = client.get("/catalog/models")
        assert "QWEN05" in catalog.text
        for asset in ("/static/vendor/htmx.min.js", "/static/vendor/alpine.min.js"):
            assert client.get(asset).status_code == 200
        assert "/static/vendor/swagger-ui-bundle.js" in client.get("/docs").text
