"""``pilothouse memory``: the scoped memory door on the command line."""

from __future__ import annotations

import json

from typer.testing import CliRunner, Result

from pilothouse.cli import app

runner = CliRunner()


def _memory(url: str, *args: str) -> Result:
    return runner.invoke(app, ["--database-url", url, "memory", *args])


def test_add_list_search_edit_forget_erase(database_url: str) -> None:
    added = _memory(
        database_url,
        "add",
        "Alice prefers tea.",
        "--scope",
        "user",
        "--user",
        "alice",
        "--type",
        "preference",
        "--metadata",
        '{"source": "cli"}',
    )
    assert added.exit_code == 0, added.output
    item = json.loads(added.stdout)
    assert item["metadata"] == {"source": "cli"} and item["memory_type"] == "preference"

    listed = _memory(database_url, "list", "--scope", "user", "--user", "alice")
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [item["id"]]
    assert _memory(database_url, "list", "--scope", "user", "--user", "bob").stdout == ""

    found = _memory(database_url, "search", "hot drinks", "--scope", "user", "--user", "alice")
    assert json.loads(found.stdout.splitlines()[0])["id"] == item["id"]
    # Which index served the search: the embedded one on SQLite and on a
    # PostgreSQL without pgvector (this machine's), never a silent fallback.
    assert found.stderr.startswith("index: embedded (")

    edited = _memory(
        database_url,
        "edit",
        item["id"],
        "--scope",
        "user",
        "--user",
        "alice",
        "--content",
        "Alice prefers green tea.",
    )
    assert json.loads(edited.stdout)["content"] == "Alice prefers green tea."

    wrong = _memory(database_url, "forget", item["id"], "--scope", "user", "--user", "bob")
    assert wrong.exit_code == 2 and "not found" in wrong.stderr

    erased = _memory(database_url, "erase-user", "alice", "--reason", "request 17")
    assert erased.exit_code == 0, erased.output
    assert json.loads(erased.stdout)["records"] == 1
    assert _memory(database_url, "run-jobs").exit_code == 0
    assert _memory(database_url, "expire").stdout.strip() == "expired 0 session memories"


def test_bad_scope_and_metadata_exit_2_with_one_line(database_url: str) -> None:
    missing = _memory(database_url, "list", "--scope", "user")
    assert missing.exit_code == 2
    assert missing.stderr.strip() == "error: user_id: a user memory needs user_id"
    bad = _memory(database_url, "add", "x", "--scope", "agent", "--agent", "A", "--metadata", "[1]")
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1
    empty = _memory(database_url, "add", " ", "--scope", "organization")
    assert empty.exit_code == 2 and "content" in empty.stderr


def test_versions_export_and_an_erasure_naming_the_requester(database_url: str) -> None:
    added = _memory(
        database_url, "add", "Zed's manager is Dana.", "--scope", "user", "--user", "zed"
    )
    memory_id = json.loads(added.stdout)["id"]
    user = ("--scope", "user", "--user", "zed")
    assert (
        _memory(
            database_url, "edit", memory_id, *user, "--content", "Zed's manager is Eli."
        ).exit_code
        == 0
    )
    history = _memory(database_url, "versions", memory_id, *user)
    assert history.exit_code == 0, history.output
    assert [json.loads(line)["content"] for line in history.stdout.splitlines()] == [
        "Zed's manager is Dana.",
        "Zed's manager is Eli.",
    ]

    exported = _memory(database_url, "export", "--user", "zed")
    assert exported.exit_code == 0, exported.output
    document = json.loads(exported.stdout)
    assert document["user_id"] == "zed" and len(document["memories"]) == 1

    erased = _memory(database_url, "erase-user", "zed", "--requested-by", "dpo@example.com")
    assert erased.exit_code == 0, erased.output
    assert json.loads(erased.stdout)["requested_by"] == "dpo@example.com"
    # Without --requested-by the event names the command line and the login name.
    again = _memory(database_url, "erase-user", "zed")
    assert json.loads(again.stdout)["requested_by"].startswith("cli")
    blank = _memory(database_url, "erase-user", "zed", "--requested-by", " ")
    assert blank.exit_code == 2 and "requested_by" in blank.stderr
    assert json.loads(_memory(database_url, "export", "--user", "zed").stdout)["memories"] == []
