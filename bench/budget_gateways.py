"""Budgets under concurrency: pilothouse beside the gateway budgets that run on this machine.

Every contender gets the same burst: ``--calls`` chat calls at once against
a money limit of ``--limit`` dollars, to the mock upstream (``plain-d<ms>``:
an answer after ``--delay-ms``, reporting 20 prompt and 6 completion tokens),
at $1,000 per million tokens in and out, so each call costs $0.026 and an
exact gate admits ``floor(limit / 0.026)`` calls. What a contender spent is
counted at the upstream (the calls that reached it × $0.026), not taken from
the contender; what the contender itself counted is reported beside it.

Contenders:

- ``pilothouse``: a tenant ``money`` budget (period ``total``) on an action,
  one process, SQLite store; each call holds its worst case before it leaves.
- ``litellm-sdk``: ``litellm.max_budget``, the SDK's process-wide budget.
- ``litellm-router``: a ``Router`` with ``provider_budget_config`` (in-memory
  spend; the same code keeps it in Redis across instances).

LiteLLM's proxy budgets per key, user and team need its database (Prisma,
whose query engine binaries download on first use); nothing downloads here,
so they are not measured. Writes ``bench/results/budget-gateways.md`` and
``.json``. Run: ``python bench/budget_gateways.py [--calls 200]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio
from childenv import MOCK_KEY, child_env
from harness import Mock

from pilothouse.api import Pilothouse
from pilothouse.errors import BudgetExceededError
from pilothouse.settings import Settings

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
LITELLM_PYTHON = BENCH / ".venv-litellm" / "bin" / "python"
PRICE_PER_MILLION = 1000
CALL_COST = Decimal(20 + 6) * PRICE_PER_MILLION / 1_000_000

CATALOG = """\
providers:
  - code: MOCK
    kind: openai-compatible
    base_url: {base_url}
    api_key: "@secrets(BENCH_MOCK_API_KEY)"
models:
  - code: PRICED
    provider: MOCK
    model_name: {model}
    capabilities: [SR]
    input_price: {price}
    output_price: {price}
configurations:
  - code: SHRT
    max_tokens: 8
    retry_count: 0
actions:
  - code: ASK
    model: PRICED
    configuration: SHRT
    prompt: Answer in one word.
    ask_user: false
budgets:
  - code: SPEND
    name: The tenant's whole spend
    scope: tenant
    period: total
    money: {limit}
"""

LITELLM_CHILD = """
import asyncio, json, sys
import litellm
from litellm import Router

base_url, model, calls, limit, price, mode, at_once = sys.argv[1:8]
calls, limit, price = int(calls), float(limit), float(price) / 1_000_000
litellm.register_model({
    model: {"input_cost_per_token": price, "output_cost_per_token": price,
            "litellm_provider": "openai", "mode": "chat", "max_tokens": 4096},
})
messages = [{"role": "user", "content": "Hi"}]
common = {"api_base": base_url, "api_key": "x", "max_tokens": 8}

async def main():
    refused = failed = answered = 0
    if mode == "sdk":
        litellm.max_budget = limit
        async def one():
            return await litellm.acompletion(model="openai/" + model, messages=messages,
                                             num_retries=0, **common)
    else:
        router = Router(
            model_list=[
                {"model_name": "m", "litellm_params": {"model": "openai/" + model, **common}}
            ],
            provider_budget_config={"openai": {"budget_limit": limit, "time_period": "1d"}},
            num_retries=0,
        )
        await asyncio.sleep(0.1)  # the limiter seeds its cache in a task
        async def one():
            return await router.acompletion(model="m", messages=messages)
    async def run():
        nonlocal refused, failed, answered
        try:
            await one()
            answered += 1
        except Exception as exc:
            name = type(exc).__name__
            if "Budget" in name or "budget" in str(exc).lower():
                refused += 1
            else:
                failed += 1
                print(repr(exc)[:300], file=sys.stderr)
    if at_once == "1":
        await asyncio.gather(*(run() for _ in range(calls)))
    else:
        for _ in range(calls):
            await run()
    await asyncio.sleep(1.0)  # success callbacks run after the call returns
    counted = litellm._current_cost if mode == "sdk" else None
    if mode != "sdk":
        cache = router.router_budget_logger.dual_cache
        counted = await cache.async_get_cache("provider_spend:openai:1d")
    print(json.dumps({"answered": answered, "refused": refused, "failed": failed,
                      "counted": counted}))

