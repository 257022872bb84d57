"""The scenario 2 and stream-N parts of docs/benchmarks.md, and their plots.

Called by ``bench/report.py``: :func:`verdicts` for the verdict list,
:func:`section` for the sections; the figures come from ``bench/concurrency.py``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

FLOOR = "httpx"
BASE = "pydantic-ai-model_request"
PEERS = ("litellm", "pydantic-ai-Agent.run", "langchain")
"""The peer libraries pilothouse must beat (the ones scenario 1's verdicts name)."""
PILOTHOUSE = ("pilothouse-sqlite", "pilothouse-noaudit", "pilothouse-postgres")
_NAME = re.compile(r"^(conc|stream)-(\d+)$")


def handles(scenario: str) -> bool:
    """Tell whether ``scenario`` is rendered here (``conc-N``, ``stream-N``)."""
    return bool(_NAME.match(scenario))


def _levels(results: dict[str, Any], kind: str) -> list[tuple[int, dict[str, Any]]]:
    found = []
    for name, data in results["scenarios"].items():
        match = _NAME.match(name)
        if match and match.group(1) == kind:
            found.append((int(match.group(2)), data))
    return sorted(found, key=lambda item: item[0])


def _f(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}×"


def _label(labels: dict[str, str], name: str) -> str:
    if name == FLOOR:  # bench/concurrency.py: the floor is httpx2 here
        return "raw httpx2 (floor)"
    return labels.get(name, name)


def _store_problems(store: dict[str, Any] | None) -> int:
    if not store:
        return 0
    return (
        store["lost_messages"]
        + store["extra_messages"]
        + store["duplicate_sequences"]
        + store["duplicate_contents"]
        + store["not_idle"]
        + store["conversations_missing"]
        + store.get("complete_not_completed", 0)
    )


def verdicts(results: dict[str, Any], labels: dict[str, str]) -> list[str]:
    """Return the verdict lines of scenario 2 and stream-N (nothing measured: one line)."""
    out: list[str] = []
    conc = _levels(results, "conc")
    for users, data in conc:
        rows = data["contenders"]
        ph, base = rows.get("pilothouse-sqlite"), rows.get(BASE)
        if not ph or not base:
            continue
        limit = 0.9 * base["throughput_turns_s"]
        behind = [
            f"{_label(labels, p)} {rows[p]['throughput_turns_s']:.1f}"
            for p in PEERS
            if p in rows and rows[p]["throughput_turns_s"] >= ph["throughput_turns_s"]
        ]
        met = ph["throughput_turns_s"] >= limit and not behind and ph["errors"] == 0
        out.append(
            f"- **Scenario 2, {users:,} users: throughput ≥ 0.9 × model_request and ahead of"
            f" LiteLLM, Agent.run, LangChain: {'MET' if met else 'MISSED'}.** pilothouse (audit on"
            f" SQLite) {ph['throughput_turns_s']:.1f} turns/s vs limit {limit:.1f}"
            f" (model_request {base['throughput_turns_s']:.1f};"
            f" {ph['throughput_turns_s'] / base['throughput_turns_s']:.2f}×)"
            + (f"; peers at or above it: {', '.join(behind)}" if behind else "")
            + (f"; {ph['errors']} failed calls" if ph["errors"] else "")
            + "."
        )
    if conc:
        problems = []
        for users, data in conc:
            for name in PILOTHOUSE:
                r = data["contenders"].get(name)
                if r is None:
                    continue
                bad = _store_problems(r.get("store"))
                if bad or r["errors"]:
                    problems.append(
                        f"{_label(labels, name)} at {users:,}: {r['errors']} failed calls,"
                        f" {bad} store anomalies"
                    )
        out.append(
            "- **Scenario 2, zero messages lost or duplicated (pilothouse, every level and"
            f" store): {'MET' if not problems else 'MISSED'}.**"
            + (
                " " + "; ".join(problems) + "."
                if problems
                else " Counts in the store tables below."
            )
        )
    for streams, data in _levels(results, "stream"):
        rows = data["contenders"]
        if not (rows.get("pilothouse-sqlite") and rows.get(FLOOR) and rows.get(BASE)):
            continue
        # Measured from the launch of all the streams when the run has it
        # (every stream is asked for at once); older results only have the
        # per-call clock, which starts late for a client that yields late.
        key = (
            "ttft_launch_p50_ms"
            if all(r.get("ttft_launch_p50_ms") is not None for r in rows.values())
            else "ttft_p50_ms"
        )
        f0 = rows[FLOOR][key]
        ph_add = rows["pilothouse-sqlite"][key] - f0
        pai_add = rows[BASE][key] - f0
        lc_add = rows["langchain"][key] - f0 if "langchain" in rows else None
        ok = ph_add <= pai_add + 1 and (lc_add is None or ph_add < lc_add)
        lost = {
            _label(labels, n): r["chunks_expected"] - r["chunks_received"]
            for n, r in rows.items()
            if r["chunks_expected"] != r["chunks_received"]
        }
        out.append(
            f"- **Scenario 3 at concurrency {streams}, added TTFT"
            + (" (from the launch)" if key == "ttft_launch_p50_ms" else "")
            + f" ≤ pydantic-ai + 1 ms and below LangChain: {'MET' if ok else 'MISSED'}.**"
            f" pilothouse +{ph_add:,.1f} ms,"
            f" pydantic-ai +{pai_add:,.1f} ms"
            + (f", LangChain +{lc_add:,.1f} ms" if lc_add is not None else "")
            + f". Chunks lost: {lost or 'none, for every contender'}."
        )
    if not out:
        out.append(
            "- Scenario 2 (concurrency) and scenario 3 at concurrency 200: **not measured**."
        )
    return out


def _method(results: dict[str, Any]) -> list[str]:
    settings = next(
        (d["settings"] for _, d in _levels(results, "conc") + _levels(results, "stream")), None
    )
    if settings is None:
        return []
    delay, turns, tool = settings["delay_ms"], settings["turns"], settings["tool_turn"]
    per_conv = turns + (1 if turns >= tool else 0)
    return [
        "Method (`bench/concurrency.py`):",
        "",
        f"- **Closed system.** N simulated users start at once; each runs one conversation of"
        f" {turns} turns and sends turn *t* as soon as turn *t − 1* is answered. Turn {tool} asks"
        f" for the tool (`tool_00`), so a conversation is {per_conv} model requests, each held"
        f" {delay} ms by the mock (`conv-d{delay}`). Every request carries the system prompt, the"
        " whole history (the tool call and its result included) and one tool schema.",
        "- **Each contender keeps its own history**: peers a growing message list (pydantic-ai"
        " `Agent.run`: `message_history=result.all_messages()`; LangChain: `ChatOpenAI.ainvoke`"
        " with its tool loop); pilothouse one conversation per user (`start_and_send`, then"
        f" `send_message` × {turns - 1}), its history read back from the store each turn. The mock"
        " answers `re <n>: <user text>`, so every contender checks that each answer came back to"
        " the right turn with the whole history (*history mismatches*: must be 0).",
        "- **The floor is raw httpx2** (the httpx fork under openai 3, pydantic-ai, LangChain and"
        " pilothouse; no SDK): httpx 0.28's pool (httpcore 1.0), the floor of scenario 1, rescans"
        " every connection for every queued request, which from about 150 connections costs it"
        " ~22 ms of CPU per turn against ~3 ms at 50 (measured while building this scenario), so"
        " it would be neither floor nor ceiling here.",
        "- **Connection pools raised for everyone**"
        f" to {settings['pool']:,} connections (keep-alive"
        " too), and the same timeouts: 600 s, connect 10 s (pilothouse's defaults; the openai"
        " SDK's default connect timeout is 5 s; LiteLLM gets `timeout=600`),"
        " so no contender is throttled or failed by its client's defaults"
        " (httpx2 100 connections; openai SDK 1,000 with 100 kept alive; LiteLLM's aiohttp"
        " transport 500 per host, raised with `AIOHTTP_CONNECTOR_LIMIT(_PER_HOST)`; pilothouse's"
        " provider client 1,000, set here through `PILOTHOUSE_PROVIDER_MAX_CONNECTIONS`'s"
        " setting; before this run it had httpx2's 100 with 20 kept alive and no setting). File"
        " descriptor limits are raised to the hard limit in every worker.",
        "- **Throughput** = turns completed ÷ wall time of the round. **Ideal (Little's law)**:"
        f" N requests always in flight, each {delay} ms, so N ÷ ({delay} ms × {per_conv} requests"
        f" ÷ {turns} turns) turns/s. **CPU ceiling** = turns ÷ CPU seconds of the contender's"
        " process: the most one core can give it. On this machine every library is CPU-bound"
        " long before 1,000 users (one core runs the contender), so achieved throughput is"
        " min(ideal, CPU ceiling) at best; raw httpx is the ceiling for a Python client.",
        f"- **Latency − delay** = turn latency minus the mock's hold for that turn ({delay} ms,"
        f" {2 * delay} ms for the tool turn):"
        " the time spent in the client and queueing for its CPU.",
        "- **Event-loop lag**: a task in the contender's loop sleeps 10 ms over and over"
        " and records the overshoot."
        " **Memory**: RSS sampled every 50 ms during the round; *peak RSS* is the"
        " round's peak, *KB per conversation* = (peak RSS − RSS before the round) ÷ N; ru_maxrss"
        " is the process's peak since it started (imports included).",
        f"- **Rounds**: {settings['rounds']} per level"
        " (fewer than scenario 1: a round at 1,000 users"
        " takes up to minutes for the slowest contenders), after a warm-up of"
        f" {settings['warmup']} conversations; one fresh process per contender and level, so"
        " memory figures never reuse an earlier level's arenas. Contenders run one after the other;"
        " start-up and warm-up may use both cores, then every thread of the contender's process"
        " is pinned to its core for the rounds.",
        "- **Store counts (pilothouse)**, after the round, in SQL: per conversation, messages"
        f" stored vs expected ({2 * turns + 2} for {turns} completed turns: user + answer each,"
        " plus the tool call and its result), duplicate sequences, the same role + content"
        " twice, and conversations still running, waiting or stuck. A conversation with a"
        " failed turn is counted under *failed calls* (with the error), not as lost messages.",
    ]


def _stream_shape(model: str) -> tuple[int, int, int]:
    match = re.match(r"^stream-f(\d+)-k(\d+)-g(\d+)$", model)
    assert match is not None, model
    first, chunks, gap = (int(g) for g in match.groups())
    return first, chunks, gap


def _capacity(results: dict[str, Any]) -> list[str]:
    cap = results.get("mock_capacity_concurrency")
    if not cap:
        return []
    lines = ["Mock capacity at this load (validity check, " + cap["note"] + "):", ""]
    c = cap.get("conc")
    if c:
        loads = [
            r.get("requests_per_s") or 0
            for _, d in _levels(results, "conc")
            for r in d["contenders"].values()
        ]
        peak = max(loads) if loads else 0
        headroom = (
            c["cpu_bound_capacity_per_s"] / peak if peak and c["cpu_bound_capacity_per_s"] else None
        )
        lines.append(
            f"- {c['connections']:,} connections, {c['delay_ms']} ms delay: the raw client got"
            f" {c['requests_per_s']:,.0f} requests/s of the ideal {c['ideal_requests_per_s']:,.0f}"
            f" ({c['requests_per_s'] / c['ideal_requests_per_s']:.0%}),"
            f" each {_f(c['excess_p50_ms'])} ms"
            f" (p50) / {_f(c['excess_p99_ms'])} ms (p99) over the delay. The mock spends"
            f" {c['cpu_us_per_request']:.0f} µs CPU per request: a CPU-bound ceiling of"
            f" {c['cpu_bound_capacity_per_s']:,.0f} requests/s. Highest load a contender put on it"
            f" in scenario 2: {peak:,.0f} requests/s; ceiling ÷ load = **{_f(headroom)}×**"
            + (" (≥ 5×)" if headroom and headroom >= 5 else " (< 5×)")
            + (
                "; the raw client's p99 stays within 50 ms of the delay: **the figures stand**."
                if c["excess_p99_ms"] is not None
                and c["excess_p99_ms"] <= 50
                and headroom
                and headroom >= 5
                else "; **the mock or the load core did not keep up (p99 more than 50 ms over the"
                " delay, or headroom under 5×): read the figures with care**."
            )
        )
    s = cap.get("stream")
    if s:
        streams = _levels(results, "stream")
        first, _, gap = (
            _stream_shape(streams[0][1]["settings"]["stream_model"]) if streams else (200, 64, 20)
        )
        lines.append(
            f"- {s['streams']} streams at once: the raw client saw time to first chunk"
            f" {_f(s['ttft_p50_ms'])} ms (p50) / {_f(s['ttft_p99_ms'])} ms (p99),"
            " inter-chunk gap p99"
            f" {_f(s['gap_p99_ms'])} ms (max {_f(s['gap_max_ms'])}),"
            f" {s['chunks_received']:,} /"
            f" {s['chunks_expected']:,} chunks;"
            f" the mock spent {s['cpu_us_per_stream'] / 1000:.1f} ms"
            " CPU per stream"
            + (
                ": the mock keeps the stream's timing at this load"
                f" (TTFT p99 within 20 ms of {first} ms,"
                f" gap p99 within 10 ms of {gap} ms)."
                if (s["ttft_p99_ms"] or 1e9) <= first + 20 and (s["gap_p99_ms"] or 1e9) <= gap + 10
                else ". **It did not keep the stream's timing"
                f" (TTFT p99 more than 20 ms over {first} ms"
                f" or gap p99 more than 10 ms over {gap} ms):"
                " the mock or the load core fell behind;"
                " read the stream figures with care.**"
            )
        )
    return lines + [""]


def _conc_table(users: int, data: dict[str, Any], labels: dict[str, str]) -> list[str]:
    rows = data["contenders"]
    base = rows.get(BASE, {}).get("throughput_turns_s")
    lines = [
        "| contender | turns done / expected | failed calls | history mismatches | turns/s |"
        " ÷ ideal | ÷ model_request | CPU ceiling turns/s | CPU ms per turn |"
        " latency − delay p50 ms | p99 ms | loop lag p99 ms | loop lag max ms |"
        " peak RSS MB | KB per conversation | ru_maxrss MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {_label(labels, name)} | {r['turns_done']:,} / {r['turns_expected']:,} |"
            f" {r['errors']} |"
            f" {r['history_mismatches']} | {_f(r['throughput_turns_s'])} |"
            f" {_ratio(r['throughput_turns_s'], r['ideal_turns_s'])} |"
            f" {_ratio(r['throughput_turns_s'], base)} | {_f(r['cpu_ceiling_turns_s'])} |"
            f" {_f(r['cpu_ms_per_turn'], 2)} | {_f(r['excess_p50_ms'], 0)} |"
            f" {_f(r['excess_p99_ms'], 0)} |"
            f" {_f(r['lag_p99_ms'])} | {_f(r['lag_max_ms'], 0)} | {_f(r['rss_peak_mb'], 0)} |"
            f" {_f(r['kb_per_conversation'], 0)} | {_f(r['maxrss_mb'], 0)} |"
        )
    ideal = next((r["ideal_turns_s"] for r in rows.values()), None)
    lines += ["", f"Ideal (Little's law) at {users:,} users: {_f(ideal)} turns/s."]
    return lines


def _store_table(levels: list[tuple[int, dict[str, Any]]], labels: dict[str, str]) -> list[str]:
    lines = [
        "| contender | users | conversations complete / started | messages stored / expected |"
        " lost | extra | duplicate sequences | duplicate contents | running or stuck |"
        " statuses (all conversations) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    found = False
    for users, data in levels:
        for name in PILOTHOUSE:
            r = data["contenders"].get(name)
            if not r or not r.get("store"):
                continue
            found = True
            s = r["store"]
            statuses = ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items()))
            lines.append(
                f"| {_label(labels, name)} | {users:,} | {s['complete_conversations']:,} /"
                f" {s['conversations']:,} | {s['stored_messages']:,} / {s['expected_messages']:,} |"
                f" {s['lost_messages']} | {s['extra_messages']} | {s['duplicate_sequences']} |"
                f" {s['duplicate_contents']} | {s['not_idle']} | {statuses} |"
            )
    return lines if found else []


