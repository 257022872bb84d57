"""Scenario 2 (concurrent conversations) and scenario 3 at high concurrency.

Scenario names (``harness.py --scenarios``):

- ``conc-<N>``: N simulated users at once, each one conversation of
  ``--conc-turns`` turns (5) with growing history and a tool call on turn 3,
  mock delay ``--conc-delay`` ms (500). The user's turn ``t`` is sent as soon
  as turn ``t - 1`` is answered (a closed system: N requests in flight when
  nobody is CPU-bound, so Little's law gives the ideal throughput).
- ``stream-<N>``: N streamed answers at once (first chunk at 200 ms, 64
  chunks 20 ms apart, the scenario-3 stream).

Both sides live here: the harness calls :func:`run_scenario` (one worker
process per contender, see ``bench/worker.py``) and the worker calls
:func:`worker`, which builds its contender's client with ``bench/chats.py``.
Every contender gets an HTTP connection pool of ``chats.POOL`` connections
(keep-alive too) and a 600 s timeout with a 10 s connect timeout
(pilothouse's, which it has no setting for), so none is throttled by its
client's defaults (httpx2, which pilothouse uses: 100 connections, 20 kept
alive; openai SDK: 1,000, 100 kept alive; LiteLLM's aiohttp transport: 500
per host). The floor (contender ``httpx``) is raw httpx2 here, not httpx
0.28.

What each conversation sends: the system prompt, then its whole history
(user and assistant messages, the tool call and its result), plus the new
user message; one tool schema (``tool_00``) on every request. The mock
(``conv-d<ms>`` models, ``bench/mock_upstream.py``) answers
``"re <n>: <user text>"``, so each contender checks that every answer came
back to the right turn with the whole history (``history_mismatches``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import contenders as C
from chats import BUILDERS, POOL, TOOL_TURN, Chat, check_answer, stream_chunks
from process_figures import FullCollections, Ticker, cores_used, maxrss_mb, percentile, rss_mb

CONV_DELAYS = (500, 100, 20)
"""Mock delays pilothouse has a catalog action for (``CONV<ms>``, model ``conv-d<ms>``)."""
QUICK_STREAM = "stream-f20-k16-g2"
"""The stream of ``--smoke`` runs (action ``STREAMQ``): the same path, 16 chunks in 50 ms."""
_NAME = re.compile(r"^(conc|stream)-(\d+)$")


def handles(scenario: str) -> bool:
    """Tell whether ``scenario`` is one of this module's (``conc-N``, ``stream-N``)."""
    return bool(_NAME.match(scenario))


def _parse(scenario: str) -> tuple[str, int]:
    match = _NAME.match(scenario)
    assert match is not None
    return match.group(1), int(match.group(2))


def catalog_parts() -> tuple[str, str]:
    """Return the models and actions scenario 2 adds to the benchmark catalog."""
    models = "".join(
        f"""  - code: MCONV{ms}
    provider: MOCK
    model_name: conv-d{ms}
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
    context_window: 128000
"""
        for ms in CONV_DELAYS
    )
    actions = "".join(
        f"""  - code: CONV{ms}
    name: Benchmark conversation, mock delay {ms} ms
    model: MCONV{ms}
    configuration: BNCH
    memory_strategy: FULL
    prompt: {C.SYSTEM}
    ask_user: false
    tools: [T00]
"""
        for ms in CONV_DELAYS
    )
    models += f"""  - code: MSTREAMQ
    provider: MOCK
    model_name: {QUICK_STREAM}
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
    context_window: 128000
"""
    actions += f"""  - code: STREAMQ
    name: Benchmark quick stream (smoke)
    model: MSTREAMQ
    configuration: BNCH
    prompt: {C.SYSTEM}
    ask_user: false
"""
    return models, actions


# --- worker side: the rounds --------------------------------------------------------


def _kinds(errors: list[str]) -> dict[str, int]:
    """Count errors by kind: where (start, turn n) and the message with numbers blanked."""
    kinds: dict[str, int] = {}
    for error in errors:
        key = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<uuid>", error)
        key = re.sub(r"\d+(\.\d+)?", "N", key.split(" (Background")[0])[:160]
        kinds[key] = kinds.get(key, 0) + 1
    return dict(sorted(kinds.items(), key=lambda item: -item[1]))


class _Users:
    next_id = 0

    @classmethod
    def take(cls, n: int) -> range:
        start = cls.next_id
        cls.next_id += n
        return range(start, start + n)


