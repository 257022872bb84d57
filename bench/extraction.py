"""Memory extraction: precision of what is written, and whether updates replace stale facts.

    .venv/bin/python bench/extraction.py run --model scripted
    flock /tmp/ph-heavy.lock .venv/bin/python bench/extraction.py run --model qwen
    .venv/bin/python bench/extraction.py report

Each case of ``bench/extraction_cases.yaml`` (labelled by hand) is one turn
of a new user, with the memories that user had before it; it runs as a real
extraction job (the facts prompt, the checks of what may be stored, the
ADD/UPDATE/DELETE/NOOP decision against similar memories, one transaction),
on the packaged MiniLM and a SQLite file. Two models answer the prompts:

- ``scripted``: a stand-in for a weak model, scripted from the case's
  ``noisy`` list (the right facts mixed with the prompt's own example,
  acknowledgements and general knowledge) and answering ADD to every
  decision; it measures what pilothouse's checks keep out and put right.
- ``qwen``: the packaged Qwen2.5-Coder-0.5B on llama.cpp (grammar from the
  JSON schema), as a deployment without a hosted model has it.

Figures: **proposed precision**, the share of the model's proposed facts
that are correct (a user fact holding a word of the case's ``accept``); **stored
precision**, the same for the memories written (ADD and UPDATE); **recall**,
the share of ``expect`` words found in the user's memories after the turn;
**update accuracy**, the share of cases with a prior memory after which
every ``expect`` word is present and no ``stale`` word is left (a value
that changed replaced the old one; one already known was not doubled).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
CASES = HERE / "extraction_cases.yaml"
RESULTS = HERE / "results"
REPORT = RESULTS / "extraction.md"


def _correct(text: str, case: dict[str, Any]) -> bool:
    low = text.lower()
    return any(word in low for word in case.get("accept") or [])


def _scripted(cases: dict[str, dict[str, Any]]) -> Any:
    """The weak model: the case's noisy facts; ADD to every decision."""

    async def complete(job: Any, system: str, user: str, schema: Any) -> str:
        if "EXISTING:" in user:
            return json.dumps({"event": "ADD", "id": None, "text": None})
        case = cases[job.user_id]
        facts = [{"text": t, "scope": "user", "type": "fact"} for t in case["noisy"]]
        return json.dumps({"facts": facts})

    return complete


