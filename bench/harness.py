"""Run the benchmarks: mock upstream, one worker process per contender, interleaved rounds.

Usage (``bench/run.sh`` does this with bench/.venv)::

    python bench/harness.py --out bench/results
    python bench/harness.py --smoke --contenders httpx,pilothouse-sqlite --out /tmp/x

The mock and this process (the load generator, which only sends commands)
are pinned to core 0; every contender's worker to core 1 when the machine
has two cores or more. Contenders never run at the same time: rounds go
A B C ... A B C ... after a warm-up round each, so drift (thermal, caches,
the neighbours) spreads over all of them.

Results: ``<out>/results.json`` (summary, small, committed) and
``<out>/raw/*.json`` (every latency; gitignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import concurrency as CONC  # noqa: E402
import contenders as C  # noqa: E402
from childenv import MOCK_KEY, child_env  # noqa: E402

SUT_CORE = 1
LOAD_CORE = 0


def _available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


CORES = _available_cores()
"""Cores this run may use, read before the harness pins itself to the load core."""


def _cores() -> int:
    return CORES


def _pin(core: int) -> list[str]:
    """Return the taskset prefix pinning a child to ``core`` (empty on one core)."""
    if _cores() < 2 or not _which("taskset"):
        return []
    return ["taskset", "-c", str(core)]


def _which(name: str) -> bool:
    from shutil import which

    return which(name) is not None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


class Mock:
    """The mock upstream as a child process pinned to the load core."""

    def __init__(self, python: str) -> None:
        self.port = _free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.process = subprocess.Popen(
            [*_pin(LOAD_CORE), python, str(BENCH / "mock_upstream.py"), "--port", str(self.port)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.process.stdout.readline()  # "listening on ..."

    def stats(self) -> dict[str, Any]:
        """Return the mock's request count and CPU seconds."""
        return _get_json(self.base_url + "/stats")

    def close(self) -> None:
        """Stop the mock."""
        self.process.terminate()
        self.process.wait(10)