async def _conversations(chat: Chat, users: int, turns: int, measure: bool) -> dict[str, Any]:
    """Run ``users`` conversations at once; return their facts."""
    latencies: list[list[float]] = []  # [turn, ms]
    errors: list[str] = []
    mismatches = 0
    states: list[Any] = []
    done: list[int] = []

    async def one(user: int) -> None:
        nonlocal mismatches
        try:
            state = await chat.start(user)
        except Exception as exc:
            errors.append(f"start: {type(exc).__name__}: {exc}"[:300])
            return
        index = len(states)
        states.append(state)
        done.append(0)
        for t in range(1, turns + 1):
            begin = time.perf_counter()
            try:
                answer = await chat.turn(state, user, t)
            except Exception as exc:  # a contender's failure is a result, reported
                errors.append(f"turn {t}: {type(exc).__name__}: {exc}"[:300])
                return
            latencies.append([t, (time.perf_counter() - begin) * 1000])
            done[index] = t
            if not check_answer(answer, user, t):
                mismatches += 1

    ticker = Ticker()
    rss_before = rss_mb()
    ticker.start()
    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(one(u) for u in _Users.take(users)))
    wall_s = time.perf_counter() - wall
    cpu_s = time.process_time() - cpu
    loop = await ticker.stop()
    result: dict[str, Any] = {
        "users": users,
        "turns": turns,
        "lat": latencies,
        "turns_done": len(latencies),
        "errors": len(errors),
        "error_samples": errors[:5],
        "error_kinds": _kinds(errors),
        "history_mismatches": mismatches,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        **loop,
        "rss_before_mb": rss_before,
        "rss_peak_mb": ticker.peak_rss_mb,
        "rss_after_mb": rss_mb(),
        "maxrss_mb": maxrss_mb(),
        "cores": cores_used(),
    }
    if measure and chat.count is not None:
        begin = time.perf_counter()
        result["store"] = await chat.count(states, done, turns)
        result["store"]["count_s"] = time.perf_counter() - begin
    return result


async def _streams(chat: Chat, n: int) -> dict[str, Any]:
    """Run ``n`` streamed calls at once; return their facts."""
    facts: list[dict[str, Any]] = []
    errors: list[str] = []
    latencies: list[float] = []

    async def one() -> None:
        begin = time.perf_counter()
        try:
            fact = await chat.stream()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        latencies.append((time.perf_counter() - begin) * 1000)
        facts.append(fact)

    ticker = Ticker()
    rss_before = rss_mb()
    ticker.start()
    with FullCollections() as collections:
        cpu = time.process_time()
        wall = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        wall_s = time.perf_counter() - wall
        cpu_s = time.process_time() - cpu
    # Every stream was asked for at `wall`, as 200 requests arriving at once
    # are: its time to first chunk counts from there. The per-call clock
    # (`ttft_ms`) starts when the call's own code first runs, which for a
    # client that does all its start-up before it first yields comes only
    # after every earlier start has finished.
    for fact in facts:
        if fact.get("first_at") is not None:
            fact["ttft_launch_ms"] = (fact["first_at"] - wall) * 1000
    loop = await ticker.stop()
    return {
        "streams": n,
        "facts": facts,
        "lat_ms": latencies,
        "errors": len(errors),
        "error_samples": errors[:5],
        "error_kinds": _kinds(errors),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        **loop,
        **collections.facts(),
        "rss_before_mb": rss_before,
        "rss_peak_mb": ticker.peak_rss_mb,
        "maxrss_mb": maxrss_mb(),
        "cores": cores_used(),
    }


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def worker(
    options: dict[str, Any], send: Callable[[dict[str, Any]], None], t0: float, c0: float
) -> None:
    """The worker process's side: build, make a first conversation, obey the harness."""
    import traceback

    _raise_fd_limit()
    kind, _ = _parse(options["scenario"])
    model = f"conv-d{options['delay_ms']}"
    turns = options["turns"]
    chat = await BUILDERS[options["contender"]](options["base_url"], model, options)
    setup_s = time.perf_counter() - t0
    first_error = None
    try:
        if kind == "stream":
            await chat.stream()
        else:
            first = await _conversations(chat, 1, turns, measure=False)
            if first["errors"] or first["history_mismatches"]:
                first_error = json.dumps(
                    {k: first[k] for k in ("error_samples", "history_mismatches", "turns_done")}
                )
    except Exception as exc:
        first_error = f"{type(exc).__name__}: {exc}"[:2000] + "\n" + traceback.format_exc()[-3000:]
    send(
        {
            "ready": True,
            "import_setup_ms": setup_s * 1000,
            "cold_ms": (time.perf_counter() - t0) * 1000,
            "cold_cpu_ms": (time.process_time() - c0) * 1000,
            "first_error": first_error,
            "rss_mb": rss_mb(),
            "client": chat.client,
        }
    )
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "conc":
            send(await _conversations(chat, command["users"], turns, command.get("measure", True)))
        elif command["op"] == "streams":
            send(await _streams(chat, command["n"]))
        else:
            break
    await chat.aclose()


