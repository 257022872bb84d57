"""The "Local model (llama.cpp)" section of docs/benchmarks.md, from bench/results/local.json.

report.py renders it where bench/commentary.md places it; run alone, this
regenerates the whole page from the stored results (the plots as drawn):

    .venv/bin/python bench/report_local.py
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

HEADING = "## Local model (llama.cpp)"
LABELS = {"qwen2.5-coder-0.5b": "Qwen2.5-Coder-0.5B Q4_K_M", "smollm2": "SmolLM2-135M Q4_1"}


def section(path: Path) -> list[str]:
    """Return the section's lines, or nothing when the benchmark was not run."""
    if not path.exists():
        return []
    results: dict[str, Any] = json.loads(path.read_text())
    machine = results["machine"]
    before, after = machine.get("speed_load") or [machine["load_before"], machine["load_after"]]
    lines = [
        HEADING,
        "",
        "`bench/local_model.py` against real llama.cpp servers started by `LocalModelServers`,"
        " through pilothouse's chat handler, on this "
        f"{machine['cores']}-core machine (no GPU), under `flock /tmp/ph-heavy.lock`. Other"
        " sessions' test runs shared the machine during the speed runs: load average"
        f" {_load(before)} before and {_load(after)} after (1, 5, 15 min), so 'idle' means"
        " no load added by the benchmark, not an idle machine. The figures compare settings"
        " under the same conditions; on a quiet machine every speed is higher.",
        "",
    ]
    speed = results.get("speed") or []
    if speed:
        lines += [
            "### Speed by thread count",
            "",
            "A ~300-token prompt and a 64-token answer, streamed; median of 3, each prompt"
            ' fresh (no prompt cache reuse). "One core busy": a spinning process beside the'
            " server, as another request, a test run or a build would be.",
            "",
            "| model | threads | machine | time to first token s | decode tokens/s |",
            "|---|---:|---|---:|---:|",
        ]
        for row in speed:
            lines.append(
                f"| {LABELS.get(row['model'], row['model'])} | {row['threads']} | {row['load']}"
                f" | {row['ttft_s']:.2f} | {row['decode_tokens_per_s']:.1f} |"
            )
        lines += ["", *_threads_verdict(speed), ""]
    quality = results.get("quality") or {}
    if quality:
        models = list(quality)
        head = " | ".join(LABELS.get(m, m) for m in models)
        lines += [
            "### Quality",
            "",
            "Temperature 0. Tool calls: 20 requests with three tools offered (`get_weather`,"
            " `get_time`, `convert_currency`); 12 need one (right tool and arguments"
            " counted), 8 need none (any text answer counted: its content is not judged)."
            " Extraction: 10 short texts naming 0 to 3 competitors of their own brand, the"
            " example catalog's question and the system prompt the run loop writes for an"
            " extraction action, the JSON schema as a grammar; names compared letters-only,"
            " one may extend the other ('Apple Note' for 'Apple Notes').",
            "",
            f"| | {head} |",
            "|---|" + "---:|" * len(models),
        ]
        table = {m: _quality_cells(quality[m]) for m in models}
        for i, (label, _) in enumerate(table[models[0]]):
            lines.append(f"| {label} | " + " | ".join(table[m][i][1] for m in models) + " |")
        lines += ["", *_quality_notes(quality), ""]
    return lines


def _load(values: list[float]) -> str:
    return ", ".join(f"{x:.1f}" for x in values)


def _quality_cells(q: dict[str, Any]) -> list[tuple[str, str]]:
    tools, extraction = q["tools"], q["extraction"]
    return [
        ("tool requests answered right", f"{tools['correct']} / {tools['total']}"),
        (
            "… needing a tool: right tool and arguments",
            f"{tools['calls_correct']} / {tools['calls_total']}",
        ),
        ("… needing none: answered in text", f"{tools['text_correct']} / {tools['text_total']}"),
        ("calls to the wrong tool, or to one not needed", str(tools["invalid_calls"])),
        ("extraction precision", f"{extraction['precision']:.2f}"),
        ("extraction recall", f"{extraction['recall']:.2f}"),
        ("extraction answers that are valid JSON", f"{extraction['valid_json']} / 10"),
    ]


def _threads_verdict(speed: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for model in dict.fromkeys(r["model"] for r in speed):
        rows = {(r["threads"], r["load"]): r for r in speed if r["model"] == model}
        parts: list[str] = []
        for load in ("one core busy", "idle"):
            one, two = rows.get((1, load)), rows.get((2, load))
            if one is None or two is None:
                continue
            parts.append(
                f"{load}: 2 threads decode {_compare(two, one, 'decode_tokens_per_s')}"
                f" ({two['decode_tokens_per_s']:.1f} vs {one['decode_tokens_per_s']:.1f}"
                f" tokens/s) and reach the first token in {two['ttft_s']:.1f} s vs"
                f" {one['ttft_s']:.1f} s"
            )
        if parts:
            out.append(f"- {LABELS.get(model, model)}, " + "; ".join(parts) + ".")
    out.append(
        "- Hence the rule `LocalModelServers` applies when `n_threads` is not set: one thread"
        " per core idle at start, keeping one core for everything else; 1 on this machine,"
        " where the default model decodes several times slower on 2 threads as soon as"
        " anything else runs. Set `n_threads: 2` for a machine kept idle for the model."
    )
    return out


def _compare(a: dict[str, Any], b: dict[str, Any], key: str) -> str:
    if not a[key] or not b[key]:
        return "at an unknown rate"
    ratio = a[key] / b[key]
    return f"{ratio:.1f}× faster than 1" if ratio >= 1 else f"{1 / ratio:.1f}× slower than 1"


def _quality_notes(quality: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    for model, q in quality.items():
        wrong = [c for c in q["tools"]["cases"] if not c["correct"]]
        if wrong:
            shown = "; ".join(
                f"`{c['request']}` → {c['called'] or 'text'}"
                + (f" `{json.dumps(c['arguments'])}`" if c["called"] else "")
                for c in wrong[:6]
            )
            notes.append(
                f"- {LABELS.get(model, model)} got wrong: {shown}"
                + (" …" if len(wrong) > 6 else "")
            )
    return notes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    here = Path(__file__).parent
    parser.add_argument("--results", type=Path, default=here / "results")
    parser.add_argument("--docs", type=Path, default=here.parent / "docs")
    args = parser.parse_args()
    # The whole page, from every stored result: the section is placed by
    # bench/commentary.md like any other.
    import report

    page = report.write(args.results, here / "commentary.md", args.docs, draw=False)
    print(f"wrote {page}")


if __name__ == "__main__":
    main()
