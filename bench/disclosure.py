"""Scenario 4: progressive disclosure, first-turn prompt tokens.

An ERP agent with 10 skills that own 5 tools each (50 REST tools with real
JSON schemas) answers one user message through pilothouse against the mock
upstream. The mock (``bench/mock_upstream.py``'s protocol, extended here to
keep every request body) captures what the upstream receives, and the prompt
tokens are counted from that body with tiktoken (o200k_base, the offline
vocabulary pilothouse's own counter uses).

pilothouse has no switch that turns disclosure off, so "all tools loaded" is
the same agent whose goal action has the 50 tools attached directly instead
of through skills (``ERPALL``). A second baseline keeps the skills listed and
also attaches the 50 tools (``ERPBOTH``): disclosure's prompt text plus every
tool. The verdict is taken against ``ERPALL``, the smaller baseline, hence
the stricter test.

Variants, all in one catalog (``bench/disclosure_catalog.yaml``), one
conversation each:

- ``disclosure``: agent ``ERPDISC`` → action ``ERPDISC`` (skills, no tools);
- ``all_tools``: agent ``ERPALL`` → action ``ERPALL`` (50 tools, no skills);
- ``skills_and_tools``: agent ``ERPBOTH`` → action ``ERPBOTH`` (both);
- ``after_use_skill``: ``ERPDISC`` again, the mock first calls
  ``use_skill`` (``INVENTRY``): the second request shows what one
  activated skill adds (its 5 tools and its instructions).

Count: messages as OpenAI's chat format bills them (3 tokens per message +
its role + its content, + 3 for the reply's priming) plus the ``tools``
array as compact JSON. OpenAI renders tools in its own internal format, so
the tools part is an approximation; both variants are counted the same way.
The mock reports that same count as ``usage.prompt_tokens``, so the usage
pilothouse records (``TurnResult.input_tokens``) is shown beside it.

Run: ``python bench/disclosure.py --workdir /tmp/s4`` (prints JSON);
``bench/harness.py --scenarios disclosure`` stores it as ``results["disclosure"]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import mock_upstream  # noqa: E402
from childenv import MOCK_KEY, child_env  # noqa: E402

TARGET = 0.70
"""The budget: at least 70% fewer first-turn prompt tokens with disclosure."""

USER = "Do we have enough stock of item WID-2041 in the Rotterdam warehouse to ship order SO-88213?"
ACTIVATE = "INVENTRY"
"""The skill the mock activates in the ``after_use_skill`` variant."""

# --- the ERP catalog: 10 skills x 5 tools (bench/disclosure_catalog.yaml) ------------

CATALOG = BENCH / "disclosure_catalog.yaml"


def catalog_yaml(base_url: str, model_name: str = "plain-d0") -> str:
    """Return the ERP catalog with the mock as provider and ``model_name`` as its model."""
    text = CATALOG.read_text()
    return text.replace("__BASE_URL__", base_url).replace("__MODEL__", model_name)


def catalog_size() -> dict[str, int]:
    """Count the catalog's skills and the tools they own."""
    from ruamel.yaml import YAML

    data = YAML(typ="safe").load(CATALOG.read_text())
    return {
        "skills": len(data["skills"]),
        "tools": sum(len(skill.get("tools", [])) for skill in data["skills"]),
    }


# --- counting ------------------------------------------------------------------------


def _counter() -> Any:
    from pilothouse.catalog._enums import ProviderKind
    from pilothouse.memory import counter_for

    return counter_for(ProviderKind.OPENAI, "gpt-4o")


def count_request(body: dict[str, Any], counter: Any) -> dict[str, int]:
    """Count a chat-completions request's prompt tokens: messages + tools."""

    def text(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, str):
            return value
        if isinstance(value, list):  # content parts
            return "".join(p.get("text", "") for p in value if isinstance(p, dict))
        return json.dumps(value, separators=(",", ":"))

    messages = 3  # every reply is primed with <|start|>assistant<|message|>
    for message in body.get("messages", []):
        messages += 3 + counter.count(message.get("role", ""))
        messages += counter.count(text(message.get("content")))
        if message.get("tool_calls"):
            messages += counter.count(json.dumps(message["tool_calls"], separators=(",", ":")))
        if message.get("name"):
            messages += 1 + counter.count(message["name"])
    tools = body.get("tools") or []
    tool_tokens = counter.count(json.dumps(tools, separators=(",", ":"))) if tools else 0
    return {"messages": messages, "tools": tool_tokens, "total": messages + tool_tokens}


# --- the capturing mock --------------------------------------------------------------


class _Capture:
    bodies: list[dict[str, Any]] = []
    counter: Any = None


