"""The benchmark harness runs on a tiny load and writes well-formed results.

No timing assertions: this only guards that ``make bench`` still works. It
uses the project's own environment (raw httpx and pilothouse with audit on
SQLite), not bench/.venv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bench(script: str, *arguments: str, timeout: float = 300) -> None:
    """Run ``bench/<script>`` with ``arguments`` in this environment; fail with its errors."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _harness(out: Path, contenders: str, scenarios: str, *, timeout: float) -> dict[str, Any]:
    """Run ``harness.py --smoke`` for ``contenders`` on ``scenarios``; return its results."""
    _bench(
        "harness.py",
        "--smoke",
        "--contenders",
        contenders,
        "--scenarios",
        scenarios,
        "--out",
        str(out),
        timeout=timeout,
    )
    return json.loads((out / "results.json").read_text())


def test_bench_children_start_without_the_shells_pilothouse_settings() -> None:
    # A PILOTHOUSE_* variable left in the shell (FREEZE_HEAP, FAST_EXIT, ...)
    # would change what a contender measures without the results saying so.
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); from childenv import child_env;"
        " print(json.dumps(child_env(BENCH_MOCK_API_KEY='x')))"
    )
    shell = {
        **os.environ,
        "PILOTHOUSE_FAST_EXIT": "false",
        "PILOTHOUSE_FREEZE_HEAP": "true",
        "BENCH_KEPT": "yes",
    }
    done = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "bench")],
        env=shell,
        capture_output=True,
        text=True,
        check=True,
    )
    child: dict[str, str] = json.loads(done.stdout)
    assert [name for name in child if name.startswith("PILOTHOUSE_")] == []
    assert child["BENCH_KEPT"] == "yes"
    assert child["BENCH_MOCK_API_KEY"] == "x"


def test_bench_harness_runs_on_a_tiny_load(tmp_path: Path) -> None:
    results = _harness(tmp_path, "httpx,pilothouse-sqlite", "plain-d0,tool-d0", timeout=120)
    assert set(results["scenarios"]) == {"plain-d0", "tool-d0"}
    for name, scenario in results["scenarios"].items():
        assert scenario["skipped"] == {}, name
        assert set(scenario["contenders"]) == {"httpx", "pilothouse-sqlite"}
        for contender in scenario["contenders"].values():
            assert contender["calls"] == 6
            assert contender["errors"] == 0, contender["error_samples"]
            assert contender["p50_ms"] > 0
            assert contender["cpu_ms_per_call"] > 0
            assert contender["cold"]["first_error"] is None
        # every timed call reached the mock: one request per plain turn, two per tool turn
        per_call = 2 if name == "tool-d0" else 1
        assert scenario["mock"]["requests"] == 2 * 6 * per_call
    assert results["mock_capacity"]["requests_per_s"] > 0
    raw = json.loads((tmp_path / "raw" / "latencies.json").read_text())
    assert len(raw["plain-d0/pilothouse-sqlite"]) == 6


def test_bench_cold_start_times_whole_processes(tmp_path: Path) -> None:
    _bench("coldstart.py", "--runs", "1", "--warmup", "0", "--out", str(tmp_path))
    result = json.loads((tmp_path / "coldstart.json").read_text())
    assert set(result["commands"]) == {
        "pydantic-ai-model_request",
        "pilothouse-sqlite",
        "pilothouse --help",
        "pilothouse conversations list",
    }
    for name, command in result["commands"].items():
        assert command["runs"] == 1, name
        assert command["cpu_ms"] > 0, name
    # Each worker answered its first call (a failed one stops the script).
    pilothouse = result["samples"]["pilothouse-sqlite"][0]["ready"]
    assert pilothouse["first_error"] is None
    assert pilothouse["cold_ms"] > 0
    assert set(result["ratios"]) == {"pilothouse-sqlite / pydantic-ai-model_request"}
    section = (tmp_path / "coldstart.md").read_text()
    assert "| pilothouse-sqlite | 1 |" in section


def test_bench_cold_start_phases_split_the_first_answer(tmp_path: Path) -> None:
    _bench("coldstart_phases.py", "--runs", "1", "--warmup", "0", "--out", str(tmp_path))
    result = json.loads((tmp_path / "coldstart-phases.json").read_text())
    pilothouse = result["phases"]["pilothouse-sqlite"]
    peer = result["phases"]["pydantic-ai-model_request"]
    # Both reached their first answer (a failed call stops the script), and
    # each row is a share of the total, in the order the child went.
    assert pilothouse[-1]["phase"].startswith("first answer")
    assert peer[-1]["phase"] == "first answer"
    for rows in (pilothouse, peer):
        assert rows[-1]["total_ms"] == pytest.approx(sum(row["ms"] for row in rows))
        assert [row["total_ms"] for row in rows] == sorted(row["total_ms"] for row in rows)
    assert {row["phase"] for row in pilothouse} >= {
        "SQLAlchemy Core",
        "catalog and store: Core tables, store modules",
    }
    # the first answer keeps SQLAlchemy's ORM off.
    assert result["orm_imported"] == {
        "pilothouse-sqlite": False,
        "pydantic-ai-model_request": False,
    }
    # ... and the openai SDK, which only the peer's model needs.
    assert result["openai_imported"] == {
        "pilothouse-sqlite": False,
        "pydantic-ai-model_request": True,
    }
    assert "openai SDK" in {row["phase"] for row in peer}
    section = (tmp_path / "coldstart-phases.md").read_text()
    assert "| SQLAlchemy Core |" in section
    assert "SQLAlchemy's ORM imported by pilothouse's first answer: no." in section
    assert "The openai SDK imported by pilothouse's first answer" in section
    assert "pilothouse / model_request to the first answer:" in section


