"""The bus's trust boundary, attacked through a real NATS JetStream server and the CLI processes.

``pilothouse events`` and ``pilothouse worker`` run as a deployment runs
them (``python -m``-style subprocesses of the CLI, started for the default
tenant); the test publishes what anyone with access to the bus can:

- a ``run_action`` naming tenant ``acme``: answered ``FA`` on its
  ``replyTo``, acme's action not run (no conversation);
- a command naming acme's script tool: answered with an error, the script
  not run;
- a ``run_action`` of the default tenant whose provider is on loopback,
  which the egress policy forbids: refused at call time exactly as
  ``pilothouse serve`` refuses it, and the upstream sees no request (and
  with ``PILOTHOUSE_EGRESS_ALLOW`` naming loopback, it answers).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from event_brokers import Broker
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.events import Bus, RunAction, SkillInvocationEvent, encode, open_bus
from pilothouse.settings import Settings

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "events"))
CATALOG: str = importlib.import_module("event_catalog").CATALOG

pytestmark = [pytest.mark.anyio, pytest.mark.real]

CLI = [sys.executable, "-c", "from pilothouse.cli import main; main()"]

LEAK = textwrap.dedent(
    """
    import json, sys
    json.load(sys.stdin)
    print(json.dumps({"acme_secret_data": "only acme may see this"}))
    """
)


def acme_tools() -> dict[str, Any]:
    """acme's catalog: a script tool whose output only acme should ever see."""
    return {
        "tools": [
            {
                "code": "LEAK",
                "name": "leak",
                "kind": "script",
                "description": "Returns acme's data.",
                "implementation": LEAK,
                "input_schema": {"type": "object", "properties": {}},
            }
        ]
    }


def ask_catalog(base_url: str) -> dict[str, Any]:
    """The default tenant's action on a provider at ``base_url``."""
    return {
        "providers": [{"code": "UP", "kind": "openai-compatible", "base_url": base_url}],
        "models": [{"code": "UPMODEL", "provider": "UP", "model_name": "mock"}],
        "configurations": [{"code": "ONCE", "max_tokens": 64, "retry_count": 0}],
        "actions": [
            {
                "code": "ASK",
                "name": "Ask",
                "model": "UPMODEL",
                "configuration": "ONCE",
                "prompt": "Answer.",
                "ask_user": False,
            }
        ],
    }


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[Broker]:
    started = Broker("nats", tmp_path)
    started.start()
    yield started
    started.stop()


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'bus.db'}"


@pytest.fixture
async def operator(database_url: str) -> AsyncIterator[Pilothouse]:
    """The operator's facade (no egress check: the operator writes the catalogs)."""
    async with Pilothouse(Settings(database_url=database_url, secrets_file=None)) as ph:
        await ph.ensure_schema()
        yield ph


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        up.script(Reply(body=completion("internal answer")))
        yield up


@contextmanager
def cli_process(
    tmp_path: Path, database_url: str, args: list[str], ready: str | None, env: dict[str, str]
) -> Iterator[Path]:
    """Run ``pilothouse <args>`` until the block ends; yield its output file once ``ready`` shows.

    With ``ready`` None it is yielded at once: the test's messages were
    published before, and the process's consumer reads them when it joins.
    """
    log = tmp_path / f"{args[0]}.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PILOTHOUSE_")} | env
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*CLI, "--database-url", database_url, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=environment,
        )
    try:
        deadline = time.monotonic() + 60
        while ready is not None and ready not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{args[0]} did not start:\n{log.read_text()}")
            time.sleep(0.1)
        yield log
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


REPLIES = "attacker-replies"


async def first_reply(bus: Bus, topic: str, timeout: float = 60) -> dict[str, Any]:
    with anyio.fail_after(timeout):
        async with aclosing(bus.consume(topic, "attacker")) as stream:
            async for delivery in stream:
                await delivery.ack()
                return json.loads(delivery.value)
    raise AssertionError(f"nothing on {topic}")


