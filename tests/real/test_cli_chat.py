"""``pilothouse chat``: a multi-turn session on the local model, driven over stdin."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

CATALOG = """
providers:
  - code: LOCL
    kind: local
    settings: {model_path: smollm2}
models:
  - code: SMOLLM2
    provider: LOCL
    model_name: SmolLM2-135M-Instruct
    capabilities: [FC, SR]
configurations:
  - code: SHRT
    max_tokens: 24
    temperature: 0
actions:
  - code: CHAT
    model: SMOLLM2
    configuration: SHRT
    prompt: Answer in one short sentence.
    ask_user: false
"""

CLI = [sys.executable, "-c", "from pilothouse.cli import main; main()"]


def test_chat_keeps_one_conversation_across_turns(tmp_path: Path) -> None:
    (tmp_path / "catalog.yaml").write_text(CATALOG, encoding="utf-8")
    base = [*CLI, "--database-url", f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}"]
    imported = subprocess.run(
        [*base, "catalog", "import", str(tmp_path / "catalog.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert imported.returncode == 0, imported.stderr
    chat = subprocess.run(
        [*base, "chat", "CHAT"],
        input="Hello there.\nWhat did I just say?\n/exit\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert chat.returncode == 0, chat.stderr
    assert chat.stderr.count("completed (CO)") == 2
    assert chat.stdout.strip()  # the streamed answers
    listed = subprocess.run(
        [*base, "conversations", "list", "--json"], capture_output=True, text=True, timeout=120
    )
    page = json.loads(listed.stdout)
    assert page["total"] == 1
    shown = subprocess.run(
        [*base, "conversations", "show", page["items"][0]["uuid"], "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    roles = [m["role"] for m in json.loads(shown.stdout)["messages"]]
    # The system prompt is recorded once (SY), then both exchanges.
    assert roles == ["SY", "US", "AS", "US", "AS"]
