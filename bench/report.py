"""Write docs/benchmarks.md and the plots from bench/results and bench/commentary.md.

Usage: ``python bench/report.py`` (``--no-plots`` keeps the plots already
drawn, no matplotlib needed). Numbers are copied from the stored results,
never edited; the verdicts on the performance budget are computed from
them. The page is the run's machine, method and verdicts, then
``bench/commentary.md`` with each of its placement lines replaced by a
section: a file ``bench/results/NAME.md`` a bench script wrote, or one this
module renders from ``results.json`` (:meth:`Page.built_in`). How to add a
section is written at the top of ``bench/commentary.md``;
``tests/bench/test_report_page.py`` checks that the committed page is
exactly what this writes.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import report_concurrency as RC
import report_disclosure
import report_local
import report_served

FLOOR = "httpx"
BASE = "pydantic-ai-model_request"
LABELS = {
    "httpx": "raw httpx (floor)",
    "openai": "openai SDK",
    "litellm": "LiteLLM acompletion",
    "pydantic-ai-model_request": "pydantic-ai model_request",
    "pydantic-ai-Agent.run": "pydantic-ai Agent.run",
    "langchain": "LangChain ChatOpenAI.ainvoke",
    "pilothouse-sqlite": "pilothouse, audit on SQLite",
    "pilothouse-noaudit": "pilothouse, audit off",
    "pilothouse-postgres": "pilothouse, audit on PostgreSQL",
}
TITLES = {
    "plain-d0": "Scenario 1a: plain answer, mock delay 0 ms, concurrency 1",
    "plain-d50": "Scenario 1b: plain answer, mock delay 50 ms, concurrency 1",
    "tool-d0": "Scenario 1c: one tool round trip (20 tool schemas), mock delay 0 ms, concurrency 1",
    "stream": "Scenario 3: streaming, first chunk at 200 ms, 64 chunks 20 ms apart, concurrency 1",
}


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.2f}×"


def _table(scenario: str, data: dict[str, Any]) -> list[str]:
    rows = data["contenders"]
    floor = rows.get(FLOOR, {})
    base = rows.get(BASE, {})
    if scenario == "stream":
        lines = [
            "| contender | TTFT p50 ms | added TTFT vs floor ms | TTFT p99 ms |"
            " inter-chunk gap p99 ms | chunks received / expected | CPU ms per call |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name, r in rows.items():
            added = (
                r["ttft_p50_ms"] - floor["ttft_p50_ms"]
                if r.get("ttft_p50_ms") is not None and floor.get("ttft_p50_ms") is not None
                else None
            )
            lines.append(
                f"| {LABELS.get(name, name)} | {_f(r.get('ttft_p50_ms'))} | {_f(added)} |"
                f" {_f(r.get('ttft_p99_ms'))} | {_f(r.get('gap_p99_ms'))} |"
                f" {r.get('chunks_received')} / {r.get('chunks_expected')} |"
                f" {_f(r.get('cpu_ms_per_call'))} |"
            )
        return lines
    lines = [
        "| contender | calls | errors | p50 ms | p99 ms | p50 − floor ms | p99 − floor ms |"
        " CPU ms per call (= CPU s per 1,000) | CPU ÷ floor | CPU ÷ model_request |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, r in rows.items():
        lines.append(
            f"| {LABELS.get(name, name)} | {r['calls']} | {r['errors']} | {_f(r['p50_ms'])} |"
            f" {_f(r['p99_ms'])} | {_f(r['p50_ms'] - floor['p50_ms']) if floor else 'n/a'} |"
            f" {_f(r['p99_ms'] - floor['p99_ms']) if floor else 'n/a'} |"
            f" {_f(r['cpu_ms_per_call'])} |"
            f" {_ratio(r['cpu_ms_per_call'], floor.get('cpu_ms_per_call'))} |"
            f" {_ratio(r['cpu_ms_per_call'], base.get('cpu_ms_per_call'))} |"
        )
    return lines


def _spread(data: dict[str, Any]) -> list[str]:
    lines = ["Per-round medians (p50 ms of each interleaved round), to show run-to-run spread:", ""]
    for name, r in data["contenders"].items():
        rounds = ", ".join(f"{x:.2f}" for x in r.get("round_p50_ms", []))
        cpu = ", ".join(f"{x:.2f}" for x in r.get("round_cpu_ms", []))
        lines.append(f"- {LABELS.get(name, name)}: p50 {rounds}; CPU ms/call {cpu}")
    return lines


def _verdicts(results: dict[str, Any]) -> list[str]:
    out: list[str] = []
    s1 = results["scenarios"].get("plain-d0", {}).get("contenders", {})
    ph, base, floor = s1.get("pilothouse-sqlite"), s1.get(BASE), s1.get(FLOOR)
    if ph and base and floor:
        limit = 1.25 * base["cpu_ms_per_call"]
        met = ph["cpu_ms_per_call"] <= limit
        out.append(
            f"- **Scenario 1, CPU per governed turn (audit on SQLite) ≤ 1.25 × model_request:"
            f" {'MET' if met else 'MISSED'}.** pilothouse {ph['cpu_ms_per_call']:.2f} ms vs limit"
            f" {limit:.2f} ms (model_request {base['cpu_ms_per_call']:.2f} ms): "
            f"{ph['cpu_ms_per_call'] / base['cpu_ms_per_call']:.2f}× model_request, "
            f"{ph['cpu_ms_per_call'] / limit:.1f}× over the budget"
            if not met
            else f"- **Scenario 1 CPU target MET**: {ph['cpu_ms_per_call']:.2f} ms"
            f" ≤ {limit:.2f} ms."
        )
        added = ph["p50_ms"] - floor["p50_ms"]
        for peer in ("langchain", "litellm", "pydantic-ai-Agent.run"):
            if peer in s1:
                peer_added = s1[peer]["p50_ms"] - floor["p50_ms"]
                out.append(
                    f"- Scenario 1, added p50 below {LABELS[peer]}: "
                    f"{'MET' if added < peer_added else 'MISSED'} "
                    f"(pilothouse +{added:.2f} ms vs +{peer_added:.2f} ms)."
                )
    s3 = results["scenarios"].get("stream", {}).get("contenders", {})
    if s3.get("pilothouse-sqlite") and s3.get(FLOOR) and s3.get(BASE):
        f0 = s3[FLOOR]["ttft_p50_ms"]
        ph_add = s3["pilothouse-sqlite"]["ttft_p50_ms"] - f0
        pai_add = s3[BASE]["ttft_p50_ms"] - f0
        lc_add = s3["langchain"]["ttft_p50_ms"] - f0 if "langchain" in s3 else None
        ok = ph_add <= pai_add + 1 and (lc_add is None or ph_add < lc_add)
        lost = {
            n: r["chunks_expected"] - r["chunks_received"]
            for n, r in s3.items()
            if r["chunks_expected"] != r["chunks_received"]
        }
        out.append(
            f"- **Scenario 3, added TTFT ≤ pydantic-ai stream + 1 ms and below LangChain: "
            f"{'MET' if ok else 'MISSED'}.** pilothouse +{ph_add:.2f} ms,"
            f" pydantic-ai +{pai_add:.2f} ms"
            + (f", LangChain +{lc_add:.2f} ms" if lc_add is not None else "")
            + f". Chunks lost or batched: {lost or 'none, for every contender'}."
        )
    cold = {n: r["cold"]["cold_ms"] for n, r in s1.items()} if s1 else {}
    whole = results.get("coldstart", {}).get("commands", {})
    if "pilothouse-sqlite" in whole and BASE in whole:
        ph, peer = whole["pilothouse-sqlite"], whole[BASE]
        ok = ph["cpu_ms"] <= peer["cpu_ms"]
        first = ph["worker_cold_cpu_ms"] <= peer["worker_cold_cpu_ms"]
        out.append(
            f"- **Cold start no slower than pydantic-ai: {'MET' if ok else 'MISSED'} for the whole"
            f" process, {'MET' if first else 'MISSED'} to the first answer** (CPU: pilothouse"
            f" {ph['cpu_ms']:.0f} ms vs model_request {peer['cpu_ms']:.0f} ms for the whole"
            f" process, {ph['worker_cold_cpu_ms']:.0f} vs {peer['worker_cold_cpu_ms']:.0f} ms to"
            f" the first answer, medians of {ph['runs']} interleaved runs;"
            " see the whole-process cold-start table)."
        )
    elif "pilothouse-sqlite" in cold and BASE in cold:
        ok = cold["pilothouse-sqlite"] <= cold[BASE]
        out.append(
            f"- **Cold start no slower than pydantic-ai: {'MET' if ok else 'MISSED'}** "
            f"(pilothouse {cold['pilothouse-sqlite']:.0f} ms vs model_request {cold[BASE]:.0f} ms,"
            " one sample each; see the cold-start table)."
        )
    out += RC.verdicts(results, LABELS)  # scenario 2; scenario 3 at concurrency
    out.append(
        report_disclosure.verdict(results)
        or "- Scenario 4 (progressive disclosure): **not measured**."
    )
    return out


def _word(met: bool) -> str:
    return "MET" if met else "MISSED"


def _tighter_targets(results: dict[str, Any]) -> list[str]:
    """The four tighter targets, each computed from this run (one line each)."""
    out: list[str] = []
    s1 = results["scenarios"].get("plain-d0", {}).get("contenders", {})
    ph, base = s1.get("pilothouse-sqlite"), s1.get(BASE)
    if ph and base:
        ratio = ph["cpu_ms_per_call"] / base["cpu_ms_per_call"]
        # Round by round (the rounds interleave the contenders), so that a
        # round the machine ran slow weighs on both sides of its ratio.
        rounds = sorted(
            a / b for a, b in zip(ph["round_cpu_ms"], base["round_cpu_ms"], strict=True)
        )
        paired = statistics.median(rounds)
        out.append(
            f"- **Governed turn (audit on SQLite) at ≤ 1.0 × a bare model_request's CPU:"
            f" {_word(paired <= 1.0)}.** {paired:.2f}×, the median of {len(rounds)} rounds'"
            f" ratios ({rounds[0]:.2f}–{rounds[-1]:.2f}); over all calls"
            f" {ph['cpu_ms_per_call']:.2f} ms vs {base['cpu_ms_per_call']:.2f} ms: {ratio:.2f}×."
        )
    s3 = results["scenarios"].get("stream", {}).get("contenders", {})
    if s3.get("pilothouse-sqlite") and s3.get(FLOOR) and s3.get("langchain"):
        f0 = s3[FLOOR]["ttft_p50_ms"]
        ph_add = s3["pilothouse-sqlite"]["ttft_p50_ms"] - f0
        lc_add = s3["langchain"]["ttft_p50_ms"] - f0
        out.append(
            f"- **Time to first token at concurrency 1 below LangChain's:"
            f" {_word(ph_add < lc_add)}.** Added over raw httpx (p50): pilothouse"
            f" +{ph_add:.2f} ms, LangChain +{lc_add:.2f} ms."
        )
    many = results["scenarios"].get("stream-200", {}).get("contenders", {})
    ph, base = many.get("pilothouse-sqlite"), many.get(BASE)
    if ph and base and ph.get("ttft_launch_p50_ms") is not None:
        p50 = ph["ttft_launch_p50_ms"] < base["ttft_launch_p50_ms"]
        p99 = ph["ttft_launch_p99_ms"] < base["ttft_launch_p99_ms"]
        collections = ""
        if "gc_full_ms" in ph and "gc_full_ms" in base:
            collections = (
                f" Full collections inside the rounds: pilothouse {len(ph['gc_full_ms'])}"
                f" ({', '.join(f'{ms:.0f}' for ms in ph['gc_full_ms'])} ms, heap"
                f" {ph['gc_tracked']:,.0f} tracked objects), model_request"
                f" {len(base['gc_full_ms'])} ({', '.join(f'{ms:.0f}' for ms in base['gc_full_ms'])}"
                f" ms, {base['gc_tracked']:,.0f})."
            )
        out.append(
            f"- **Time to first token at 200 streams below pydantic-ai's (from the launch):"
            f" p50 {_word(p50)}, p99 {_word(p99)}.** pilothouse"
            f" {ph['ttft_launch_p50_ms']:,.0f} / {ph['ttft_launch_p99_ms']:,.0f} ms,"
            f" model_request {base['ttft_launch_p50_ms']:,.0f} /"
            f" {base['ttft_launch_p99_ms']:,.0f} ms (p50 / p99, {ph['streams']} streams in"
            f" {ph['rounds']} rounds).{collections}"
        )
    whole = results.get("coldstart", {}).get("commands", {})
    ph, base = whole.get("pilothouse-sqlite"), whole.get(BASE)
    if ph and base:
        ratio = results["coldstart"]["ratios"].get(f"pilothouse-sqlite / {BASE}", {})
        out.append(
            "- **Cold start no slower than pydantic-ai's: whole process"
            f" {_word(ph['cpu_ms'] <= base['cpu_ms'])}, to the first answer"
            f" {_word(ph['worker_cold_cpu_ms'] <= base['worker_cold_cpu_ms'])}.**"
            f" Whole process, CPU: pilothouse {ph['cpu_ms']:,.0f} ms, model_request"
            f" {base['cpu_ms']:,.0f} ms"
            + (f" ({ratio['cpu']:.2f}× pair by pair)" if ratio else "")
            + f"; to the first answer by the worker's clock {ph['worker_cold_ms']:,.0f} vs"
            f" {base['worker_cold_ms']:,.0f} ms, CPU {ph['worker_cold_cpu_ms']:,.0f} vs"
            f" {base['worker_cold_cpu_ms']:,.0f} ms ({ph['runs']} interleaved runs, medians)."
        )
    return out or ["- Not measured in this run."]


def _drawn(docs: Path, *names: str) -> list[str]:
    """The plots of ``names`` already in ``docs/benchmarks`` (a page made without drawing)."""
    return [name for name in names if (docs / "benchmarks" / name).exists()]


def _plots(results: dict[str, Any], raw: dict[str, Any], docs: Path, *, draw: bool) -> list[str]:
    if not draw:
        return _drawn(
            docs,
            *(f"latency-{s}.png" for s in ("plain-d0", "plain-d50", "tool-d0", "stream")),
            "cpu-plain-d0.png",
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = docs / "benchmarks"
    out_dir.mkdir(parents=True, exist_ok=True)
    made: list[str] = []
    for scenario in ("plain-d0", "plain-d50", "tool-d0", "stream"):
        data = results["scenarios"].get(scenario)
        if not data:
            continue
        names = list(data["contenders"])
        # Stream latencies are stored as "stream/<name>/ttft", the others as "<scenario>/<name>".
        suffix = "/ttft" if scenario == "stream" else ""
        series = [raw.get(f"{scenario}/{n}{suffix}", []) for n in names]
        name = f"latency-{scenario}.png"
        if not any(series):
            # bench/results/raw/ is not committed, so a document regenerated
            # in a clone (after re-running one part, e.g. coldstart.py) keeps
            # the plot that the run behind results.json drew.
            if (out_dir / name).exists():
                made.append(name)
            continue
        fig, ax = plt.subplots(figsize=(10, 5.5))
        ax.boxplot(series, orientation="horizontal", whis=(1, 99), showfliers=False)
        ax.set_yticks(range(1, len(names) + 1), [LABELS.get(n, n) for n in names])
        ax.invert_yaxis()
        label = (
            "time to first content chunk (ms)" if scenario == "stream" else "latency per turn (ms)"
        )
        ax.set_xlabel(label + "; box: p25–p75, line: p50, whiskers: p1–p99")
        ax.set_title(TITLES[scenario], fontsize=10)
        if scenario == "plain-d0":
            ax.set_xscale("log")
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=110)
        plt.close(fig)
        made.append(name)
    s1 = results["scenarios"].get("plain-d0", {}).get("contenders", {})
    if s1:
        names = list(s1)
        fig, ax = plt.subplots(figsize=(10, 5))
        values = [s1[n]["cpu_ms_per_call"] for n in names]
        colors = ["tab:orange" if n.startswith("pilothouse") else "tab:blue" for n in names]
        ax.barh([LABELS.get(n, n) for n in names], values, color=colors)
        if BASE in s1:
            ax.axvline(
                1.25 * s1[BASE]["cpu_ms_per_call"],
                color="red",
                linestyle="--",
                label="budget: 1.25 × model_request",
            )
            ax.legend(loc="upper right")
        ax.invert_yaxis()
        ax.set_xlabel("CPU ms per call (process_time of the contender's process), mock delay 0")
        ax.set_title("Scenario 1a: CPU per turn", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
        fig.tight_layout()
        fig.savefig(out_dir / "cpu-plain-d0.png", dpi=110)
        plt.close(fig)
        made.append("cpu-plain-d0.png")
    return made


def _profile_section(results: dict[str, Any]) -> list[str]:
    profile = results.get("profile")
    if not profile:
        return ["No profile in this run."]
    text = profile["tottime"]
    keep = [line for line in text.splitlines() if line.strip()][:40]
    return [
        f"cProfile of {profile['calls']} governed turns"
        " (pilothouse, audit on SQLite, mock delay 0),"
        " top functions by own time (cProfile inflates Python-call-heavy code, so read it for"
        " the ranking, not for absolute figures):",
        "",
        "```",
        *keep,
        "```",
        "",
        "Top by cumulative time:",
        "",
        "```",
        *[line for line in profile["cumulative"].splitlines() if line.strip()][:50],
        "```",
    ]


PLACE = re.compile(r"^<!-- results: (?P<name>[A-Za-z0-9_.-]+) -->$")
"""A line of ``bench/commentary.md`` that places one results section there."""
COMMENT = re.compile(r"<!--.*?-->\n?", re.DOTALL)
"""Notes for the authors of ``bench/commentary.md``: not on the page."""


class PageError(Exception):
    """The results and the commentary do not make one page; the message says what to do."""


class Page:
    """The inputs of ``docs/benchmarks.md``: the results folder, the commentary, the plots.

    Args:
        results: ``bench/results`` (``results.json`` and the sections' files).
        commentary: ``bench/commentary.md``.
        docs: the folder of ``benchmarks.md``; its ``benchmarks/`` holds the plots.
        draw: draw the plots (needs matplotlib); otherwise the page names the
            plots already drawn there.
    """

    def __init__(self, results: Path, commentary: Path, docs: Path, *, draw: bool) -> None:
        self.results_dir = results
        self.commentary = commentary
        self.docs = docs
        self.draw = draw
        self.results: dict[str, Any] = json.loads((results / "results.json").read_text())
        coldstart = results / "coldstart.json"
        if coldstart.exists():
            self.results["coldstart"] = json.loads(coldstart.read_text())
        self.plots: list[str] = []

    def built_in(self) -> dict[str, Callable[[], list[str]]]:
        """The sections this module renders from ``results.json``, by the name that places them."""
        results = self.results
        return {
            "scenarios": self._scenarios,
            "concurrency": lambda: RC.section(results, self.docs, LABELS, draw=self.draw),
            "disclosure": lambda: report_disclosure.section(results),
            "served": lambda: report_served.section(results),
            "cold-start-first-call": self._first_call,
            "cpu-plot": lambda: (
                ["![cpu](benchmarks/cpu-plain-d0.png)", ""]
                if "cpu-plain-d0.png" in self.plots
                else []
            ),
            "profile": lambda: [
                "## Where pilothouse's time goes",
                "",
                *_profile_section(results),
                "",
            ],
            "local.json": lambda: report_local.section(self.results_dir / "local.json"),
        }

    def section(self, name: str) -> list[str]:
        """The lines of the section ``name``: built in, or the file ``bench/results/<name>``."""
        built = self.built_in()
        if name in built:
            return built[name]()
        path = self.results_dir / name
        if name.endswith(".md") and path.exists():
            return [path.read_text().strip(), ""]
        raise PageError(
            f"{self.commentary}: '<!-- results: {name} -->' names no section: write"
            f" {path} (a results section rendered by its bench script) or name one of"
            f" {', '.join(sorted(built))}"
        )

    def body(self) -> list[str]:
        """The commentary with each ``<!-- results: NAME -->`` line replaced by its section."""
        text = self.commentary.read_text()
        lines: list[str] = []
        placed: list[str] = []
        prose: list[str] = []

        def flush() -> None:
            chunk = COMMENT.sub("", "\n".join(prose)).strip()
            if chunk:
                lines.extend([chunk, ""])
            prose.clear()

        for line in text.splitlines():
            found = PLACE.match(line.strip())
            if found is None:
                prose.append(line)
                continue
            flush()
            name = found["name"]
            if name in placed:
                raise PageError(f"{self.commentary}: '{name}' is placed twice; keep one")
            placed.append(name)
            lines += self.section(name)
        flush()
        missing = sorted({p.name for p in self.results_dir.glob("*.md")} | set(self.built_in()))
        missing = [name for name in missing if name not in placed]
        if missing:
            raise PageError(
                f"{self.commentary} does not place {', '.join(missing)}: add a line"
                f" '<!-- results: {missing[0]} -->' where the section belongs, with the"
                " commentary that goes with it"
            )
        return lines

    def render(self) -> str:
        """The whole page (plots drawn first when ``draw``)."""
        results = self.results
        raw_path = self.results_dir / "raw" / "latencies.json"
        raw = json.loads(raw_path.read_text()) if raw_path.exists() else {}
        self.plots = _plots(results, raw, self.docs, draw=self.draw)
        lines = _head(results)
        lines += self.body()
        return "\n".join(lines) + "\n"

    def _scenarios(self) -> list[str]:
        lines: list[str] = []
        for scenario, data in self.results["scenarios"].items():
            if RC.handles(scenario):  # rendered by report_concurrency
                continue
            lines += [f"## {TITLES.get(scenario, scenario)}", ""]
            lines += _table(scenario, data)
            if data.get("skipped"):
                lines += [
                    "",
                    "Not measured: "
                    + "; ".join(f"{k}: {v.splitlines()[0]}" for k, v in data["skipped"].items()),
                ]
            mock = data.get("mock", {})
            lines += [
                "",
                f"Mock: {mock.get('requests')} requests during the timed rounds,"
                f" {_f(mock.get('cpu_us_per_request'), 0)} µs mock CPU per request.",
                "",
            ]
            if scenario != "stream":
                lines += _spread(data) + [""]
            if f"latency-{scenario}.png" in self.plots:
                lines += [f"![{scenario}](benchmarks/latency-{scenario}.png)", ""]
        return lines

    def _first_call(self) -> list[str]:
        s1 = self.results["scenarios"].get("plain-d0", {}).get("contenders", {})
        if not s1:
            return []
        lines = [
            "## Cold start (import + setup + first call, mock delay 0)",
            "",
            "| contender | import + setup ms | import + setup + first call ms | CPU ms |",
            "|---|---:|---:|---:|",
        ]
        for name, r in s1.items():
            c = r["cold"]
            lines.append(
                f"| {LABELS.get(name, name)} | {c['import_setup_ms']:.0f} | {c['cold_ms']:.0f} |"
                f" {c['cold_cpu_ms']:.0f} |"
            )
        lines.append("")
        return lines


def _head(results: dict[str, Any]) -> list[str]:
    """Machine, method, the mock's capacity and the verdicts: what every run has."""
    m = results["machine"]
    pinning = (
        "mock + load generator on core 0, contender on core 1 (taskset)"
        if m["pinned"]
        else "none (one core)"
    )
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`bench/run.sh` → `bench/harness.py`, then `bench/report.py`)"
        f" on {results['started']}. Do not edit by hand: the commentary comes from"
        " `bench/commentary.md`, the numbers from `bench/results/` (each section's own"
        " file; `bench/commentary.md` says how to add one).",
        "",
        "## Machine and versions",
        "",
        f"- CPU: {m['cpu']}, {m['cores']} cores; Python {m['python']}; {m['platform']}",
        f"- Pinning: {pinning}",
        "- Versions (bench/.venv): "
        + ", ".join(f"{k} {v}" for k, v in results["versions"].items()),
        "- Versions (bench/.venv-litellm, LiteLLM needs openai<3): "
        + ", ".join(f"{k} {v}" for k, v in results.get("versions_litellm_env", {}).items()),
        "",
        "## Method",
        "",
        "- Upstream: `bench/mock_upstream.py`, a raw-asyncio OpenAI-compatible mock on loopback;"
        " the model name picks the behaviour (delay, tool call, stream timing).",
        "- Every contender runs in its own process (`bench/worker.py`), so imports, CPU"
        " (`time.process_time()`, all threads) and memory are its own. Each makes the same call:"
        " system prompt + one user message, `max_tokens` 256, retries off.",
        "- Rounds interleave the contenders (A B C … A B C …):"
        f" {results['settings']['rounds']} rounds"
        f" after a warm-up of {results['settings']['warmup']} calls each; calls per round:"
        f" {results['settings']['calls']} (delay 0),"
        f" {results['settings']['slow_calls']} (delay 50),"
        f" {results['settings']['tool_calls']} (tool),"
        f" {results['settings']['stream_calls']} (stream).",
        "- pilothouse makes a *governed turn* of a new conversation per call:"
        " `start_and_send` (`start_and_stream` for streams), which writes what"
        " `start_conversation` + `send_message` write with one transaction fewer"
        " (conversation row, user message, prompt assembly, model call through pydantic-ai,"
        " assistant message, usage/cost, status, audit timeline). Audit off is"
        ' `runtime_config={"audit": false}`. The catalog (`contenders.catalog_yaml`) is imported'
        " before timing starts. PostgreSQL is the local server, a fresh database per run.",
        "- Tool scenario: 20 tool schemas sent; the mock calls `tool_00`; the contender runs it and"
        " sends the result back (two model requests). pydantic-ai `Agent.run` runs its own loop;"
        " pilothouse runs its governed loop with 20 catalog tools of kind `python`.",
        "- Cold start: wall time from the top of the worker (before any library import) to the end"
        " of the first call: import + client setup + first call; one sample per contender per"
        " scenario, interpreter start-up excluded.",
        "- Cold start, whole process (`bench/coldstart.py`): pilothouse's first turn and"
        " model_request's first call, each in a new process from interpreter start to exit, timed"
        " from outside (the child's user + system CPU, wall); several runs interleaved, medians.",
        "",
        "## Mock capacity (validity check)",
        "",
    ]
    cap = results["mock_capacity"]
    loads = {
        s: max((r.get("requests_per_s") or 0) for r in d["contenders"].values())
        for s, d in results["scenarios"].items()
        if d["contenders"] and s != "stream" and not RC.handles(s)
    }
    peak = max(loads.values()) if loads else 0
    lines += [
        f"- Saturated from the other core: **{cap['requests_per_s']:.0f} requests/s** achieved"
        f" ({cap['note']}); the mock spends {cap['cpu_us_per_request']:.0f} µs CPU per request,"
        f" i.e. a CPU-bound ceiling of {cap['cpu_bound_capacity_per_s']:.0f} requests/s.",
        f"- Highest load any contender put on it in scenario 1: {peak:.0f} requests/s"
        " (the floor, at concurrency 1). Capacity ÷ load ="
        f" **{cap['requests_per_s'] / peak:.1f}×**"
        + (
            " (≥ 5×: the figures stand)."
            if peak and cap["requests_per_s"] / peak >= 5
            else " (< 5×: VOID)."
        ),
        "",
        "## Verdict against the targets ([architecture.md](architecture.md#performance-budget)"
        " “Performance budget”)",
        "",
        *_verdicts(results),
        "",
        "## Verdict against the tighter targets (a governed turn at a bare call's CPU,"
        " first tokens, cold start)",
        "",
        *_tighter_targets(results),
        "",
    ]
    return lines


def write(results: Path, commentary: Path, docs: Path, *, draw: bool) -> Path:
    """Write ``docs/benchmarks.md`` (and, when ``draw``, its plots); the page's path."""
    page = docs / "benchmarks.md"
    page.write_text(Page(results, commentary, docs, draw=draw).render())
    return page


def main() -> None:
    """Read results, write the document and the plots."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--docs", type=Path, default=Path(__file__).parent.parent / "docs")
    parser.add_argument("--commentary", type=Path, default=Path(__file__).parent / "commentary.md")
    parser.add_argument(
        "--no-plots",
        action="store_true",
        help="keep the plots already in docs/benchmarks/ (no matplotlib needed)",
    )
    args = parser.parse_args()
    try:
        page = write(args.results, args.commentary, args.docs, draw=not args.no_plots)
    except PageError as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