async def _run(model: str) -> dict[str, Any]:
    from pilothouse.api import Pilothouse
    from pilothouse.memory._extract import FACTS_PROMPT, parse_json_object
    from pilothouse.settings import Settings
    from pilothouse.testing import allow_model_requests
    from pilothouse.types import MemoryScope

    cases = yaml.safe_load(CASES.read_text(encoding="utf-8"))
    by_user = {f"u-{c['id']}": c for c in cases}
    folder = Path(tempfile.mkdtemp(prefix="ph-extraction-"))
    settings = Settings(database_url=f"sqlite+aiosqlite:///{folder / 'x.db'}", secrets_file=None)
    catalog = (HERE / "memory_catalog.yaml").read_text(encoding="utf-8")
    proposed: list[tuple[str, bool]] = []
    rows: list[dict[str, Any]] = []
    seconds: list[float] = []
    with allow_model_requests():
        async with Pilothouse(settings) as ph:
            await ph.catalog.import_text(catalog)
            extractor = ph._shared.runtime().extractor
            asked = _scripted(by_user) if model == "scripted" else extractor.complete

            async def complete(job: Any, system: str, user: str, schema: Any) -> str:
                answer = await asked(job, system, user, schema)
                if system == FACTS_PROMPT:
                    print("proposed:", answer[:500], flush=True)
                    try:
                        facts = parse_json_object(answer).get("facts") or []
                    except ValueError:
                        facts = []
                    case = by_user[job.user_id]
                    for fact in facts:
                        text = str(fact.get("text", "")) if isinstance(fact, dict) else str(fact)
                        scope = fact.get("scope", "user") if isinstance(fact, dict) else "user"
                        # Every labelled fact is about the user: an "agent" one is chatter.
                        proposed.append((text, scope == "user" and _correct(text, case)))
                return answer

            extractor.complete = complete
            memory = extractor.memory
            for user_id, case in by_user.items():
                scope = MemoryScope("user", user_id=user_id)
                for text in case.get("prior") or []:
                    await memory.add("default", scope, text)
                await extractor.enqueue(
                    "default",
                    [
                        {"role": "user", "content": case["user"]},
                        {"role": "assistant", "content": case["assistant"]},
                    ],
                    user_id=user_id,
                    agent=None,
                    session_id=None,
                    action_code="CHAT",
                    max_attempts=1,
                )
                started = time.perf_counter()
                [outcome] = await extractor.run_pending(limit=1, tenant="default")
                seconds.append(time.perf_counter() - started)
                written = [e["text"] for e in outcome.events if e["event"] in ("ADD", "UPDATE")]
                after = [i.content.lower() for i in await memory.list("default", scope)]
                expect = case.get("expect") or []
                stale = case.get("stale") or []
                rows.append(
                    {
                        "id": case["id"],
                        "status": outcome.status,
                        "error": outcome.error,
                        "written": written,
                        "correct": [_correct(t, case) for t in written],
                        "found": [any(w in m for m in after) for w in expect],
                        "stale_left": [w for w in stale if any(w in m for m in after)],
                        "update_case": bool(case.get("prior")),
                        "after": after,
                    }
                )
                print(rows[-1], f"{seconds[-1]:.1f} s", flush=True)
    writes = [c for r in rows for c in r["correct"]]
    found = [f for r in rows for f in r["found"]]
    updates = [r for r in rows if r["update_case"]]
    return {
        "model": model,
        "cases": len(rows),
        "proposed": len(proposed),
        "proposed_precision": sum(c for _, c in proposed) / len(proposed) if proposed else None,
        "written": len(writes),
        "stored_precision": sum(writes) / len(writes) if writes else None,
        "recall": sum(found) / len(found) if found else None,
        "update_cases": len(updates),
        "update_accuracy": sum(all(r["found"]) and not r["stale_left"] for r in updates)
        / len(updates),
        "failed_jobs": sum(r["status"] != "done" for r in rows),
        "seconds_per_job": sum(seconds) / len(seconds),
        "rows": rows,
    }


def report() -> None:
    """Write the table of ``bench/results/extraction-*.json``."""
    lines = [
        "### Memory extraction: precision and update accuracy",
        "",
        "A labelled set of 11 turns (`bench/extraction_cases.yaml`: introductions, a "
        "preference, an allergy, four changed values, one already-known fact, and four "
        "turns with nothing to remember: a question of general knowledge, a book tip, "
        "thanks), each a real extraction job on a new user with the memories that user "
        "had before; packaged MiniLM, SQLite. Method in `bench/extraction.py`.",
        "",
        "| model | proposed precision | stored precision | recall | update accuracy "
        "| failed jobs | s per job |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    names = {
        "scripted": "scripted weak model (junk mixed in, always ADD)",
        "qwen": "Qwen2.5-Coder-0.5B (llama.cpp)",
    }
    for model in ("scripted", "qwen"):
        path = RESULTS / f"extraction-{model}.json"
        if not path.exists():
            continue
        d = json.loads(path.read_text())

        def share(value: float | None) -> str:
            return "–" if value is None else f"{value:.2f}"

        lines.append(
            f"| {names[model]} | {share(d['proposed_precision'])} ({d['proposed']}) "
            f"| {share(d['stored_precision'])} ({d['written']}) | {share(d['recall'])} "
            f"| {share(d['update_accuracy'])} ({d['update_cases']}) | {d['failed_jobs']} "
            f"| {d['seconds_per_job']:.1f} |"
        )
    lines += ["", "(In brackets: how many facts, memories or cases the share is of.)"]
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=["run", "report"])
    parser.add_argument("--model", choices=["scripted", "qwen"], default="scripted")
    args = parser.parse_args()
    if args.step == "run":
        RESULTS.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(_run(args.model))
        (RESULTS / f"extraction-{args.model}.json").write_text(json.dumps(result, indent=2))
        print({k: v for k, v in result.items() if k != "rows"})
    report()


if __name__ == "__main__":
    main()