def _errors(levels: list[tuple[int, dict[str, Any]]], labels: dict[str, str]) -> list[str]:
    lines = []
    for users, data in levels:
        for name, r in data["contenders"].items():
            for kind, count in (r.get("error_kinds") or {}).items():
                lines.append(f"- {_label(labels, name)}, {users:,}: {count} × `{kind}`")
    return (["Failed calls, by kind:", "", *lines, ""]) if lines else []


def _stream_table(streams: int, data: dict[str, Any], labels: dict[str, str]) -> list[str]:
    rows = data["contenders"]
    floor = rows.get(FLOOR, {})
    lines = [
        "| contender | streams | failed | TTFT from launch p50 / p99 ms | TTFT p50 ms |"
        " added TTFT vs floor ms | TTFT p99 ms |"
        " gap p50 ms | gap p99 ms | added gap p99 vs floor ms | gap max ms |"
        " chunks received / expected | CPU ms per stream | loop lag p99 ms | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        added = (
            r["ttft_p50_ms"] - floor["ttft_p50_ms"]
            if r.get("ttft_p50_ms") is not None and floor.get("ttft_p50_ms") is not None
            else None
        )
        gap_added = (
            r["gap_p99_ms"] - floor["gap_p99_ms"]
            if r.get("gap_p99_ms") is not None and floor.get("gap_p99_ms") is not None
            else None
        )
        lines.append(
            f"| {_label(labels, name)} | {r['streams']} | {r['errors']} |"
            f" {_f(r.get('ttft_launch_p50_ms'))} / {_f(r.get('ttft_launch_p99_ms'))} |"
            f" {_f(r['ttft_p50_ms'])} |"
            f" {_f(added)} | {_f(r['ttft_p99_ms'])} | {_f(r['gap_p50_ms'])} |"
            f" {_f(r['gap_p99_ms'])} |"
            f" {_f(gap_added)} | {_f(r['gap_max_ms'])} |"
            f" {r['chunks_received']:,} / {r['chunks_expected']:,} |"
            f" {_f(r['cpu_ms_per_stream'])} | {_f(r['lag_p99_ms'])} | {_f(r['rss_peak_mb'], 0)} |"
        )
    return lines


