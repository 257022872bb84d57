"""``pilothouse chat`` in a real pseudo-terminal: Ctrl-C mid-answer, questions inline, --input.

The chat runs as a subprocess on a pty (so SIGINT comes from the terminal's
Ctrl-C, as a user's would) against a scripted OpenAI-compatible server on
loopback that streams slowly or asks a question.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, chunk, completion, running_upstream, text_stream

pytestmark = pytest.mark.real

CLI = [sys.executable, "-c", "from pilothouse.cli import main; main()"]


def _catalog(base_url: str) -> str:
    return f"""
providers:
  - code: UP
    kind: openai
    base_url: {base_url}
    api_key: "@secrets(UP_KEY)"
models:
  - code: UPM
    provider: UP
    model_name: mock
    capabilities: [FC]
    input_price: 0
    output_price: 0
configurations:
  - code: QUIK
    max_tokens: 64
    retry_count: 0
actions:
  - code: TALK
    model: UPM
    configuration: QUIK
    prompt: "Talk about {{topic}}."
  - code: CLOCK
    model: UPM
    configuration: QUIK
    prompt: Tell the time with your tools.
    mcp_clients: [time]
    memory_strategy: W20
    ask_user: false
memory_strategy_types:
  - code: CHAT
    name: Chat memory
memory_strategies:
  - code: W20
    name: Last 20 messages
    type: CHAT
    kind: WINDOW
    window_size: 20
mcp_clients:
  - name: time
    transport: stdio
    command: python
    args: [-m, mcp_server_time, --local-timezone, UTC]
    description: The current time in any timezone.
"""


def _own_terminal() -> None:
    # A session of its own with the pty as its controlling terminal, so the
    # terminal's Ctrl-C reaches it as SIGINT (as in a user's shell).
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


class Terminal:
    """A child process on a pseudo-terminal, read as text."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = pty.openpty()
        self.process = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, preexec_fn=_own_terminal
        )
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} not seen; the terminal shows:\n{self.seen}"
            ready, _, _ = select.select([self.master], [], [], min(left, 0.5))
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    assert text in self.seen, f"{text!r} not seen:\n{self.seen}"
        return self.seen

    def send(self, text: str) -> None:
        os.write(self.master, text.encode())

    def close(self) -> int:
        try:
            return self.process.wait(timeout=60)
        finally:
            os.close(self.master)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