class CapturingProtocol(mock_upstream.MockProtocol):
    """The benchmark mock, keeping every chat request and reporting its real prompt tokens.

    Model ``disclose-activate`` answers a first request that offers
    ``use_skill`` with a call activating :data:`ACTIVATE`; everything else
    gets the mock's plain answer.
    """

    async def _answer(self, method: bytes, path: bytes, body: bytes) -> None:
        if method != b"POST":
            await super()._answer(method, path, body)
            return
        assert self.transport is not None
        request = json.loads(body)
        _Capture.bodies.append(request)
        mock_upstream.Stats.requests += 1
        prompt = count_request(request, _Capture.counter)["total"]
        names = [t["function"]["name"] for t in request.get("tools") or []]
        last = (request.get("messages") or [{}])[-1]
        message: dict[str, Any] = {"role": "assistant", "content": mock_upstream.ANSWER}
        finish = "stop"
        if (
            request.get("model") == "disclose-activate"
            and "use_skill" in names
            and (last.get("role") != "tool")
        ):
            arguments = json.dumps({"skill": ACTIVATE})
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_skill_1",
                        "type": "function",
                        "function": {"name": "use_skill", "arguments": arguments},
                    }
                ],
            }
            finish = "tool_calls"
        payload = {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 6, "total_tokens": prompt + 6},
        }
        self.transport.write(mock_upstream._response("200 OK", json.dumps(payload).encode()))


# --- the run ------------------------------------------------------------------------------


VARIANTS = {
    "disclosure": ("ERPDISC", "plain-d0"),
    "all_tools": ("ERPALL", "plain-d0"),
    "skills_and_tools": ("ERPBOTH", "plain-d0"),
    "after_use_skill": ("ERPDISC", "disclose-activate"),
}


async def measure(workdir: Path) -> dict[str, Any]:
    """Import the ERP catalog, run one first turn per variant, count what the mock received."""
    import os

    from pilothouse.api import Pilothouse
    from pilothouse.catalog import import_catalog
    from pilothouse.settings import Settings
    from pilothouse.store import Database

    for name, value in MOCK_KEY.items():
        os.environ.setdefault(name, value)
    counter = _counter()
    _Capture.counter = counter
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: CapturingProtocol(0), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"
    results: dict[str, Any] = {}
    try:
        url = f"sqlite+aiosqlite:///{workdir / 'disclosure.db'}"
        for model_name in ("plain-d0", "disclose-activate"):
            path = workdir / f"erp-{model_name}.yaml"
            path.write_text(catalog_yaml(base_url, model_name))
            tenant = "erp-" + model_name
            database = Database(url)
            try:
                await import_catalog(database, tenant, [path], user="bench")
            finally:
                await database.dispose()
        for variant, (code, model_name) in VARIANTS.items():
            _Capture.bodies.clear()
            async with Pilothouse(Settings(database_url=url), tenant="erp-" + model_name) as ph:
                conversation = await ph.command.start_conversation(action=code, agent=code)
                turn = await ph.command.send_message(conversation.uuid, USER)
            bodies = list(_Capture.bodies)
            if turn.error or not bodies:
                raise RuntimeError(f"{variant}: turn failed: {turn.error or 'no request'}")
            counts = [count_request(b, counter) for b in bodies]
            index = 1 if variant == "after_use_skill" else 0
            if variant == "after_use_skill" and len(bodies) < 2:
                raise RuntimeError(f"{variant}: use_skill was not followed by a second request")
            body = bodies[index]
            results[variant] = {
                "agent": code,
                "request": index + 1,
                "requests": len(bodies),
                "tools_offered": len(body.get("tools") or []),
                "tool_names": [t["function"]["name"] for t in body.get("tools") or []],
                "system_chars": sum(
                    len(m.get("content") or "") for m in body["messages"] if m["role"] == "system"
                ),
                "request_bytes": len(json.dumps(body, separators=(",", ":"))),
                "prompt_tokens": counts[index],
                "recorded_input_tokens": turn.input_tokens,
                "counted_all_requests": sum(c["total"] for c in counts),
                "status": str(turn.status),
            }
            (workdir / f"request-{variant}.json").write_text(json.dumps(bodies, indent=1))
    finally:
        server.close()
        await server.wait_closed()
    disclosed = results["disclosure"]["prompt_tokens"]["total"]
    loaded = results["all_tools"]["prompt_tokens"]["total"]
    both = results["skills_and_tools"]["prompt_tokens"]["total"]
    reduction = 1 - disclosed / loaded
    encoding = getattr(counter, "encoding_name", None)
    return {
        "variants": results,
        "encoding": encoding or "estimate (chars/4): no offline tiktoken vocabulary",
        **catalog_size(),
        "user_message": USER,
        "reduction": reduction,
        "reduction_vs_skills_and_tools": 1 - disclosed / both,
        "target": TARGET,
        "verdict": "PASS" if reduction >= TARGET else "MISS",
    }


def run(python: str, workdir: Path) -> dict[str, Any]:
    """Measure in a child process (``python`` has pilothouse); return the results (harness)."""
    import subprocess

    out = workdir / "disclosure.json"
    env = child_env(**MOCK_KEY, PYTHONDONTWRITEBYTECODE="1")
    subprocess.run(
        [python, str(Path(__file__)), "--workdir", str(workdir), "--out", str(out)],
        check=True,
        env=env,
        timeout=300,
    )
    return json.loads(out.read_text())


def main() -> None:
    """Run the measurement and print (or write) its JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, help="keep the database and captured requests here")
    parser.add_argument("--out", type=Path, help="write the JSON here instead of stdout")
    args = parser.parse_args()
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(measure(args.workdir))
    else:
        with tempfile.TemporaryDirectory(prefix="pilothouse-disclosure-") as tmp:
            result = asyncio.run(measure(Path(tmp)))
    text = json.dumps(result, indent=1)
    if args.out is not None:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