def _log_axes(ax: Any, xs: list[int]) -> None:
    from matplotlib.ticker import FuncFormatter, NullLocator

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.xaxis.set_minor_locator(NullLocator())
    plain = FuncFormatter(lambda v, _: f"{v:,.0f}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(
        FuncFormatter(lambda v, _: f"{v:,.0f}" if f"{v:.0f}"[0] in "25" else "")
    )


def _plots(results: dict[str, Any], docs: Path, labels: dict[str, str]) -> list[str]:
    levels = _levels(results, "conc")
    if not levels:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = docs / "benchmarks"
    out_dir.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    for _, data in levels:
        names += [n for n in data["contenders"] if n not in names]
    xs = [users for users, _ in levels]
    made = []
    fig, ax = plt.subplots(figsize=(10, 6))
    ideal = [
        next(iter(d["contenders"].values()))["ideal_turns_s"] if d["contenders"] else None
        for _, d in levels
    ]
    ax.plot(xs, ideal, color="black", linestyle=":", marker="o", label="ideal (Little's law)")
    for name in names:
        ys = [d["contenders"].get(name, {}).get("throughput_turns_s") for _, d in levels]
        style: dict[str, Any] = {"marker": "o"}
        if name == FLOOR:
            style.update(color="black", linewidth=2.5, label="raw httpx2 (ceiling)")
        elif name.startswith("pilothouse"):
            style.update(linewidth=2.5, linestyle="-", label=_label(labels, name))
        else:
            style.update(linestyle="--", label=_label(labels, name))
        ax.plot(xs, ys, **style)
    _log_axes(ax, xs)
    ax.set_xlabel("simulated users (one conversation each, 5 turns, tool call on turn 3)")
    ax.set_ylabel("turns completed per second")
    delay = levels[0][1]["settings"]["delay_ms"]
    ax.set_title(
        f"Scenario 2: throughput vs concurrency, mock delay {delay} ms (one core per contender)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out_dir / "concurrency-throughput.png", dpi=110)
    plt.close(fig)
    made.append("concurrency-throughput.png")
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for name in names:
        ys = [d["contenders"].get(name, {}).get("excess_p99_ms") for _, d in levels]
        style = {"marker": "o", "label": _label(labels, name)}
        if name == FLOOR:
            style.update(color="black", linewidth=2.5)
        elif name.startswith("pilothouse"):
            style.update(linewidth=2.5)
        else:
            style.update(linestyle="--")
        ax.plot(xs, ys, **style)
    _log_axes(ax, xs)
    ax.set_xlabel("simulated users")
    ax.set_ylabel("p99 turn latency minus the mock's delay (ms)")
    ax.set_title("Scenario 2: p99 added latency per turn", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(out_dir / "concurrency-p99.png", dpi=110)
    plt.close(fig)
    made.append("concurrency-p99.png")
    return made


def section(
    results: dict[str, Any], docs: Path, labels: dict[str, str], *, draw: bool = True
) -> list[str]:
    """Return the markdown of scenario 2 and stream-N (empty when not measured).

    With ``draw`` the plots are drawn into ``docs/benchmarks``; without, the
    section names those already there.
    """
    conc = _levels(results, "conc")
    streams = _levels(results, "stream")
    if not conc and not streams:
        return []
    names = ("concurrency-throughput.png", "concurrency-p99.png")
    plots = (
        _plots(results, docs, labels)
        if draw
        else [n for n in names if (docs / "benchmarks" / n).exists()]
    )
    lines: list[str] = []
    if conc:
        delay = conc[0][1]["settings"]["delay_ms"]
        lines += [
            "## Scenario 2: concurrent conversations"
            f" ({', '.join(f'{u:,}' for u, _ in conc)} users),"
            f" mock delay {delay} ms",
            "",
            *_method(results),
            "",
            *_capacity(results),
        ]
        if "concurrency-throughput.png" in plots:
            lines += ["![throughput](benchmarks/concurrency-throughput.png)", ""]
        for users, data in conc:
            lines += [f"### {users:,} users", "", *_conc_table(users, data, labels)]
            if data.get("skipped"):
                lines += [
                    "",
                    "Not measured: "
                    + "; ".join(
                        f"{_label(labels, k)}: {v.splitlines()[0][:300]}"
                        for k, v in data["skipped"].items()
                    ),
                ]
            mock = data.get("mock", {})
            lines += ["", f"Mock: {mock.get('requests'):,} requests during the timed rounds.", ""]
        if "concurrency-p99.png" in plots:
            lines += ["![p99](benchmarks/concurrency-p99.png)", ""]
        store = _store_table(conc, labels)
        if store:
            lines += ["### Counted in pilothouse's store after each round", "", *store, ""]
        lines += _errors(conc, labels)
    for n, data in streams:
        first, chunks, gap = _stream_shape(data["settings"]["stream_model"])
        lines += [
            f"## Scenario 3 at concurrency {n}: {n} streams at once, first chunk at {first} ms,"
            f" {chunks} chunks {gap} ms apart",
            "",
            f"The scenario-3 stream, {n} at once from one process per contender (same pools and"
            " fresh processes as scenario 2; one round after a warm-up of 3 streams). *Added* is"
            " against raw httpx at the same concurrency; CPU is the contender's process.",
            "",
            *_stream_table(n, data, labels),
            "",
        ]
        if data.get("skipped"):
            lines += [
                "Not measured: "
                + "; ".join(
                    f"{_label(labels, k)}: {v.splitlines()[0][:300]}"
                    for k, v in data["skipped"].items()
                ),
                "",
            ]
        lines += _errors([(n, data)], labels)
    return lines