@pytest.fixture
def cli(tmp_path: Path, upstream: Upstream) -> list[str]:
    (tmp_path / "catalog.yaml").write_text(_catalog(upstream.base_url), encoding="utf-8")
    base = [*CLI, "--database-url", f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}"]
    done = subprocess.run(
        [*base, "catalog", "import", str(tmp_path / "catalog.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return base


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "PILOTHOUSE_SECRETS_FILE": "",
        "UP_KEY": "sk-test",
        # The environment is a tenant's secret only where the operator maps it.
        "PILOTHOUSE_SECRETS_ENV": '{"default": ["UP_KEY"]}',
        "TERM": "xterm",
        "COLUMNS": "200",
    }


def _show(cli: list[str], uuid: str) -> dict[str, object]:
    shown = subprocess.run(
        [*cli, "conversations", "show", uuid, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(shown.stdout)


def _uuid(screen: str) -> str:
    return screen.split("conversation ", 1)[1].split(";", 1)[0].strip()


def test_ctrl_c_stops_the_answer_and_the_chat_goes_on(cli: list[str], upstream: Upstream) -> None:
    slow = [chunk({"role": "assistant", "content": ""})] + [
        chunk({"content": f"word{n} "}) for n in range(200)
    ]
    upstream.script(
        Reply(events=[*slow, chunk({}, "stop")], delay=0.1),
        Reply(events=text_stream("Second answer.")),
    )
    term = Terminal([*cli, "chat", "TALK", "--input", "topic=rockets"], _env())
    screen = term.expect("you>")
    uuid = _uuid(screen)
    term.send("Tell me a long story.\n")
    term.expect("word3 ")
    term.send("\x03")  # Ctrl-C, as the terminal sends it
    term.expect("(TE)")
    term.send("And now?\n")
    term.expect("Second answer.")
    term.expect("(CO)")
    term.send("/exit\n")
    assert term.close() == 0
    assert "Traceback" not in term.seen
    record = _show(cli, uuid)
    messages = record["messages"]
    assert isinstance(messages, list)
    contents = [(m["role"], m["content"]) for m in messages]
    # The cut answer is recorded with what was written, then the session went on.
    assert contents[0][0] == "SY"  # what the model was told, recorded once
    assert contents[1] == ("US", "Tell me a long story.")
    assert contents[2][0] == "AS" and str(contents[2][1]).startswith("word0 word1 word2 word3")
    assert contents[-2:] == [("US", "And now?"), ("AS", "Second answer.")]
    # --input filled the prompt's placeholder on every turn.
    for request in upstream.requests:
        assert "Talk about rockets." in json.dumps(request)


def test_a_question_from_the_model_is_answered_inline(cli: list[str], upstream: Upstream) -> None:
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
        # The answers go back without streaming: a whole completion.
        Reply(body=completion("Size M it is.")),
    )
    term = Terminal([*cli, "chat", "TALK", "--input", "topic=shirts"], _env())
    screen = term.expect("you>")
    uuid = _uuid(screen)
    term.send("I want a shirt.\n")
    term.expect("Which size? (S / M)")
    term.expect("answer>")
    term.send("M\n")
    term.expect("Size M it is.")
    term.expect("(CO)")
    term.send("\n")
    assert term.close() == 0
    assert "Traceback" not in term.seen
    record = _show(cli, uuid)
    assert record["status"] == "CO"
    # The answer went back to the model as the question's tool result, in
    # words it continues from (a JSON object of answers was echoed back).
    last = upstream.requests[-1]["messages"][-1]
    assert (last["role"], last["tool_call_id"]) == ("tool", "q1")
    assert last["content"] == (
        'User has answered your questions: "Which size?"="M". '
        "You can now continue with the user's answers in mind."
    )


def test_ctrl_c_at_the_prompt_ends_the_session_cleanly(cli: list[str], upstream: Upstream) -> None:
    upstream.script(Reply(events=text_stream("unused")))
    term = Terminal([*cli, "chat", "TALK", "--input", "topic=x"], _env())
    term.expect("you>")
    term.send("\x03")
    assert term.close() == 0
    assert "Traceback" not in term.seen


def test_tool_calls_show_as_they_happen_and_the_chat_resumes(
    cli: list[str], upstream: Upstream
) -> None:
    call = {
        "index": 0,
        "id": "t1",
        "type": "function",
        "function": {"name": "get_current_time", "arguments": json.dumps({"timezone": "UTC"})},
    }
    upstream.script(
        Reply(
            events=[
                chunk({"role": "assistant", "content": None, "tool_calls": [call]}),
                chunk({}, "tool_calls"),
            ]
        ),
        Reply(events=text_stream("It is ", "noon in UTC.")),
        Reply(events=text_stream("You are welcome.")),
        Reply(events=text_stream("Still here.")),
    )
    term = Terminal([*cli, "chat", "CLOCK"], _env())
    uuid = _uuid(term.expect("you>"))
    term.send("What time is it?\n")
    # The call, then its result (the MCP server's answer), then the answer.
    term.expect("→ tool get_current_time")
    term.expect("← get_current_time:")
    term.expect('"timezone": "UTC"')
    term.expect("It is noon in UTC.")
    term.expect("(CO)")
    term.send("/exit\n")
    assert term.close() == 0
    seen = term.seen
    assert seen.index("→ tool get_current_time") < seen.index("← get_current_time:")
    assert seen.index("← get_current_time:") < seen.index("It is noon in UTC.")

    # --continue: the newest conversation of the action, its history sent along.
    again = Terminal([*cli, "chat", "CLOCK", "--continue"], _env())
    again.expect(f"continuing conversation {uuid}")
    again.send("Thanks.\n")
    again.expect("You are welcome.")
    again.expect("(CO)")
    again.send("/exit\n")
    assert again.close() == 0
    assert "What time is it?" in json.dumps(upstream.requests[-1]["messages"])

    # --conversation: that conversation, by uuid.
    named = Terminal([*cli, "chat", "CLOCK", "--conversation", uuid], _env())
    named.expect(f"continuing conversation {uuid}")
    named.send("Still there?\n")
    named.expect("Still here.")
    named.send("/exit\n")
    assert named.close() == 0
    assert "Traceback" not in term.seen + again.seen + named.seen
    roles = [m["role"] for m in _show(cli, uuid)["messages"]]  # type: ignore[union-attr]
    assert roles.count("US") == 3

    # A conversation of another action is refused, naming the right command.
    wrong = subprocess.run(
        [*cli, "chat", "TALK", "--input", "topic=x", "--conversation", uuid],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=_env(),
    )
    assert wrong.returncode != 0
    assert f"chat CLOCK --conversation {uuid}" in " ".join(wrong.stderr.split())