# --- harness side -------------------------------------------------------------------


def add_arguments(parser: Any) -> None:
    """Add this module's options to the harness's parser."""
    parser.add_argument(
        "--conc-turns", type=int, default=5, help="scenario 2: turns per conversation"
    )
    parser.add_argument(
        "--conc-delay",
        type=int,
        default=500,
        choices=CONV_DELAYS,
        help="scenario 2: mock delay, ms",
    )
    parser.add_argument("--conc-rounds", type=int, default=1, help="scenario 2: rounds")
    # A round of 200 streams holds one full collection or none, and the tail
    # is made of that (docs/benchmarks.md): one round is one draw.
    parser.add_argument("--stream-rounds", type=int, default=3, help="stream-N: rounds")
    parser.add_argument("--conc-stream-model", default=C.STREAM_MODEL, help=argparse.SUPPRESS)
    parser.add_argument(
        "--conc-warmup",
        type=int,
        default=10,
        help="warm-up conversations (streams: at most 3) per worker",
    )


def smoke(args: Any) -> None:
    """Shrink this module's load for ``--smoke``."""
    args.conc_turns, args.conc_delay, args.conc_rounds, args.conc_warmup = 3, 20, 1, 0
    args.stream_rounds = 1
    args.conc_stream_model = QUICK_STREAM


def _pin_threads(pid: int, core: int) -> None:
    """Pin every thread of process ``pid`` to ``core`` (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except (ProcessLookupError, FileNotFoundError):  # a thread that just ended
            pass


def _ask_all(workers: dict[str, Any], command: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Send ``command`` to every worker at once (un-timed work only), collect the answers."""
    for worker in workers.values():
        worker.process.stdin.write(json.dumps(command) + "\n")
        worker.process.stdin.flush()
    return {name: worker._read() for name, worker in workers.items()}


def _start(
    h: Any, name: str, python: str, options: dict[str, Any], args: Any, mock: Any, workdir: Path
) -> Any:
    if name.startswith("pilothouse"):
        own = workdir / name  # its own catalog file: preparations run in parallel
        own.mkdir(parents=True, exist_ok=True)
        options.update(h._prepare_pilothouse(args.python, name, mock, own, args.pg))
    return h.Worker(python, options)


def _submit_starts(
    pool: ThreadPoolExecutor,
    h: Any,
    scenario: str,
    names: list[str],
    args: Any,
    mock: Any,
    workdir: Path,
    skipped: dict[str, str],
) -> dict[str, Any]:
    """Submit to ``pool`` the start of each contender of ``scenario`` that can run here.

    Returns the pending start-ups (futures of workers) by contender name; a contender that
    cannot run (not a contender of the scenario's kind, no interpreter, no PostgreSQL) gets
    its reason in ``skipped`` instead.
    """
    kind, _ = _parse(scenario)
    pending: dict[str, Any] = {}
    for name in names:
        if name not in BUILDERS:
            skipped[name] = f"not a contender of {kind}-N scenarios"
            continue
        python = args.litellm_python if name in C.LITELLM else args.python
        if not Path(python).exists():
            skipped[name] = f"no interpreter at {python}"
            continue
        if name == "pilothouse-postgres" and not h._postgres_available(args.pg):
            skipped[name] = f"no PostgreSQL at {args.pg}"
            continue
        options: dict[str, Any] = {
            "contender": name,
            "scenario": scenario,
            "base_url": mock.base_url,
            "bench_dir": str(h.BENCH),
            "delay_ms": args.conc_delay,
            "turns": args.conc_turns,
            "stream_model": args.conc_stream_model,
        }
        if h._pin(h.SUT_CORE):
            # Start-up and warm-up may use both cores; pinned before the rounds.
            options["worker_core"] = f"{h.LOAD_CORE},{h.SUT_CORE}"
        pending[name] = pool.submit(_start, h, name, python, options, args, mock, workdir)
    return pending