async def test_a_run_action_naming_another_tenant_is_refused_by_the_events_process(
    tmp_path: Path, nats: Broker, database_url: str, operator: Pilothouse
) -> None:
    await operator.catalog.import_text(CATALOG)
    acme = operator.for_tenant("acme")
    await acme.catalog.import_text(CATALOG)
    bus = open_bus(nats.url)
    try:
        # The caller keeps its reply subject (a stream) before it asks: the
        # bus publishes an answer on it and makes no stream of its own.
        await bus.declare(REPLIES)
        attack = RunAction(
            action="ORDERS",
            input="A-17",
            correlation_id="evil-1",
            reply_to=REPLIES,
            tenant="acme",
        )
        await bus.publish("acts", encode(attack))
        args = ["events", "--bus", nats.url, "--action-topic", "acts"]
        with cli_process(tmp_path, database_url, args, None, {}) as log:
            reply = await first_reply(bus, REPLIES)
    finally:
        await bus.close()
    assert (reply["correlationId"], reply["status"]) == ("evil-1", "FA")
    assert reply["error"] == (
        "forbidden: tenant 'acme' is not served by this process (it serves 'default'); "
        "send the run_action to that tenant's pilothouse events process"
    )
    assert (await acme.query.list_conversations()).items == []
    # Logged (at WARNING, before the answer was published).
    assert "refused run_action evil-1 on acts: it names tenant 'acme'" in log.read_text()


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
async def test_the_worker_refuses_another_tenant_s_script_tool(
    tmp_path: Path, nats: Broker, database_url: str, operator: Pilothouse
) -> None:
    await operator.for_tenant("acme").catalog.import_documents([acme_tools()])
    bus = open_bus(nats.url)
    try:
        # The caller keeps its reply subject (a stream) before it asks: the
        # bus publishes an answer on it and makes no stream of its own.
        await bus.declare(REPLIES)
        attack = SkillInvocationEvent(
            correlation_id="evil-2",
            skill_name="leak",
            arguments={},
            reply_to=REPLIES,
            tenant="acme",
        )
        await bus.publish("agent-commands", encode(attack))
        args = ["worker", "--bus", nats.url]
        with cli_process(tmp_path, database_url, args, "pilothouse worker:", {}) as log:
            reply = await first_reply(bus, REPLIES)
    finally:
        await bus.close()
    assert reply["correlationId"] == "evil-2"
    assert reply.get("result") is None
    assert reply["error"] == (
        "tool.exec.error: forbidden: tenant 'acme' is not served by this worker "
        "(it serves 'default')"
    )
    assert "acme_secret_data" not in log.read_text()


@pytest.mark.parametrize("allowed", [False, True], ids=["policy-default", "loopback-allowed"])
async def test_the_events_process_applies_the_egress_policy_as_serve_does(
    tmp_path: Path,
    nats: Broker,
    database_url: str,
    operator: Pilothouse,
    upstream: Upstream,
    allowed: bool,
) -> None:
    await operator.catalog.import_documents([ask_catalog(upstream.base_url)])
    bus = open_bus(nats.url)
    env = {"PILOTHOUSE_EGRESS_ALLOW": "127.0.0.0/8"} if allowed else {}
    try:
        await bus.declare("replies")
        command = RunAction(action="ASK", input="Hi", correlation_id="ask-1", reply_to="replies")
        await bus.publish("acts", encode(command))
        args = ["events", "--bus", nats.url, "--action-topic", "acts"]
        with cli_process(tmp_path, database_url, args, None, env):
            reply = await first_reply(bus, "replies")
    finally:
        await bus.close()
    if allowed:
        assert (reply["status"], reply["output"]) == ("CO", "internal answer")
        assert len(upstream.requests) == 1
        return
    assert reply["status"] == "FA"
    assert "EgressRefusedError" in reply["error"]
    assert "127.0.0.1 is a private, local or reserved address" in reply["error"]
    assert upstream.requests == []