asyncio.run(main())
"""


async def pilothouse_burst(
    base_url: str, model: str, calls: int, limit: Decimal, at_once: bool
) -> dict[str, Any]:
    """Run the calls through pilothouse; return answered, refused, failed and its own ledger."""
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / 'budget.db'}"
        settings = Settings(
            database_url=url,
            secrets_file=None,
            egress_allow=["127.0.0.1"],
            secrets_env={"*": ["BENCH_MOCK_API_KEY"]},
        )
        async with Pilothouse(settings) as ph:
            await ph.catalog.import_text(
                CATALOG.format(base_url=base_url, model=model, price=PRICE_PER_MILLION, limit=limit)
            )
            outcome = {"answered": 0, "refused": 0, "failed": 0}

            async def one(index: int) -> None:
                try:
                    await ph.command.start_and_send("Hi", action="ASK", memory_id=f"u{index}")
                    outcome["answered"] += 1
                except BudgetExceededError:
                    outcome["refused"] += 1

            if at_once:
                async with anyio.create_task_group() as group:
                    for index in range(calls):
                        group.start_soon(one, index)
            else:
                for index in range(calls):
                    await one(index)
            (status,) = await ph.query.budget_status()
            return {**outcome, "counted": float(Decimal(status.spent["money"]))}


def litellm_burst(
    mode: str, base_url: str, model: str, calls: int, limit: Decimal, at_once: bool
) -> dict[str, Any]:
    """Run the calls through LiteLLM in its own environment; return its outcome."""
    done = subprocess.run(
        [
            str(LITELLM_PYTHON),
            "-c",
            LITELLM_CHILD,
            base_url,
            model,
            str(calls),
            str(limit),
            str(PRICE_PER_MILLION),
            mode,
            "1" if at_once else "0",
        ],
        capture_output=True,
        text=True,
        env=child_env(**MOCK_KEY),
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"litellm {mode} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(
    rows: dict[str, dict[str, Any]], calls: int, sequence: int, limit: Decimal, delay: int
) -> str:
    exact = math.floor(limit / CALL_COST)
    lines = [
        "## Budgets under a burst: pilothouse and the gateway budgets that run here",
        "",
        f"Method: `bench/budget_gateways.py`: {calls} chat calls at once, then {sequence} "
        f"one at a time (a fresh ledger each), against a ${limit} limit; mock upstream "
        f"answering after {delay} ms with 20 + 6 tokens at "
        f"$1,000 per million (${CALL_COST} a call), so an exact gate admits {exact} calls "
        f"(${exact * CALL_COST}). Spent is counted at the upstream. Machine: "
        f"{platform.machine()}, Python {platform.python_version()}.",
        "",
        "| contender | calls | reached the model | refused | errors | spent | × limit "
        "| the contender counted |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in rows.items():
        spent = row["reached"] * CALL_COST
        counted = row.get("counted")
        counted_text = "–" if counted is None else f"${counted:.3f}"
        contender, _, how = name.partition(" ")
        lines.append(
            f"| {contender} | {how} | {row['reached']} | {row['refused']} | {row['failed']} | "
            f"${spent:.3f} | {spent / limit:.2f} | {counted_text} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--sequence", type=int, default=40)
    parser.add_argument("--limit", type=Decimal, default=Decimal("0.5"))
    parser.add_argument("--delay-ms", type=int, default=200)
    args = parser.parse_args()
    model = f"plain-d{args.delay_ms}"
    os.environ["BENCH_MOCK_API_KEY"] = MOCK_KEY["BENCH_MOCK_API_KEY"]
    mock = Mock(sys.executable)
    rows: dict[str, dict[str, Any]] = {}
    try:
        contenders: list[str] = ["pilothouse"]
        if LITELLM_PYTHON.exists():
            contenders += ["litellm-sdk", "litellm-router"]
        else:
            print("bench/.venv-litellm is missing (bench/run.sh creates it): LiteLLM skipped")
        for name in contenders:
            for at_once, calls in ((True, args.calls), (False, args.sequence)):
                before = mock.stats()["requests"]
                if name == "pilothouse":
                    row = anyio.run(
                        pilothouse_burst, mock.base_url, model, calls, args.limit, at_once
                    )
                else:
                    mode = name.removeprefix("litellm-")
                    row = litellm_burst(mode, mock.base_url, model, calls, args.limit, at_once)
                row["reached"] = mock.stats()["requests"] - before
                label = f"{name} {calls} at once" if at_once else f"{name} {calls} in turn"
                rows[label] = row
                print(f"{label}: {row}")
    finally:
        mock.close()
    RESULTS.mkdir(exist_ok=True)
    text = report(rows, args.calls, args.sequence, args.limit, args.delay_ms)
    (RESULTS / "budget-gateways.json").write_text(
        json.dumps(
            {
                "calls": args.calls,
                "sequence": args.sequence,
                "limit": str(args.limit),
                "delay_ms": args.delay_ms,
                "rows": rows,
            },
            indent=2,
            default=str,
        )
        + "\n"
    )
    (RESULTS / "budget-gateways.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