def run_scenario(
    h: Any,
    scenario: str,
    names: list[str],
    args: Any,
    mock: Any,
    workdir: Path,
    raw: dict[str, Any],
) -> dict[str, Any]:
    """Run one ``conc-N`` or ``stream-N`` scenario over the contenders; return its results.

    ``h`` is the harness module (its Worker, Mock and pilothouse preparation).
    """
    kind, n = _parse(scenario)
    count = args.conc_rounds if kind == "conc" else args.stream_rounds
    result: dict[str, Any] = {
        "kind": kind,
        "concurrency": n,
        "settings": {
            "turns": args.conc_turns,
            "delay_ms": args.conc_delay,
            "rounds": count,
            "warmup": args.conc_warmup,
            "pool": POOL,
            "stream_model": args.conc_stream_model,
            "tool_turn": TOOL_TURN,
        },
        "contenders": {},
        "skipped": {},
    }
    workers: dict[str, Any] = {}
    # Workers start in parallel (threads wait on their processes): their
    # start-up, and the first conversation's mock delays, are not measured.
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        pending = _submit_starts(pool, h, scenario, names, args, mock, workdir, result["skipped"])
        for name, future in pending.items():
            try:
                worker = future.result()
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                result["skipped"][name] = f"could not start: {exc}"
                continue
            if worker.ready.get("first_error"):
                result["skipped"][name] = (
                    "first conversation failed: " + worker.ready["first_error"][:1500]
                )
                worker.close()
                continue
            workers[name] = worker
            result["contenders"][name] = {"cold": worker.ready}
            print(f"  [{scenario}] {name}: ready in {worker.ready['cold_ms']:.0f} ms", flush=True)
    # Warm-up runs in every worker at once: it is not measured.
    if args.conc_warmup and kind == "conc":
        _ask_all(workers, {"op": "conc", "users": args.conc_warmup, "measure": False})
    elif args.conc_warmup:
        _ask_all(workers, {"op": "streams", "n": min(3, args.conc_warmup)})
    if h._pin(h.SUT_CORE):
        for worker in workers.values():
            _pin_threads(worker.process.pid, h.SUT_CORE)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
    mock_before = mock.stats()
    for index in range(count):
        for name, worker in workers.items():
            command = {"op": "conc", "users": n} if kind == "conc" else {"op": "streams", "n": n}
            answer = worker.ask(command)
            rounds[name].append(answer)
            print(
                f"  [{scenario}] round {index + 1}/{count} {name}:"
                f" {answer['wall_s']:.1f} s, {answer['errors']} errors",
                flush=True,
            )
    mock_after = mock.stats()
    for name, worker in workers.items():
        summary = summarize(kind, n, args, rounds[name])
        result["contenders"][name].update(summary)
        if kind == "conc":
            raw[f"{scenario}/{name}"] = [x for r in rounds[name] for x in r["lat"]]
        else:
            raw[f"{scenario}/{name}/ttft"] = [
                f["ttft_ms"]
                for r in rounds[name]
                for f in r["facts"]
                if f.get("ttft_ms") is not None
            ]
        worker.close()
    served = mock_after["requests"] - mock_before["requests"]
    result["mock"] = {
        "requests": served,
        "cpu_us_per_request": (mock_after["cpu_s"] - mock_before["cpu_s"]) / served * 1e6
        if served
        else None,
    }
    return result