@pytest.fixture(scope="module")
def served_and_disclosure(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    # One tiny harness run for scenario 4 and for pilothouse serve (the LiteLLM
    # proxy takes seconds to start and lives in bench/.venv-litellm: not here).
    out = tmp_path_factory.mktemp("served")
    return _harness(out, "httpx,pilothouse-serve", "plain-d0,disclosure", timeout=180)


def test_bench_disclosure_offers_fewer_prompt_tokens_than_all_tools(
    served_and_disclosure: dict[str, Any],
) -> None:
    # Scenario 4 counts tokens of the requests the mock received: facts, not timings.
    data = served_and_disclosure["disclosure"]
    variants = data["variants"]
    disclosed = variants["disclosure"]["prompt_tokens"]["total"]
    loaded = variants["all_tools"]["prompt_tokens"]["total"]
    assert 0 < disclosed < loaded
    # use_skill and AskUserQuestion with disclosure; the 50 tools and AskUserQuestion without
    assert variants["disclosure"]["tools_offered"] == 2
    assert variants["all_tools"]["tools_offered"] == data["tools"] + 1 == 51
    # after use_skill, the activated skill's 5 tools are offered as well
    assert variants["after_use_skill"]["tools_offered"] == 7
    assert variants["disclosure"]["recorded_input_tokens"] == disclosed


def test_bench_served_pilothouse_answers_through_the_openai_endpoint(
    served_and_disclosure: dict[str, Any],
) -> None:
    scenario = served_and_disclosure["scenarios"]["plain-d0"]
    assert scenario["skipped"] == {}
    # served contenders get their own table: not in the in-process one
    assert set(scenario["contenders"]) == {"httpx"}
    served = served_and_disclosure["served"]["plain-d0"]["pilothouse-serve"]
    assert served["cold"]["first_error"] is None
    assert served["calls"] == 6
    assert served["errors"] == 0, served["error_samples"]
    assert served["client_cpu_ms_per_call"] > 0
    # the server's own CPU, read from /proc: a governed turn is never free
    assert served["cpu_ms_per_call"] > 0
    # every served call reached the mock once, as did the floor's
    assert scenario["mock"]["requests"] == 2 * 6


def test_bench_concurrent_conversations_lose_no_message(tmp_path: Path) -> None:
    # Scenario 2 and scenario 3 at concurrency, tiny: 5 users of 3 turns (the
    # third calls the tool), 3 streams at once. Facts only: every turn done,
    # every answer saw its whole history, the store holds each message once.
    results = _harness(tmp_path, "httpx,pilothouse-sqlite", "conc-5,stream-3", timeout=120)
    conc, stream = results["scenarios"]["conc-5"], results["scenarios"]["stream-3"]
    for scenario in (conc, stream):
        assert scenario["skipped"] == {}
        assert set(scenario["contenders"]) == {"httpx", "pilothouse-sqlite"}
    for contender in conc["contenders"].values():
        assert contender["errors"] == 0, contender["error_samples"]
        assert contender["turns_done"] == contender["turns_expected"] == 5 * 3
        assert contender["history_mismatches"] == 0
        assert contender["rss_peak_mb"] >= contender["rss_before_mb"] > 0
    # 3 turns and one tool round trip per conversation, for both contenders
    assert conc["mock"]["requests"] == 2 * 5 * (3 + 1)
    store = conc["contenders"]["pilothouse-sqlite"]["store"]
    assert store["complete_conversations"] == store["conversations"] == 5
    # Per conversation: the recorded system prompt, 3 prompts and answers, a tool call and result.
    assert store["stored_messages"] == store["expected_messages"] == 5 * (1 + 2 * 3 + 2)
    assert store["lost_messages"] == store["extra_messages"] == 0
    assert store["duplicate_sequences"] == store["duplicate_contents"] == 0
    assert store["not_idle"] == 0
    assert store["statuses"] == {"CO": 5}
    for contender in stream["contenders"].values():
        assert contender["errors"] == 0, contender["error_samples"]
        # --smoke streams 16 chunks 2 ms apart instead of 64 chunks 20 ms apart
        assert contender["chunks_received"] == contender["chunks_expected"] == 3 * 16
    capacity = results["mock_capacity_concurrency"]
    assert capacity["conc"]["requests_per_s"] > 0
    assert capacity["stream"]["chunks_received"] == capacity["stream"]["chunks_expected"]


def test_bench_heap_freeze_runs_every_variant(tmp_path: Path) -> None:
    tiny = ["--runs", "1", "--rounds", "1", "--streams", "4"]
    _bench("heap_freeze.py", *tiny, "--out", str(tmp_path))
    result = json.loads((tmp_path / "heap-freeze.json").read_text())
    summary = result["summary"]
    assert set(summary) == {
        "pilothouse",
        "pilothouse freeze_heap",
        "pilothouse frozen",
        "model_request",
        "model_request frozen",
    }
    frozen = {run["variant"]: run["frozen"] for run in result["runs"]}
    # freeze_heap froze the heap after the first turn; the library's default did not.
    assert frozen["pilothouse"] == 0 and frozen["pilothouse freeze_heap"] > 100_000
    assert frozen["model_request frozen"] > 0 and frozen["model_request"] == 0
    for name, figures in summary.items():
        # The mock waits 200 ms before the first chunk; the figure is what came on top.
        assert figures["p50_ms"] >= 0 and figures["cpu_ms_per_stream"] > 0, name
    assert "| pilothouse freeze_heap |" in (tmp_path / "heap-freeze.md").read_text()
