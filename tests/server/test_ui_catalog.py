"""The catalog UI: list, create, edit, delete every kind, with the importer's messages.

Forms are built from the kinds' specs; a refused form shows exactly what
``pilothouse catalog import`` prints for the same entity; a stale edit is a
conflict that keeps the user's input.
"""

from __future__ import annotations

import re
from typing import get_args

import httpx
import pytest

from pilothouse.errors import CatalogValidationError
from pilothouse.server._catalog_routes import KindName
from pilothouse.server._state import ServerState

pytestmark = pytest.mark.anyio

KINDS = get_args(KindName)


async def _login(client: httpx.AsyncClient, key: str) -> None:
    # A browser names the page's origin on every POST; the UI refuses any other.
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303


@pytest.mark.parametrize("kind", KINDS)
async def test_every_kind_has_a_list_and_a_form(
    client: httpx.AsyncClient, admin_key: str, kind: str
) -> None:
    await _login(client, admin_key)
    listed = await client.get(f"/catalog/{kind}")
    assert listed.status_code == 200
    form = await client.get(f"/catalog/{kind}/new")
    assert form.status_code == 200
    # Every field has a label bound to its control.
    for control in re.findall(r'id="(f-[a-z_]+)"', form.text):
        assert f'for="{control}"' in form.text or f'id="{control}"' in form.text


async def test_create_an_action_with_reference_pickers(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(client, admin_key)
    form = (await client.get("/catalog/actions/new")).text
    # References are pickers of the target kind's keys.
    assert re.search(r'<select id="f-model" name="model"[^>]*>', form)
    assert "<option >QWEN05</option>" in form or "<option>QWEN05</option>" in form
    assert re.search(r'<select id="f-skills" name="skills"[^>]*multiple', form)
    created = await client.post(
        "/catalog/actions/new",
        data={
            "code": "GREET",
            "name": "Greet",
            "model": "QWEN05",
            "configuration": "DFLT",
            "prompt": "Greet the user: {input}",
            "ask_user": "on",
            "question_timeout": "300",
        },
    )
    assert created.status_code == 303, created.text
    assert created.headers["location"].startswith("/catalog/actions?notice=Created")
    entry = await server_state.pilothouse.catalog.get("actions", "GREET")
    assert entry.document["model"] == "QWEN05" and entry.document["prompt"].startswith("Greet")
    listed = await client.get("/catalog/actions")
    assert "GREET" in listed.text


async def test_a_refused_form_shows_the_importers_own_messages(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(client, admin_key)
    document = {"code": "BAD", "model": "NOSUCH", "configuration": "DFLT", "prompt": "x"}
    refused = await client.post("/catalog/actions/new", data=document)
    assert refused.status_code == 422
    # The same document through the importer's path gives the same message.
    with pytest.raises(CatalogValidationError) as caught:
        await server_state.pilothouse.catalog.create("actions", document)
    for issue in caught.value.issues:
        assert str(issue).replace("'", "&#39;") in refused.text
    assert 'aria-invalid="true"' in refused.text
    # What the user typed is kept.
    assert 'value="BAD"' in refused.text
    missing = await client.post("/catalog/actions/new", data={"code": "NOPROMPT"})
    assert missing.status_code == 422 and "prompt" in missing.text
    unknown = await client.post("/catalog/personas/new", data={"code": "P", "colour": "red"})
    assert unknown.status_code == 422 and "colour: is no field of persona" in unknown.text


async def test_an_edit_against_a_stale_version_is_a_conflict(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(client, admin_key)
    page = await client.get("/catalog/personas/EDITOR")
    assert page.status_code == 200
    version = int(re.search(r'name="version" value="(\d+)"', page.text).group(1))  # type: ignore[union-attr]
    entry = await server_state.pilothouse.catalog.get("personas", "EDITOR")
    edited = {**{k: str(v) for k, v in entry.document.items()}, "version": str(version)}
    edited["prompt"] = "Be very brief."
    saved = await client.post("/catalog/personas/EDITOR", data=edited)
    assert saved.status_code == 303, saved.text
    assert "version" in saved.headers["location"]
    edited["prompt"] = "Be chatty."
    stale = await client.post("/catalog/personas/EDITOR", data=edited)
    assert stale.status_code == 409
    assert "Version conflict" in stale.text
    assert f"you edited version {version}, it is now version {version + 1}" in stale.text
    assert "Be chatty." in stale.text
    stored = await server_state.pilothouse.catalog.get("personas", "EDITOR")
    assert stored.document["prompt"] == "Be very brief."


async def test_delete_names_the_referrers_or_removes(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(client, admin_key)
    used = await client.post("/catalog/models/QWEN05/delete", data={})
    assert used.status_code == 409 and "SUMBRAND" in used.text
    created = await client.post("/catalog/personas/new", data={"code": "GONE", "prompt": "x"})
    assert created.status_code == 303, created.text
    removed = await client.post("/catalog/personas/GONE/delete", data={"version": "1"})
    assert removed.status_code == 303
    assert await server_state.pilothouse.catalog.list_entries("personas") != []
    with pytest.raises(Exception, match="GONE"):
        await server_state.pilothouse.catalog.get("personas", "GONE")


async def test_catalog_writes_need_an_admin_key(client: httpx.AsyncClient, api_key: str) -> None:
    await _login(client, api_key)
    form = await client.get("/catalog/personas/EDITOR")
    assert "Read-only" in form.text
    refused = await client.post("/catalog/personas/new", data={"code": "X", "prompt": "x"})
    assert refused.status_code == 403


def test_the_catalog_navigation_groups_every_kind_once() -> None:
    from pilothouse.server._ui._catalog import GROUPS, KINDS

    grouped = [kind for _, members in GROUPS for kind in members]
    assert sorted(grouped) == sorted(KINDS) and len(grouped) == len(set(grouped)) == len(KINDS)
