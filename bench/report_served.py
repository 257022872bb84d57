"""The "served" section of docs/benchmarks.md: pilothouse serve beside the LiteLLM proxy.

``section(results)`` renders ``results["served"]`` (written by
``bench/harness.py`` for the contenders of ``bench/served.py``), with the raw
httpx floor and in-process pilothouse of the same scenario as reference rows.
"""

from __future__ import annotations

from typing import Any

FLOOR = "httpx"
IN_PROCESS = "pilothouse-sqlite"
LABELS = {
    "httpx": "raw httpx to the mock (floor; client CPU)",
    "pilothouse-sqlite": "pilothouse in process, audit on SQLite (reference)",
    "pilothouse-serve": "pilothouse serve, `/v1/chat/completions`",
    "litellm-proxy": "LiteLLM proxy, `/v1/chat/completions`",
}
TITLES = {
    "plain-d0": "plain answer, mock delay 0 ms",
    "plain-d50": "plain answer, mock delay 50 ms",
    "tool-d0": "one tool round trip (20 tool schemas), mock delay 0 ms",
    "stream": "streaming, first chunk at 200 ms, 64 chunks 20 ms apart",
}


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}×"


def _rows(results: dict[str, Any], scenario: str) -> list[tuple[str, dict[str, Any]]]:
    own = results["scenarios"].get(scenario, {}).get("contenders", {})
    rows = [(n, own[n]) for n in (FLOOR, IN_PROCESS) if n in own]
    return rows + list(results["served"][scenario].items())


def _table(results: dict[str, Any], scenario: str) -> list[str]:
    rows = _rows(results, scenario)
    floor = dict(rows).get(FLOOR, {})
    if scenario == "stream":
        lines = [
            "| contender | TTFT p50 ms | added TTFT vs floor ms | inter-chunk gap p99 ms |"
            " chunks received / expected | server CPU ms per call | client CPU ms per call |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in rows:
            ttft, base = r.get("ttft_p50_ms"), floor.get("ttft_p50_ms")
            lines.append(
                f"| {LABELS.get(name, name)} | {_f(ttft)} |"
                f" {_f(ttft - base) if ttft is not None and base is not None else 'n/a'} |"
                f" {_f(r.get('gap_p99_ms'))} |"
                f" {r.get('chunks_received')} / {r.get('chunks_expected')} |"
                f" {_f(r['cpu_ms_per_call']) if name in results['served'][scenario] else '—'} |"
                f" {_f(r.get('client_cpu_ms_per_call') or r['cpu_ms_per_call'])} |"
            )
        return lines
    lines = [
        "| contender | calls | errors | p50 ms | p99 ms | p50 − floor ms | p50 ÷ floor |"
        " CPU ms per call (server's, or the in-process contender's) | CPU ÷ floor |"
        " client CPU ms per call |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows:
        served = name in results["served"][scenario]
        added = r["p50_ms"] - floor["p50_ms"] if floor and r["p50_ms"] is not None else None
        cpu, floor_cpu = r["cpu_ms_per_call"], floor.get("cpu_ms_per_call")
        lines.append(
            f"| {LABELS.get(name, name)} | {r['calls']} | {r['errors']} | {_f(r['p50_ms'])} |"
            f" {_f(r['p99_ms'])} |"
            f" {_f(added)} |"
            f" {_ratio(r['p50_ms'], floor.get('p50_ms'))} |"
            f" {_f(cpu)} | {_ratio(cpu, floor_cpu)} |"
            f" {_f(r.get('client_cpu_ms_per_call')) if served else '—'} |"
        )
    return lines


def section(results: dict[str, Any]) -> list[str]:
    """The served section as markdown lines (empty when no served contender ran)."""
    served = results.get("served")
    if not served:
        return []
    lines = [
        "## Served: pilothouse serve and the LiteLLM proxy, concurrency 1",
        "",
        "Each server is one process, one worker, pinned to the contender core; the load"
        " generator (an `httpx.AsyncClient`, `bench/served.py`) runs on the other core beside the"
        " mock and times each call. *CPU* of a served row is the server process's own (user +"
        " system, all threads, from `/proc/<pid>/stat` before and after each round; 10 ms ticks),"
        " so it compares with the in-process contenders' CPU; the client's CPU is apart."
        " `pilothouse serve` runs on a SQLite database (benchmark catalog imported, audit on, an"
        " API key from `pilothouse keys create`, rate limit off, log level warning); a request is"
        " one new conversation and one governed turn (model `action:<CODE>`), and it runs the"
        " tool loop itself (one HTTP request, two upstream requests). The LiteLLM proxy"
        " (`litellm --config … --num_workers 1`, no database, no master key, logs at warning) only"
        " relays, so for the tool round trip the client sends two requests through it."
        " A non-streamed request makes a non-streamed upstream call (the service's metrics and"
        " running-turn listeners take no deltas), and a new conversation is written with its"
        " first turn (`start_and_send`)."
        " Interleaved with the other contenders, same rounds and calls.",
        "",
    ]
    for scenario in served:
        lines += [f"### {TITLES.get(scenario, scenario)}", "", *_table(results, scenario), ""]
        skipped = {
            k: v
            for k, v in results["scenarios"].get(scenario, {}).get("skipped", {}).items()
            if k in LABELS
        }
        if skipped:
            lines += [
                "Not measured: "
                + "; ".join(f"{k}: {v.splitlines()[0]}" for k, v in skipped.items()),
                "",
            ]
    return lines