def _merge(counts: list[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for count in counts:
        for key, value in count.items():
            merged[key] = merged.get(key, 0) + value
    return merged


def summarize(kind: str, n: int, args: Any, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Reduce a contender's rounds to the figures the report shows."""
    first = rounds[0]
    common = {
        "rounds": len(rounds),
        "errors": sum(r["errors"] for r in rounds),
        "error_samples": [e for r in rounds for e in r["error_samples"]][:3],
        "error_kinds": _merge([r["error_kinds"] for r in rounds]),
        "cpu_s": sum(r["cpu_s"] for r in rounds),
        "wall_s": sum(r["wall_s"] for r in rounds),
        "lag_p50_ms": statistics.median(
            [r["lag_p50_ms"] for r in rounds if r["lag_p50_ms"] is not None] or [0]
        ),
        "lag_p99_ms": max((r["lag_p99_ms"] or 0) for r in rounds),
        "lag_max_ms": max((r["lag_max_ms"] or 0) for r in rounds),
        # Memory from the first round: the process is fresh, nothing reused.
        "rss_before_mb": first["rss_before_mb"],
        "rss_peak_mb": first["rss_peak_mb"],
        "maxrss_mb": max(r["maxrss_mb"] for r in rounds),
        "cores": sorted({c for r in rounds for c in r["cores"]}),
    }
    if kind == "stream":
        facts = [f for r in rounds for f in r["facts"]]
        ttft = [f["ttft_ms"] for f in facts if f.get("ttft_ms") is not None]
        launch = [f["ttft_launch_ms"] for f in facts if f.get("ttft_launch_ms") is not None]
        gaps = [g for f in facts for g in f.get("gaps_ms", [])]
        return {
            **common,
            "streams": len(facts),
            "ttft_p50_ms": statistics.median(ttft) if ttft else None,
            "ttft_p99_ms": percentile(ttft, 99),
            "ttft_launch_p50_ms": statistics.median(launch) if launch else None,
            "ttft_launch_p99_ms": percentile(launch, 99),
            "gap_p50_ms": statistics.median(gaps) if gaps else None,
            "gap_p99_ms": percentile(gaps, 99),
            "gap_max_ms": max(gaps) if gaps else None,
            "chunks_expected": stream_chunks(args.conc_stream_model) * n * len(rounds),
            "chunks_received": sum(f.get("chunks", 0) for f in facts),
            "cpu_ms_per_stream": common["cpu_s"] / len(facts) * 1000 if facts else None,
            "kb_per_stream": (first["rss_peak_mb"] - first["rss_before_mb"]) * 1024 / n,
            # Full collections inside the rounds: per round, and each one's CPU ms.
            "gc_full_per_round": [r.get("gc_full", 0) for r in rounds],
            "gc_full_ms": [ms for r in rounds for ms in r.get("gc_full_ms", [])],
            "gc_tracked": statistics.median(r.get("gc_tracked", 0) for r in rounds),
        }
    turns = args.conc_turns
    delay = args.conc_delay
    lat = [x for r in rounds for x in r["lat"]]
    excess = [ms - delay * (2 if t == TOOL_TURN else 1) for t, ms in lat]
    mean_turn_s = statistics.fmean(ms for _, ms in lat) / 1000 if lat else None
    requests_per_conv = turns + (1 if turns >= TOOL_TURN else 0)
    ideal_turn_s = delay * requests_per_conv / turns / 1000
    throughput = [r["turns_done"] / r["wall_s"] for r in rounds if r["wall_s"]]
    stores = [r["store"] for r in rounds if "store" in r]
    store: dict[str, Any] | None = None
    if stores:
        store = {}
        for key in stores[0]:
            if key == "statuses":
                store[key] = _merge([s["statuses"] for s in stores])
            else:
                store[key] = sum(s[key] for s in stores)
    return {
        **common,
        "users": n,
        "turns_expected": n * turns * len(rounds),
        "turns_done": len(lat),
        "history_mismatches": sum(r["history_mismatches"] for r in rounds),
        "throughput_turns_s": statistics.median(throughput) if throughput else 0.0,
        "round_throughput_turns_s": throughput,
        "requests_per_s": statistics.median(throughput) * requests_per_conv / turns
        if throughput
        else 0.0,
        "ideal_turns_s": n / ideal_turn_s if ideal_turn_s else None,
        "littles_law_in_flight": (
            statistics.median(throughput) * mean_turn_s if throughput and mean_turn_s else None
        ),
        "p50_ms": statistics.median(ms for _, ms in lat) if lat else None,
        "p99_ms": percentile([ms for _, ms in lat], 99),
        "excess_p50_ms": statistics.median(excess) if excess else None,
        "excess_p99_ms": percentile(excess, 99),
        "cpu_ms_per_turn": common["cpu_s"] / len(lat) * 1000 if lat else None,
        "cpu_ceiling_turns_s": len(lat) / common["cpu_s"] if common["cpu_s"] else None,
        "kb_per_conversation": (first["rss_peak_mb"] - first["rss_before_mb"]) * 1024 / n,
        "store": store,
    }


# --- mock capacity at this load ---------------------------------------------------


LOADGEN = r"""
import asyncio, json, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port, mode = sys.argv[1], sys.argv[2]
conns, seconds, delay = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
stream_model = sys.argv[6]
lat, ttft, gaps, chunks, count = [], [], [], [0], [0]
def request(body):
    body = json.dumps(body).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
plain = request({"model": f"conv-d{delay}", "messages": [{"role": "user", "content": "hi"}]})
stream = request({"model": stream_model, "stream": True,
                  "messages": [{"role": "user", "content": "hi"}]})
async def one_plain(deadline):
    r, w = await asyncio.open_connection("127.0.0.1", int(port))
    first = True
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        w.write(plain)
        head = await r.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await r.readexactly(length)
        if not first:  # the first request of a connection waits for the connect burst
            lat.append((time.perf_counter() - t) * 1000)
        first = False
        count[0] += 1
    w.close()
async def one_stream():
    r, w = await asyncio.open_connection("127.0.0.1", int(port))
    t = time.perf_counter()
    w.write(stream)
    await r.readuntil(b"\r\n\r\n")
    last = None
    while True:
        size = int((await r.readuntil(b"\r\n"))[:-2], 16)
        data = await r.readexactly(size + 2)
        if size == 0:
            break
        if b'"content"' in data:
            now = time.perf_counter()
            if last is None:
                ttft.append((now - t) * 1000)
            else:
                gaps.append((now - last) * 1000)
            last = now
            chunks[0] += 1
    w.close()
async def main():
    start = time.perf_counter()
    if mode == "plain":
        await asyncio.gather(*(one_plain(start + seconds) for _ in range(conns)))
    else:
        await asyncio.gather(*(one_stream() for _ in range(conns)))
    print(json.dumps({"seconds": time.perf_counter() - start, "requests": count[0],
                      "lat": lat, "ttft": ttft, "gaps": gaps, "chunks": chunks[0]}))
asyncio.run(main())
"""


def capacity(h: Any, mock: Any, python: str, scenarios: list[str], args: Any) -> dict[str, Any]:
    """Load the mock as the largest conc-N / stream-N scenario does, from a raw client on the
    other core.

    Returns achieved vs ideal throughput and the added latency at that load
    (plain), and time to first chunk, gaps and chunks (stream), with the mock's
    CPU per request: the mock is valid at a load if it keeps its timing there
    and its core has headroom.
    """
    out: dict[str, Any] = {}
    for kind in ("conc", "stream"):
        levels = [n for k, n in map(_parse, scenarios) if k == kind]
        if not levels:
            continue
        conns = max(levels)
        seconds = max(args.capacity_seconds, 10 * args.conc_delay / 1000) if kind == "conc" else 0
        before = mock.stats()
        done = subprocess.run(
            [
                *h._pin(h.SUT_CORE),
                python,
                "-c",
                LOADGEN,
                str(mock.port),
                "plain" if kind == "conc" else "stream",
                str(conns),
                str(seconds),
                str(args.conc_delay),
                args.conc_stream_model,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        after = mock.stats()
        load = json.loads(done.stdout)
        served = after["requests"] - before["requests"]
        cpu_us = (after["cpu_s"] - before["cpu_s"]) / served * 1e6 if served else None
        if kind == "conc":
            lat = load["lat"]
            out["conc"] = {
                "connections": conns,
                "delay_ms": args.conc_delay,
                "requests_per_s": load["requests"] / load["seconds"],
                "ideal_requests_per_s": conns / (args.conc_delay / 1000),
                "excess_p50_ms": statistics.median(lat) - args.conc_delay if lat else None,
                "excess_p99_ms": (percentile(lat, 99) or 0) - args.conc_delay if lat else None,
                "cpu_us_per_request": cpu_us,
                "cpu_bound_capacity_per_s": 1e6 / cpu_us if cpu_us else None,
            }
        else:
            out["stream"] = {
                "streams": conns,
                "ttft_p50_ms": statistics.median(load["ttft"]) if load["ttft"] else None,
                "ttft_p99_ms": percentile(load["ttft"], 99),
                "gap_p99_ms": percentile(load["gaps"], 99),
                "gap_max_ms": max(load["gaps"]) if load["gaps"] else None,
                "chunks_received": load["chunks"],
                "chunks_expected": conns * stream_chunks(args.conc_stream_model),
                "cpu_us_per_stream": cpu_us,
            }
    out["note"] = (
        "a raw asyncio client on the other core (no HTTP library), at the largest concurrency of"
        " the run; the mock is single-threaded on one core"
    )
    return out
