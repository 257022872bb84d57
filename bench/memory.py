"""Scoped memory benchmark: planted facts in long synthetic conversations.

The generator (seeded, documented below) writes ``--users`` conversations of
``--turns`` user turns each. Into every conversation it plants five facts
about the user (a sister's name, an allergy, a car, a home city, a job) at
random early turns, surrounded by small talk drawn from templates; at later
turns it asks about each fact once ("What is my sister called again?").

Each conversation runs through scoped memory the way a SCOPED action's turn
does, on the packaged MiniLM and a SQLite file:

- every turn is stored in session memory (``store_responses``);
- after every turn an extractor runs. ``--extractor scripted`` is an oracle
  that returns exactly the planted fact of that turn (third person) and
  nothing for small talk: the retrieval figures then measure retrieval, not
  extraction. ``--extractor qwen`` asks the packaged Qwen2.5-Coder-0.5B
  (llama.cpp) through the real extraction job, for an honest extraction
  figure on a subset (``--qwen-turns``);
- at a probe turn, retrieval runs with the seed's limits (session 10, user 5)
  and the budget of 1000 tokens, and we record whether the planted fact is in
  what the model would be shown (recall at the first relevant turn).

Prompt tokens per turn compare what a SCOPED turn sends (system prompt +
the conversation's last 10 messages + the memory block) with FULL history
(system prompt + every message so far), counted with the 4-characters-per-
token estimate. Retrieval time is the whole ``search`` (query embedding, SQL,
rerank) per probe.

Run: ``python bench/memory.py --users 20 --turns 60`` (about two minutes on
one core), and ``--extractor qwen --users 2 --qwen-turns 12`` for the local
model (a few minutes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import EstimateCounter, MemoryExtractor, ScopedMemory
from pilothouse.memory._tables import MemoryJob
from pilothouse.store import Database
from pilothouse.types import MemoryScope

SISTERS = ["Ingrid", "Mariana", "Keiko", "Amara", "Sofia", "Priya", "Lena", "Chloe"]
ALLERGIES = ["penicillin", "peanuts", "shellfish", "latex", "pollen", "bee stings"]
CARS = ["a red Volvo estate", "a blue Fiat 500", "a white Tesla Model 3", "an old Land Rover"]
CITIES = ["Lisbon", "Hamburg", "Osaka", "Montreal", "Nairobi", "Valparaiso", "Krakow"]
JOBS = ["a night-shift nurse", "a tax accountant", "a marine biologist", "a school teacher"]

FACTS = [
    (
        "sister",
        "My sister is called {v}, she visits next week.",
        "The user's sister is called {v}.",
        "What is my sister called again?",
        SISTERS,
    ),
    (
        "allergy",
        "Careful with medicine: I am allergic to {v}.",
        "The user is allergic to {v}.",
        "Which medicines or foods should I avoid because of my allergy?",
        ALLERGIES,
    ),
    (
        "car",
        "I drive {v} to work every day.",
        "The user drives {v}.",
        "Can my car fit a bicycle in the back?",
        CARS,
    ),
    (
        "city",
        "I live in {v} since last year.",
        "The user lives in {v}.",
        "What is the weather usually like where I live?",
        CITIES,
    ),
    (
        "job",
        "I work as {v}.",
        "The user works as {v}.",
        "Given my job, when should I schedule meetings?",
        JOBS,
    ),
]

SMALL_TALK = [
    "Can you recommend a good book for the weekend?",
    "What is a quick recipe for dinner tonight?",
    "Explain the difference between a latte and a flat white.",
    "How do I fix a squeaky door hinge?",
    "Tell me a fun fact about octopuses.",
    "What are some tips for better sleep?",
    "How many minutes should I boil an egg?",
    "Suggest a name for a houseplant.",
    "What is the capital of Australia?",
    "How do I convert Celsius to Fahrenheit?",
    "Give me a short stretching routine.",
    "What should I pack for a beach day?",
]

SYSTEM = "You are a helpful personal assistant. Answer briefly."
COUNTER = EstimateCounter()


@dataclass
class Conversation:
    """One synthetic conversation and where its facts are planted and probed."""

    user: str
    turns: list[str]
    planted: dict[int, tuple[str, str]] = field(default_factory=dict[int, tuple[str, str]])
    """turn -> (fact key, third-person fact)"""
    probes: dict[int, tuple[str, str]] = field(default_factory=dict[int, tuple[str, str]])
    """turn -> (fact key, the value that must be retrieved)"""


def generate(seed: int, users: int, turns: int) -> list[Conversation]:
    """The seeded conversation set: facts in the first third, probes in the last half."""
    rng = random.Random(seed)
    out: list[Conversation] = []
    for n in range(users):
        texts = [rng.choice(SMALL_TALK) for _ in range(turns)]
        conv = Conversation(user=f"user-{n:03d}", turns=texts)
        plant_at = rng.sample(range(1, max(turns // 3, 6)), len(FACTS))
        probe_at = rng.sample(range(turns // 2, turns), len(FACTS))
        for (key, said, fact, question, values), p, q in zip(
            FACTS, plant_at, probe_at, strict=True
        ):
            value = rng.choice(values)
            texts[p] = said.format(v=value)
            conv.planted[p] = (key, fact.format(v=value))
            texts[q] = question
            conv.probes[q] = (key, value)
        out.append(conv)
    return out


def answer_for(text: str) -> str:
    return f"Sure, here is a short answer about: {text[:60]}"


LONG_TERM_THRESHOLDS = (0.0, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)
"""Thresholds at which long-term recall is measured as a new session sees it."""


async def run(args: argparse.Namespace) -> dict[str, Any]:
    conversations = generate(args.seed, args.users, args.turns)
    folder = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    database = Database(f"sqlite+aiosqlite:///{folder / 'bench.db'}")
    await database.ensure_schema()
    memory = ScopedMemory(database, LocalMiniLM())
    planted_by_turn: dict[tuple[str, int], str] = {}
    noise_by_turn: dict[tuple[str, int], str] = {}
    for conv in conversations:
        for turn, (_, fact) in conv.planted.items():
            planted_by_turn[(conv.user, turn)] = fact
        for turn, text in enumerate(conv.turns):
            if turn not in conv.planted and turn not in conv.probes:
                # What an eager extractor keeps of small talk: the user's
                # memory then holds ~50 records, and the 5 planted facts
                # must win the user scope's 5 places against them.
                noise_by_turn[(conv.user, turn)] = f"The user once asked: {text}"

    calls = {"n": 0}

    async def oracle(job: MemoryJob, system: str, user: str, schema: Any) -> str:
        calls["n"] += 1
        if "EXISTING:" in user:
            # A decision against similar records: the oracle's facts are all
            # distinct, so each is new (the model's judgement is not measured here).
            return json.dumps({"event": "ADD", "id": None, "text": None})
        key = (job.user_id or "", int((job.session_id or ":0").split(":")[1]))
        fact, noise = planted_by_turn.get(key), noise_by_turn.get(key) if args.noise else None
        facts = [{"text": fact, "scope": "user", "type": "fact", "importance": 0.8}] if fact else []
        if noise:
            facts.append({"text": noise, "scope": "user", "type": "fact", "importance": 0.3})
        return json.dumps({"facts": facts})

    extractor = MemoryExtractor(memory, oracle)
    hits_at_probe: list[bool] = []
    by_key: dict[str, list[bool]] = {}
    search_ms: list[float] = []
    scoped_tokens: list[int] = []
    full_tokens: list[int] = []
    extraction_calls_per_turn: list[int] = []
    long_term: dict[float, list[bool]] = {}
    for conv in conversations:
        history: list[str] = []
        session = MemoryScope("session", session_id=f"{conv.user}-s", user_id=conv.user)
        user_scope = MemoryScope("user", user_id=conv.user)
        for t, text in enumerate(conv.turns):
            started = time.perf_counter()
            hits = await memory.search(
                "bench", text, {session: 10, user_scope: 5}, threshold=args.threshold
            )
            search_ms.append((time.perf_counter() - started) * 1000)
            block, spent = [], COUNTER.count("Relevant memories:")
            for hit in hits:
                cost = COUNTER.count(hit.item.content) + 4
                if spent + cost <= 1000:
                    block.append(hit.item.content)
                    spent += cost
            window = history[-10:]
            scoped_tokens.append(
                COUNTER.count(SYSTEM)
                + sum(COUNTER.count(m) + 4 for m in window)
                + (spent if block else 0)
                + COUNTER.count(text)
                + 4
            )
            full_tokens.append(
                COUNTER.count(SYSTEM)
                + sum(COUNTER.count(m) + 4 for m in history)
                + COUNTER.count(text)
                + 4
            )
            if t in conv.probes:
                key, value = conv.probes[t]
                hit = any(value.lower() in c.lower() for c in block)
                hits_at_probe.append(hit)
                by_key.setdefault(key, []).append(hit)
                # What a new session of the same user would find: user memory
                # only (this session's raw turns would not be there), at each
                # candidate threshold, within the user limit of 5.
                for threshold in LONG_TERM_THRESHOLDS:
                    found = await memory.search("bench", text, {user_scope: 5}, threshold=threshold)
                    long_term.setdefault(threshold, []).append(
                        any(value.lower() in h.item.content.lower() for h in found)
                    )
            answer = answer_for(text)
            history += [text, answer]
            await memory.add(
                "bench",
                session,
                f"User: {text}\nAssistant: {answer}",
                memory_type="turn",
                importance=0.5,
            )
            before = calls["n"]
            await extractor.enqueue(
                "bench",
                [{"role": "user", "content": text}, {"role": "assistant", "content": answer}],
                user_id=conv.user,
                agent=None,
                session_id=f"{conv.user}:{t}",
            )
            await extractor.run_pending(tenant="bench")
            extraction_calls_per_turn.append(calls["n"] - before)
    await database.dispose()
    ordered = sorted(search_ms)
    return {
        "seed": args.seed,
        "users": args.users,
        "turns": args.turns,
        "probes": len(hits_at_probe),
        "threshold": args.threshold,
        "noise_memories": args.noise,
        "recall_at_first_relevant_turn": sum(hits_at_probe) / len(hits_at_probe),
        "recall_by_fact": {k: sum(v) / len(v) for k, v in sorted(by_key.items())},
        "long_term_recall_by_threshold": {
            str(t): sum(v) / len(v) for t, v in sorted(long_term.items())
        },
        "prompt_tokens_scoped_mean": statistics.mean(scoped_tokens),
        "prompt_tokens_full_mean": statistics.mean(full_tokens),
        "prompt_tokens_scoped_last_turn_mean": statistics.mean(
            scoped_tokens[i] for i in range(args.turns - 1, len(scoped_tokens), args.turns)
        ),
        "prompt_tokens_full_last_turn_mean": statistics.mean(
            full_tokens[i] for i in range(args.turns - 1, len(full_tokens), args.turns)
        ),
        "retrieval_ms_p50": statistics.median(ordered),
        "retrieval_ms_p95": ordered[int(0.95 * (len(ordered) - 1))],
        "extraction_model_calls_per_turn": statistics.mean(extraction_calls_per_turn),
    }


async def run_qwen(args: argparse.Namespace) -> dict[str, Any]:
    """Extraction quality of the packaged Qwen in real jobs, on planted and small-talk turns."""
    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings
    from pilothouse.testing import allow_model_requests

    conversations = generate(args.seed, args.users, args.turns)
    folder = Path(tempfile.mkdtemp(prefix="memory-bench-qwen-"))
    settings = Settings(database_url=f"sqlite+aiosqlite:///{folder / 'q.db'}", secrets_file=None)
    catalog = (Path(__file__).parent / "memory_catalog.yaml").read_text(encoding="utf-8")
    found = spurious = planted = small = 0
    seconds: list[float] = []
    with allow_model_requests():
        async with Pilothouse(settings) as ph:
            await ph.catalog.import_text(catalog)
            extractor = ph._shared.runtime().extractor
            for conv in conversations:
                chosen = sorted(conv.planted)[: args.qwen_turns // 2]
                chosen += [
                    t
                    for t in range(len(conv.turns))
                    if t not in conv.planted and t not in conv.probes
                ][: args.qwen_turns // 2]
                for t in chosen:
                    text = conv.turns[t]
                    await extractor.enqueue(
                        "default",
                        [
                            {"role": "user", "content": text},
                            {"role": "assistant", "content": answer_for(text)},
                        ],
                        user_id=f"{conv.user}-{t}",
                        agent=None,
                        session_id=None,
                        action_code="CHAT",
                    )
                    started = time.perf_counter()
                    [outcome] = await extractor.run_pending(limit=1, tenant="default")
                    seconds.append(time.perf_counter() - started)
                    added = [e["text"] for e in outcome.events if e["event"] == "ADD"]
                    if t in conv.planted:
                        planted += 1
                        key_value = conv.planted[t][1].split(" ")[-1].rstrip(".").lower()
                        found += any(key_value in a.lower() for a in added)
                    else:
                        small += 1
                        spurious += len(added)
    return {
        "model": "Qwen2.5-Coder-0.5B-Instruct Q4_K_M (llama.cpp, grammar from the JSON schema)",
        "planted_turns": planted,
        "planted_fact_extracted": found / planted if planted else None,
        "small_talk_turns": small,
        "spurious_memories_per_small_talk_turn": spurious / small if small else None,
        "seconds_per_job_mean": statistics.mean(seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=16)
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--extractor", choices=["scripted", "qwen"], default="scripted")
    parser.add_argument("--qwen-turns", type=int, default=12)
    parser.add_argument("--threshold", type=float, default=0.1)
    parser.add_argument("--noise", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    result = asyncio.run(run(args) if args.extractor == "scripted" else run_qwen(args))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
