"""The scenario-4 (progressive disclosure) section of docs/benchmarks.md.

``section(results)`` renders ``results["disclosure"]`` as written by
``bench/disclosure.py`` (through ``bench/harness.py --scenarios disclosure``).
"""

from __future__ import annotations

from typing import Any

TITLE = "Scenario 4: progressive disclosure, first-turn prompt tokens (10 skills, 50 tools)"

_ROWS = {
    "disclosure": "skills through `use_skill` (pilothouse's disclosure)",
    "all_tools": "all 50 tools attached directly (no skills)",
    "skills_and_tools": "skills listed and all 50 tools attached",
    "after_use_skill": "disclosure, after `use_skill` activated one skill (2nd request)",
}


def verdict(results: dict[str, Any]) -> str | None:
    """One verdict line for the summary, or None when scenario 4 did not run."""
    data = results.get("disclosure")
    if not data:
        return None
    v = data["variants"]
    return (
        f"- **Scenario 4, ≥ {data['target']:.0%} fewer first-turn prompt tokens with"
        f" disclosure: {'MET' if data['verdict'] == 'PASS' else 'MISSED'}.**"
        f" {v['disclosure']['prompt_tokens']['total']} tokens with disclosure vs"
        f" {v['all_tools']['prompt_tokens']['total']} with all tools loaded:"
        f" {data['reduction']:.1%} fewer."
    )


def section(results: dict[str, Any]) -> list[str]:
    """The scenario-4 section as markdown lines (empty when it did not run)."""
    data = results.get("disclosure")
    if not data:
        return []
    lines = [
        f"## {TITLE}",
        "",
        f"An ERP agent (application + agent prompt) whose goal action has {data['skills']} skills"
        f" owning {data['tools']} REST tools with full JSON schemas (`bench/disclosure.py`), one"
        " first turn each through pilothouse against the mock, which keeps the request body."
        f" User message: *{data['user_message']}*",
        "",
        "pilothouse has no switch that turns disclosure off, so *all tools loaded* is the same"
        " agent whose action has the 50 tools attached directly instead of through skills."
        f" Tokens: `{data['encoding']}`; messages as OpenAI's chat format bills them (3 per"
        " message + role + content, + 3 reply priming), tools as the compact JSON of the request's"
        " `tools` array (OpenAI renders tools in its own format, so that part is approximate; every"
        " row is counted the same way). *Recorded* is the usage pilothouse stored for the turn"
        " (the mock answers the counted figure as `usage.prompt_tokens`; for the last row it is the"
        " sum of both requests).",
        "",
        "| variant | tools offered (with built-ins) | system prompt chars | request bytes |"
        " message tokens | tool tokens | prompt tokens | recorded by pilothouse |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, label in _ROWS.items():
        r = data["variants"].get(key)
        if not r:
            continue
        t = r["prompt_tokens"]
        lines.append(
            f"| {label} | {r['tools_offered']} | {r['system_chars']} | {r['request_bytes']} |"
            f" {t['messages']} | {t['tools']} | **{t['total']}** | {r['recorded_input_tokens']} |"
        )
    lines += [
        "",
        f"Reduction with disclosure: **{data['reduction']:.1%}** against all tools attached"
        f" ({data['reduction_vs_skills_and_tools']:.1%} against skills + all tools)."
        f" Target ≥ {data['target']:.0%}: **{data['verdict']}**.",
        "",
    ]
    return lines