class Worker:
    """One contender's process."""

    def __init__(self, python: str, options: dict[str, Any]) -> None:
        self.name = options["contender"]
        env = child_env(**MOCK_KEY, PYTHONDONTWRITEBYTECODE="1")
        self.process = subprocess.Popen(
            # A served contender's worker is the client, on the load core; it pins its server.
            [
                *_pin(options.get("worker_core", SUT_CORE)),
                python,
                str(BENCH / "worker.py"),
                json.dumps(options),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} died (exit {self.process.wait()})")
        return json.loads(line)

    def ask(self, command: dict[str, Any]) -> dict[str, Any]:
        """Send one command and return its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        """Ask the worker to quit, and wait."""
        try:
            assert self.process.stdin is not None
            self.process.stdin.write('{"op": "quit"}\n')
            self.process.stdin.close()
            self.process.wait(30)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.process.kill()


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _prepare_pilothouse(
    python: str, name: str, mock: Mock, workdir: Path, pg: str
) -> dict[str, Any]:
    """Create the contender's database with the benchmark catalog; return its options."""
    if name == "pilothouse-postgres":
        db = f"bench_{uuid.uuid4().hex[:10]}"
        script = (
            "import asyncio, asyncpg\n"
            "async def m():\n"
            f"    c = await asyncpg.connect({pg.replace('+asyncpg', '')!r} + '/postgres')\n"
            f"    await c.execute('CREATE DATABASE {db}')\n"
            "    await c.close()\n"
            "asyncio.run(m())\n"
        )
        subprocess.run([python, "-c", script], check=True)
        url = f"{pg}/{db}"
    else:
        url = f"sqlite+aiosqlite:///{workdir / (name + '.db')}"
    prepare = (
        "import asyncio, sys\n"
        f"sys.path.insert(0, {str(BENCH)!r})\n"
        "import contenders\n"
        f"asyncio.run(contenders.prepare_pilothouse({url!r}, {mock.base_url!r},"
        f" {str(workdir)!r}))\n"
    )
    env = child_env(**MOCK_KEY)
    subprocess.run([python, "-c", prepare], check=True, env=env)
    options: dict[str, Any] = {"database_url": url}
    if name == "pilothouse-noaudit":
        options["audit"] = False
    return options


def _postgres_available(pg: str) -> bool:
    host_port = pg.rsplit("@", 1)[-1]
    host, _, port = host_port.partition(":")
    try:
        with socket.create_connection((host, int(port or 5432)), timeout=1):
            return True
    except OSError:
        return False


def _summarize(rounds: list[dict[str, Any]], scenario: str) -> dict[str, Any]:
    latencies = [x for r in rounds for x in r["lat_ms"]]
    calls = len(latencies)
    cpu = sum(r["cpu_s"] for r in rounds)
    wall = sum(r["wall_s"] for r in rounds)
    errors = [e for r in rounds for e in r["errors"]]
    summary: dict[str, Any] = {
        "calls": calls,
        "errors": len(errors),
        "error_samples": errors[:3],
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p99_ms": _percentile(latencies, 99),
        "mean_ms": statistics.fmean(latencies) if latencies else None,
        "cpu_ms_per_call": cpu / calls * 1000 if calls else None,
        "round_p50_ms": [statistics.median(r["lat_ms"]) for r in rounds if r["lat_ms"]],
        "round_cpu_ms": [r["cpu_s"] / len(r["lat_ms"]) * 1000 for r in rounds if r["lat_ms"]],
        "client_cpu_ms_per_call": (  # served contenders: cpu_s is the server's
            sum(r["client_cpu_s"] for r in rounds) / calls * 1000
            if calls and all("client_cpu_s" in r for r in rounds)
            else None
        ),
        "requests_per_s": (calls * (2 if scenario == "tool-d0" else 1) / wall if wall else None),
    }
    if scenario == "stream":
        facts = [f for r in rounds for f in r["facts"]]
        ttft = [f["ttft_ms"] for f in facts if f.get("ttft_ms") is not None]
        gaps = [g for f in facts for g in f.get("gaps_ms", [])]
        summary.update(
            {
                "ttft_p50_ms": statistics.median(ttft) if ttft else None,
                "ttft_p99_ms": _percentile(ttft, 99),
                "gap_p99_ms": _percentile(gaps, 99),
                "gap_max_ms": max(gaps) if gaps else None,
                "chunks_expected": C.STREAM_CHUNKS * len(facts),
                "chunks_received": sum(f.get("chunks", 0) for f in facts),
            }
        )
    return summary


def _run_scenario(
    scenario: str,
    names: list[str],
    args: argparse.Namespace,
    mock: Mock,
    workdir: Path,
    raw: dict[str, Any],
) -> dict[str, Any]:
    workers: dict[str, Worker] = {}
    result: dict[str, Any] = {"contenders": {}, "skipped": {}}
    for name in names:
        python = args.litellm_python if name in C.LITELLM else args.python
        if not Path(python).exists():
            result["skipped"][name] = f"no interpreter at {python}"
            continue
        options: dict[str, Any] = {
            "contender": name,
            "scenario": scenario,
            "base_url": mock.base_url,
            "bench_dir": str(BENCH),
        }
        if (
            name in C.SERVED
        ):  # bench/served.py: the server on the SUT core, the client beside the mock
            options.update(
                worker_core=LOAD_CORE, sut_pin=_pin(SUT_CORE), litellm_python=args.litellm_python
            )
        try:
            if name.startswith("pilothouse"):
                if name == "pilothouse-postgres" and not _postgres_available(args.pg):
                    result["skipped"][name] = f"no PostgreSQL at {args.pg}"
                    continue
                options.update(_prepare_pilothouse(args.python, name, mock, workdir, args.pg))
            worker = Worker(python, options)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            result["skipped"][name] = f"could not start: {exc}"
            continue
        if worker.ready.get("first_error"):
            result["skipped"][name] = "first call failed: " + worker.ready["first_error"][:1500]
            worker.close()
            continue
        workers[name] = worker
        result["contenders"][name] = {"cold": worker.ready}
        print(f"  [{scenario}] {name}: cold {worker.ready['cold_ms']:.0f} ms", flush=True)
    # A streamed call lasts 1.5 s by design: a few warm it up as well as many.
    warmup = min(args.warmup, 3) if scenario == "stream" else args.warmup
    for worker in workers.values():
        worker.ask({"op": "round", "n": warmup})
    before = mock.stats()
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
    calls = {
        "stream": args.stream_calls,
        "plain-d50": args.slow_calls,
        "tool-d0": args.tool_calls,
    }.get(scenario, args.calls)
    for index in range(args.rounds):
        order = list(workers)
        for name in order:
            rounds[name].append(workers[name].ask({"op": "round", "n": calls}))
        print(f"  [{scenario}] round {index + 1}/{args.rounds} done", flush=True)
    after = mock.stats()
    for name, worker in workers.items():
        result["contenders"][name].update(_summarize(rounds[name], scenario))
        raw[f"{scenario}/{name}"] = [x for r in rounds[name] for x in r["lat_ms"]]
        if scenario == "stream":
            raw[f"{scenario}/{name}/ttft"] = [
                f["ttft_ms"] for r in rounds[name] for f in r["facts"] if f.get("ttft_ms")
            ]
        worker.close()
    served = after["requests"] - before["requests"]
    result["mock"] = {
        "requests": served,
        "cpu_us_per_request": (after["cpu_s"] - before["cpu_s"]) / served * 1e6 if served else None,
    }
    return result


LOADGEN = r"""
import asyncio, json, sys, time
port, seconds, conns = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
body = json.dumps({"model": "plain-d0", "messages": [{"role": "user", "content": "hi"}]}).encode()
req = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
       b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
count = 0
async def one(deadline):
    global count
    r, w = await asyncio.open_connection("127.0.0.1", port)
    while time.perf_counter() < deadline:
        w.write(req)
        head = await r.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await r.readexactly(length)
        count += 1
    w.close()
async def main():
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    await asyncio.gather(*(one(deadline) for _ in range(conns)))
    print(json.dumps({"requests": count, "seconds": time.perf_counter() - start}))
asyncio.run(main())
"""


def _capacity(mock: Mock, python: str, seconds: float) -> dict[str, Any]:
    """Saturate the mock from the other core; return achieved requests/s and CPU/request."""
    before = mock.stats()
    out = subprocess.run(
        [*_pin(SUT_CORE), python, "-c", LOADGEN, str(mock.port), str(seconds), "16"],
        capture_output=True,
        text=True,
        check=True,
    )
    after = mock.stats()
    load = json.loads(out.stdout)
    served = after["requests"] - before["requests"]
    cpu_us = (after["cpu_s"] - before["cpu_s"]) / served * 1e6
    return {
        "requests_per_s": load["requests"] / load["seconds"],
        "cpu_us_per_request": cpu_us,
        "cpu_bound_capacity_per_s": 1e6 / cpu_us,
        "note": "16 keep-alive connections from a raw asyncio client on the other core; "
        "the mock is single-threaded on one core",
    }


def _profile(args: argparse.Namespace, mock: Mock, workdir: Path, out: Path) -> dict[str, Any]:
    options: dict[str, Any] = {
        "contender": "pilothouse-sqlite",
        "scenario": "plain-d0",
        "base_url": mock.base_url,
        "bench_dir": str(BENCH),
    }
    options.update(
        _prepare_pilothouse(args.python, "pilothouse-sqlite", mock, workdir / "p", args.pg)
    )
    worker = Worker(args.python, options)
    worker.ask({"op": "round", "n": 20})
    answer = worker.ask(
        {"op": "profile", "n": args.profile, "out": str(out / "raw" / "pilothouse.prof")}
    )
    worker.close()
    return {"calls": args.profile, **answer}


def _versions(python: str) -> dict[str, str]:
    script = (
        "import importlib.metadata as m, json\n"
        "names = ['httpx','openai','litellm','pydantic-ai-slim','langchain-openai',"
        "'langchain-core','pilothouse','sqlalchemy','aiosqlite','asyncpg','matplotlib']\n"
        "out = {}\n"
        "for n in names:\n"
        "    try: out[n] = m.version(n)\n"
        "    except m.PackageNotFoundError: pass\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run([python, "-c", script], capture_output=True, text=True, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def _machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": _cores(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "pinned": bool(_pin(0)),
    }


def main() -> None:
    """Parse arguments, run the scenarios, write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--litellm-python", default=str(BENCH / ".venv-litellm" / "bin" / "python"))
    parser.add_argument("--contenders", default=",".join(C.CONTENDERS))
    parser.add_argument(
        "--scenarios",
        default="plain-d0,plain-d50,tool-d0,stream,disclosure,conc-100,conc-500,conc-1000,stream-200",
    )
    # Ten rounds: on a shared machine a contender's CPU per call drifts by a
    # third from round to round, and the item-15 ratio is taken round by round.
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=200, help="calls per round")
    parser.add_argument("--slow-calls", type=int, default=40, help="plain-d50 calls per round")
    parser.add_argument("--tool-calls", type=int, default=100, help="tool-d0 calls per round")
    parser.add_argument("--stream-calls", type=int, default=3, help="streamed calls per round")
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    parser.add_argument("--profile", type=int, default=300, help="profiled calls (0: none)")
    parser.add_argument("--capacity-seconds", type=float, default=3.0)
    parser.add_argument("--smoke", action="store_true", help="tiny load: 2 rounds of 3 calls")
    CONC.add_arguments(parser)  # scenario 2 and stream-N
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.calls, args.stream_calls, args.warmup = 2, 3, 1, 1
        args.slow_calls = args.tool_calls = 3
        args.profile, args.capacity_seconds = 0, 0.5
        CONC.smoke(args)
    if _cores() >= 2:
        os.sched_setaffinity(0, {LOAD_CORE})
    names = [n for n in args.contenders.split(",") if n]
    (args.out / "raw").mkdir(parents=True, exist_ok=True)
    raw: dict[str, Any] = {}
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": _machine(),
        "versions": _versions(args.python),
        "versions_litellm_env": _versions(args.litellm_python)
        if Path(args.litellm_python).exists()
        else {},
        "settings": {
            k: getattr(args, k)
            for k in (
                "rounds",
                "calls",
                "slow_calls",
                "tool_calls",
                "stream_calls",
                "warmup",
                "profile",
            )
        },
        "scenarios": {},
    }
    mock = Mock(args.python)
    try:
        with tempfile.TemporaryDirectory(prefix="pilothouse-bench-") as tmp:
            workdir = Path(tmp)
            for scenario in [s for s in args.scenarios.split(",") if s]:
                print(f"scenario {scenario}", flush=True)
                scenario_dir = workdir / scenario
                scenario_dir.mkdir()
                if scenario == "disclosure":  # scenario 4: token counts, not timings
                    import disclosure

                    results["disclosure"] = disclosure.run(args.python, scenario_dir)
                    continue
                if CONC.handles(scenario):  # scenario 2; scenario 3 at concurrency
                    results["scenarios"][scenario] = CONC.run_scenario(
                        sys.modules[__name__], scenario, names, args, mock, scenario_dir, raw
                    )
                    continue
                results["scenarios"][scenario] = _run_scenario(
                    scenario, names, args, mock, scenario_dir, raw
                )
                served = {  # their own table: server CPU, latency from the client
                    n: results["scenarios"][scenario]["contenders"].pop(n)
                    for n in C.CONTENDERS
                    if n in C.SERVED and n in results["scenarios"][scenario]["contenders"]
                }
                if served:
                    results.setdefault("served", {})[scenario] = served
            print("mock capacity", flush=True)
            results["mock_capacity"] = _capacity(mock, args.python, args.capacity_seconds)
            conc = [s for s in args.scenarios.split(",") if CONC.handles(s)]
            if conc:
                print("mock capacity at concurrency", flush=True)
                results["mock_capacity_concurrency"] = CONC.capacity(
                    sys.modules[__name__], mock, args.python, conc, args
                )
            if args.profile and "pilothouse-sqlite" in names:
                print("profile pilothouse-sqlite", flush=True)
                (workdir / "p").mkdir()
                results["profile"] = _profile(args, mock, workdir, args.out)
    finally:
        mock.close()
    (args.out / "results.json").write_text(json.dumps(results, indent=1))
    (args.out / "raw" / "latencies.json").write_text(json.dumps(raw))
    print(f"results in {args.out / 'results.json'}", flush=True)


if __name__ == "__main__":
    main()
