"""Benchmark the embedded local models: speed by thread count, and a small quality check.

Runs in the project's own environment (.venv, which has llama-cpp-python and
both packaged models) against real llama.cpp servers started by
LocalModelServers, as the run loop would use them. Run it alone on the
machine, under the shared lock:

    flock /tmp/ph-heavy.lock .venv/bin/python bench/local_model.py
    .venv/bin/python bench/report_local.py   # regenerates docs/benchmarks.md with it

Speed: time to first token and decode tokens/s of a ~300-token prompt and a
64-token answer, at 1 and 2 llama.cpp threads, with the machine otherwise
idle and with one core kept busy by a spinning process (what another
request, a test run or a build does to a 2-core machine). Each prompt starts
with a fresh number, so no run reuses another's prompt cache.

Quality: tool-call accuracy over 20 varied requests (12 need one of three
tools, 8 need none) and competitor extraction over 10 short texts, scored by
precision and recall of the names; temperature 0, through the same chat
handler the run loop uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from pilothouse.providers import LocalModelServers

MODELS = ("qwen2.5-coder-0.5b", "smollm2")
PARAGRAPH = (
    "Acme Rockets builds small, reusable launch vehicles that put satellites into orbit "
    "within 48 hours of booking. Its voice is bold, precise and optimistic; it promises only "
    "what it has flown and explains numbers plainly. "
)
SPEED_PROMPT = "{n}. Read this and then write a long, detailed essay about it.\n\n" + PARAGRAPH * 5


def tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": properties,
                "required": list(properties),
            },
        },
    }


TOOLS = [
    tool("get_weather", "Get the current weather for a city", {"city": {"type": "string"}}),
    tool(
        "get_time",
        "Get the current time in an IANA timezone, e.g. Europe/Paris",
        {"timezone": {"type": "string"}},
    ),
    tool(
        "convert_currency",
        "Convert an amount of money from one currency to another (ISO codes)",
        {
            "amount": {"type": "number"},
            "from_currency": {"type": "string"},
            "to_currency": {"type": "string"},
        },
    ),
]

# (request, expected tool or None, arguments that must match: case-insensitive
# substring for strings, equality for numbers)
TOOL_CASES: list[tuple[str, str | None, dict[str, Any]]] = [
    ("What is the weather in Paris?", "get_weather", {"city": "Paris"}),
    ("Is it raining in Berlin right now?", "get_weather", {"city": "Berlin"}),
    ("Do I need an umbrella in London today?", "get_weather", {"city": "London"}),
    ("Tell me the temperature in Madrid.", "get_weather", {"city": "Madrid"}),
    ("How cold is it in Oslo at the moment?", "get_weather", {"city": "Oslo"}),
    ("What time is it in Tokyo?", "get_time", {"timezone": "Tokyo"}),
    ("What's the clock showing in New York right now?", "get_time", {"timezone": "New_York"}),
    ("Give me the current time in Europe/Paris.", "get_time", {"timezone": "Europe/Paris"}),
    ("Convert 100 US dollars to euros.", "convert_currency", {"amount": 100, "to_currency": "EUR"}),
    ("How many Japanese yen is 50 GBP?", "convert_currency", {"amount": 50, "to_currency": "JPY"}),
    ("Change 20 EUR into Swiss francs.", "convert_currency", {"amount": 20, "to_currency": "CHF"}),
    ("What's 250 CAD in USD?", "convert_currency", {"amount": 250, "to_currency": "USD"}),
    ("What is 2 + 2?", None, {}),
    ("Write a haiku about the sea.", None, {}),
    ("Translate 'good morning' into French.", None, {}),
    ("Who wrote Hamlet?", None, {}),
    ("Summarize in one sentence: the cat sat on the mat all afternoon.", None, {}),
    ("Hello! How are you?", None, {}),
    ("Give me three names for a bakery.", None, {}),
    ("Count from one to five in words.", None, {}),
]

EXTRACTION_PROMPT = (
    "Text:\n{text}\n\nList the other companies this text names as competitors "
    "(not the brand that wrote it)."
)
COMPETITORS_SCHEMA = {
    "type": "object",
    "properties": {
        "competitors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        }
    },
    "required": ["competitors"],
}
# What the run loop's system prompt says for an extraction action (agent
# prompt, output data structure, the EXTR action type's constraint).
EXTRACTION_SYSTEM = (
    "Find the facts. Be exact.\n\nOutput data structure:\n"
    + json.dumps(COMPETITORS_SCHEMA, indent=2, sort_keys=True)
    + "\n\nOutput JSON only, with no text around it."
)
# (text, the competitors it names)
EXTRACTION_CASES: list[tuple[str, list[str]]] = [
    (
        "Acme Rockets builds small reusable launchers. In the small-launch market we compete "
        "with Globex Launch, which sells rideshare seats, and with Initech Orbital, which "
        "focuses on defence payloads.",
        ["Globex Launch", "Initech Orbital"],
    ),
    (
        "Brightbrew roasts coffee in Lisbon. Our rivals are Bean Machine and Roast Republic; "
        "both sell online across Europe.",
        ["Bean Machine", "Roast Republic"],
    ),
    (
        "At Northwind Bikes we make cargo bikes for families. Urban Arrow and Riese & Muller "
        "are the brands customers compare us with most.",
        ["Urban Arrow", "Riese & Muller"],
    ),
    (
        "Pixelpost is a photo printing service. Unlike Snapfish, we print on recycled paper.",
        ["Snapfish"],
    ),
    (
        "Verdant Foods makes oat milk. Oatly leads the market; Alpro and Minor Figures follow, "
        "and we aim to overtake them all on taste.",
        ["Oatly", "Alpro", "Minor Figures"],
    ),
    (
        "TinyDesk builds standing desks for small flats. We have no direct competitor yet: "
        "nobody else folds a desk into a wall shelf.",
        [],
    ),
    (
        "Harbor Analytics sells dashboards to ports. Its competitors are PortIQ and "
        "Maritime Metrics, both larger, and CargoLens, a startup.",
        ["PortIQ", "Maritime Metrics", "CargoLens"],
    ),
    (
        "Lumen Lamps designs desk lamps. Customers often weigh our lamps against BenQ's "
        "ScreenBar before they buy.",
        ["BenQ"],
    ),
    (
        "Our brand, Fjord Knits, sells wool sweaters. Patagonia and Arket compete with us "
        "in the premium segment.",
        ["Patagonia", "Arket"],
    ),
    (
        "Quill Notes is a note-taking app. We compete with Notion and Obsidian, and "
        "sometimes with Apple Notes.",
        ["Notion", "Obsidian", "Apple Notes"],
    ),
]


def client_for(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url, api_key="local", max_retries=0, timeout=900)


async def timed_answer(client: AsyncOpenAI, n: int, max_tokens: int) -> dict[str, float]:
    started = time.perf_counter()
    first = last = 0.0
    tokens = 0
    stream = await client.chat.completions.create(
        model="local",
        messages=[{"role": "user", "content": SPEED_PROMPT.format(n=n)}],
        max_tokens=max_tokens,
        temperature=0,
        stream=True,
    )
    async with stream:
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                last = time.perf_counter()
                first = first or last
            if chunk.usage is not None:
                tokens = chunk.usage.completion_tokens
    return {
        "ttft_s": first - started,
        "decode_tokens_per_s": (tokens - 1) / (last - first) if last > first else 0.0,
        "tokens": tokens,
    }


def spinner() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


async def speed(model: str, reps: int, max_tokens: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    servers = LocalModelServers(default_model=model)
    counter = 0
    try:
        for threads in (1, 2):
            url = await servers.base_url(n_threads=threads)
            async with client_for(url) as client:
                await timed_answer(client, 0, 4)  # warm up: weights paged in
                for load in ("idle", "one core busy"):
                    busy = spinner() if load != "idle" else None
                    try:
                        runs = []
                        for _ in range(reps):
                            counter += 1
                            runs.append(await timed_answer(client, counter, max_tokens))
                    finally:
                        if busy is not None:
                            busy.kill()
                            busy.wait()
                    row = {
                        "model": model,
                        "threads": threads,
                        "load": load,
                        "ttft_s": statistics.median(r["ttft_s"] for r in runs),
                        "decode_tokens_per_s": statistics.median(
                            r["decode_tokens_per_s"] for r in runs
                        ),
                        "runs": runs,
                    }
                    print(json.dumps({k: v for k, v in row.items() if k != "runs"}), flush=True)
                    rows.append(row)
    finally:
        await servers.aclose()
    return rows


def matches(value: Any, expected: Any) -> bool:
    if isinstance(expected, str):
        # "New_York" in "America/New_York", "tokyo" in "Asia/Tokyo".
        return isinstance(value, str) and _norm(expected) in _norm(value)
    return isinstance(value, int | float) and float(value) == float(expected)


def _norm(text: str) -> str:
    return text.lower().replace(" ", "_")


async def tool_accuracy(client: AsyncOpenAI) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for request, want, arguments in TOOL_CASES:
        completion = await client.chat.completions.create(
            model="local",
            messages=[{"role": "user", "content": request}],
            tools=TOOLS,  # pyright: ignore[reportArgumentType]
            temperature=0,
            max_tokens=64,
        )
        message = completion.choices[0].message
        call = message.tool_calls[0] if message.tool_calls else None
        got = call.function.name if call else None
        args = json.loads(call.function.arguments) if call else {}
        correct = got == want and all(matches(args.get(k), v) for k, v in arguments.items())
        cases.append(
            {
                "request": request,
                "expected": want,
                "called": got,
                "arguments": args,
                "text": (message.content or "")[:120],
                "correct": correct,
            }
        )
        print(json.dumps(cases[-1]), flush=True)
    need = [c for c in cases if c["expected"]]
    none = [c for c in cases if not c["expected"]]
    return {
        "cases": cases,
        "correct": sum(c["correct"] for c in cases),
        "total": len(cases),
        "calls_correct": sum(c["correct"] for c in need),
        "calls_total": len(need),
        "text_correct": sum(c["correct"] for c in none),
        "text_total": len(none),
        "invalid_calls": sum(1 for c in cases if c["called"] and c["called"] != c["expected"]),
    }


def same_name(found: str, expected: str) -> bool:
    # Letters and digits only; one may extend the other ("Apple Note" for
    # "Apple Notes", "BenQ ScreenBar" for "BenQ"), but "Pixelpost, Snapfish"
    # is not "Snapfish".
    a, b = _letters(found), _letters(expected)
    return bool(a) and bool(b) and (a.startswith(b) or b.startswith(a))


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


async def extraction(client: AsyncOpenAI) -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for text, expected in EXTRACTION_CASES:
        completion = await client.chat.completions.create(
            model="local",
            messages=[
                {"role": "system", "content": EXTRACTION_SYSTEM},
                {"role": "user", "content": EXTRACTION_PROMPT.format(text=text)},
            ],
            response_format={  # pyright: ignore[reportArgumentType]
                "type": "json_schema",
                "json_schema": {"name": "competitors", "schema": COMPETITORS_SCHEMA},
            },
            temperature=0,
            max_tokens=160,
        )
        content = completion.choices[0].message.content or ""
        try:
            found = [str(c.get("name", "")) for c in json.loads(content)["competitors"]]
            valid = True
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
            found, valid = [], False
        hits = [f for f in found if any(same_name(f, e) for e in expected)]
        recalled = [e for e in expected if any(same_name(f, e) for f in found)]
        cases.append(
            {"expected": expected, "found": found, "valid_json": valid, "hits": len(hits),
             "recalled": len(recalled)}
        )  # fmt: skip
        print(json.dumps(cases[-1]), flush=True)
    predicted = sum(len(c["found"]) for c in cases)
    expected_total = sum(len(c["expected"]) for c in cases)
    return {
        "cases": cases,
        "precision": sum(c["hits"] for c in cases) / predicted if predicted else 0.0,
        "recall": sum(c["recalled"] for c in cases) / expected_total,
        "predicted": predicted,
        "expected": expected_total,
        "valid_json": sum(c["valid_json"] for c in cases),
    }


async def quality(model: str) -> dict[str, Any]:
    servers = LocalModelServers(default_model=model)
    try:
        async with client_for(await servers.base_url()) as client:
            return {"tools": await tool_accuracy(client), "extraction": await extraction(client)}
    finally:
        await servers.aclose()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "local.json"
    )
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--parts", default="speed,quality")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    # A partial run (--parts, --models) updates what an earlier one wrote.
    previous: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    results: dict[str, Any] = {
        "machine": {
            "cores": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "load_before": os.getloadavg(),
            "python": platform.python_version(),
        },
        "speed": [],
        "quality": dict(previous.get("quality") or {}),
    }
    parts = args.parts.split(",")
    models = args.models.split(",")
    if "speed" not in parts:
        results["speed"] = previous.get("speed") or []
        results["machine"]["speed_load"] = previous.get("machine", {}).get("speed_load")
    for model in models:
        if "speed" in parts:
            results["speed"] += await speed(model, args.reps, args.max_tokens)
            results["machine"]["speed_load"] = [results["machine"]["load_before"], os.getloadavg()]
        if "quality" in parts:
            results["quality"][model] = await quality(model)
    results["machine"]["load_after"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
