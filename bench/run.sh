#!/usr/bin/env bash
# Run the benchmarks and regenerate docs/benchmarks.md and docs/benchmarks/*.png.
# Creates bench/.venv (peers + pilothouse) and bench/.venv-litellm when missing.
# Extra arguments go to bench/harness.py (e.g. --rounds 3 --contenders httpx,openai).
set -euo pipefail
cd "$(dirname "$0")"
PYTHON="${PYTHON:-python3}"
# pilothouse depends on llama-cpp-python, which PyPI has as source only (a
# ~10-minute build): take the prebuilt wheel when the shared folder has it.
FIND_LINKS=()
if compgen -G "../../shared/wheels/llama_cpp_python-*.whl" > /dev/null; then
  FIND_LINKS=(--find-links ../../shared/wheels)
fi
if [ ! -x .venv/bin/python ] || [ requirements.txt -nt .venv/.installed ]; then
  "$PYTHON" -m venv .venv
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --progress-bar off "${FIND_LINKS[@]}" -r requirements.txt -e '..[openai,postgres,events]'
  touch .venv/.installed
fi
if [ ! -x .venv-litellm/bin/python ] || [ requirements-litellm.txt -nt .venv-litellm/.installed ]; then
  "$PYTHON" -m venv .venv-litellm
  .venv-litellm/bin/python -m pip install --quiet --upgrade pip
  .venv-litellm/bin/python -m pip install --progress-bar off -r requirements-litellm.txt
  touch .venv-litellm/.installed
fi
# pilothouse is an editable install: byte-compile it like pip compiled the
# peers in site-packages, so cold starts compare like with like.
.venv/bin/python -m compileall -q ../src
.venv/bin/python harness.py --out results "$@"
# Cold start, whole process: pilothouse's first turn beside model_request's.
.venv/bin/python coldstart.py --out results
# The same first answer split into phases: where pilothouse's extra CPU goes.
.venv/bin/python coldstart_phases.py --out results
# 200 streams with and without a frozen start-up heap (Settings.freeze_heap).
.venv/bin/python heap_freeze.py --out results
# 200 run_actions through tansu and NATS beside the same 200 turns over REST.
.venv/bin/python events_actions.py --out results
# What enforcing budgets costs a governed turn (none, one, three budgets).
.venv/bin/python budgets.py
# The same burst against a money limit through pilothouse and LiteLLM's budgets.
.venv/bin/python budget_gateways.py
# Peak memory of an ingestion on the packaged embedder (about four minutes).
.venv/bin/python ingest_rss.py
# Replay throughput on a scripted model, and an LLM judge's tokens and cost per case.
.venv/bin/python replay.py --cases 40 --rounds 2 --judge-cases 3
.venv/bin/python report.py --results results --docs ../docs
