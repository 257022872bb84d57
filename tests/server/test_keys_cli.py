from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from pilothouse.cli import app


def digest(key: str) -> str:
    """What the store keeps of a key: its SHA-256, computed here independently."""
    return hashlib.sha256(key.encode()).hexdigest()


def invoke(db: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["--database-url", f"sqlite+aiosqlite:///{db}", *args])
    return result.exit_code, result.stdout, result.stderr


def test_create_list_revoke(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    code, out, err = invoke(db, "keys", "create", "--tenant", "acme", "--name", "ci", "--admin")
    assert code == 0, err
    key = out.strip()
    assert key.startswith("ph_")
    prefix = key.split("_")[1]
    assert prefix in err and "admin" in err

    code, out, _ = invoke(db, "keys", "list")
    assert code == 0
    assert prefix in out and "acme" in out and "admin" in out and "never" in out
    assert key not in out
    assert digest(key) not in out

    code, out, _ = invoke(db, "keys", "list", "--tenant", "other")
    assert prefix not in out

    code, out, _ = invoke(db, "keys", "revoke", prefix)
    assert code == 0
    assert "revoked" in out
    code, out, _ = invoke(db, "keys", "list")
    assert "revoked" in out


def test_revoke_unknown_prefix_exits_2(tmp_path: Path) -> None:
    code, _, err = invoke(tmp_path / "keys.db", "keys", "revoke", "nope")
    assert code == 2
    assert err.strip() == "error: no API key with prefix 'nope'"


def test_digest_only_is_stored(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "keys.db"
    _, out, _ = invoke(db, "keys", "create", "--tenant", "acme")
    key = out.strip()
    rows = sqlite3.connect(db).execute("SELECT prefix, digest FROM api_key").fetchall()
    assert rows == [(key.split("_")[1], digest(key))]
